"""Fine-tuned heads: a ``*ForSequenceClassification`` folder reads as our classifier (the family's
pooler, classification head or pre-classifier as ``FirstPooling(dense=...)``), a
``*ForTokenClassification`` folder as our tagger, ``id2label`` as the labels; ``transformer-classify``
and ``transformer-tag`` with ``ckpt_path=hf:<folder>`` give the labels and scores of
``transformers``' pipelines to 1e-5. Offline: the folders are written here (``head_folders.py``)."""

from __future__ import annotations

import json

import pytest
import torch
from cli.hydra_helpers import main_status

from folders import WORDS
from head_folders import SEQUENCE_LABELS, TOKEN_LABELS, write_head_folder
from transformer.cli import classify as classify_cli
from transformer.cli import tag as tag_cli

from transformer.tasks.checkpoint import load_task

transformers = pytest.importorskip("transformers")

FAMILIES = ("bert", "roberta", "distilbert")
#: Whitespace-separated words without punctuation (which BERT's pre-tokenizer would split off),
#: accents, CJK and emoji included.
PLAIN = [w for w in WORDS if w.isalpha() or ord(w[0]) > 0x1F000]


def lines(n: int = 6) -> list[str]:
    g = torch.Generator().manual_seed(1)
    return [" ".join(PLAIN[i] for i in torch.randint(0, len(PLAIN), (int(k),), generator=g).tolist())
            for k in torch.randint(1, 9, (n,), generator=g)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    return {(family, form): write_head_folder(family, form, root / f"{family}-{form}")
            for family in FAMILIES for form in ("sequence", "token")}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sequence_classifier_classifies_as_the_pipeline(family, folders, tmp_path, capsys, monkeypatch):
    folder = folders[family, "sequence"]
    texts = lines()
    pipe = transformers.pipeline("text-classification", model=str(folder), tokenizer=str(folder), top_k=None)
    theirs = pipe(texts)
    monkeypatch.chdir(tmp_path)
    code, err = main_status(classify_cli, [f"ckpt_path=hf:{folder}", "output=out.jsonl", "format=jsonl",
                                           f"top_k={len(SEQUENCE_LABELS)}"], capsys, monkeypatch,
                            stdin="".join(t + "\n" for t in texts).encode())
    assert code == 0, err
    ours = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(ours) == len(texts)
    for mine, reference in zip(ours, theirs):
        assert mine["label"] == reference[0]["label"]
        scores = {row["label"]: row["probability"] for row in mine["top"]}
        assert set(scores) == set(SEQUENCE_LABELS)
        for row in reference:
            assert abs(scores[row["label"]] - row["score"]) < 1e-5, (row, scores)
    # the labels differ from sentence to sentence: the head is read, not a constant
    assert len({row["label"] for row in ours}) > 1 or len({round(r["probability"], 3) for r in ours}) > 1


@pytest.mark.parametrize("family", FAMILIES)
def test_a_token_classifier_tags_as_the_pipeline(family, folders, tmp_path, capsys, monkeypatch):
    folder = folders[family, "token"]
    texts = lines()
    pipe = transformers.pipeline("token-classification", model=str(folder), tokenizer=str(folder),
                                 aggregation_strategy="none", ignore_labels=[])
    task = load_task(f"hf:{folder}")
    assert task.tags == TOKEN_LABELS
    probs = task.tagger().tag_probabilities([t.split() for t in texts])
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    expected = []
    for text, p in zip(texts, probs):
        words = text.split()  # read as the tagger reads them: words given one by one
        word_ids = hf_tok(words, is_split_into_words=True).word_ids()
        rows = {row["index"]: row for row in pipe([words], is_split_into_words=True)[0]}
        rows = [rows[word_ids.index(w)] for w in range(len(words))]  # each word's first piece
        assert [TOKEN_LABELS[i] for i in p.argmax(-1).tolist()] == [row["entity"] for row in rows]
        assert torch.allclose(p.max(-1).values, torch.tensor([row["score"] for row in rows]), atol=1e-5)
        expected.append(" ".join(f"{w}_{row['entity']}" for w, row in zip(words, rows)))
    monkeypatch.chdir(tmp_path)
    code, err = main_status(tag_cli, [f"ckpt_path=hf:{folder}", "output=out.txt"], capsys, monkeypatch,
                            stdin="".join(t + "\n" for t in texts).encode())
    assert code == 0, err
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == expected
    assert len({tag for line in expected for tag in line.split()}) > 1


def test_model_max_length_cuts_a_sentence_as_transformers_truncates(folders, tmp_path):
    """``model_max_length`` of ``tokenizer_config.json`` (8 here) is where a sentence is cut, its
    ``[SEP]`` kept, as ``transformers``' tokenizer truncates it; shorter sentences are whole."""
    import shutil

    folder = tmp_path / "bert"
    shutil.copytree(folders["bert", "sequence"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 8}), encoding="utf-8")
    texts = ["the movie was great and the film was good and a good day", "the film"]
    classifier = load_task(f"hf:{folder}").classifier()
    ours = classifier.probabilities(texts)  # (2, C)
    assert classifier.truncated == 1
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tok(texts, truncation=True, padding=True, return_tensors="pt")
    assert batch["attention_mask"].sum(-1).tolist()[0] == 8
    with torch.no_grad():
        model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
        theirs = torch.softmax(model(**batch).logits, -1)
    assert torch.allclose(ours, theirs, atol=1e-5)
