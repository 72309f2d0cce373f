"""Folders without a masked-LM head: an encoder alone (``BertModel``, ``RobertaModel``,
``DistilBertModel``, with or without the pooler) starts a classifier, a tagger or further
pretraining with ``init_from=hf:<folder>`` (one warning names what starts fresh), and
``transformer-fill`` refuses it in one line naming the head it lacks. A fine-tuned classifier
folder fine-tunes further from its encoder, and the result classifies with the folder gone.
Bad heads are one ``error:`` line. Offline: the folders are written here (``head_folders.py``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from cli.hydra_helpers import main_status

from folders import sentences
from head_folders import write_head_folder
from test_fine_tune import conllu, texts
from transformer.cli import classify as classify_cli
from transformer.cli import fill as fill_cli
from transformer.cli import train as train_cli
from transformer.hub import init_checkpoint
from transformer.tasks.checkpoint import read_checkpoint

transformers = pytest.importorskip("transformers")

QUIET = ["logger.tensorboard=null", "callbacks.progress_bar=null"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    rows = texts(40, 0)
    (root / "labels.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
    (root / "toy.conllu").write_text(conllu([t for t, _ in rows]), encoding="utf-8")
    (root / "corpus.txt").write_text("\n".join(sentences(80)) + "\n", encoding="utf-8")
    return root


def train_args(kind: str, corpus: Path, folder: Path, run: Path) -> list[str]:
    common = ["debug=fast", "task.lr=0.0", f"init_from=hf:{folder}", f"data.data_dir={run.parent / 'cache'}",
              "test_splits=[]", *QUIET, f"hydra.run.dir={run}"]
    if kind == "classifier":
        data = corpus / "labels.tsv"
        return ["experiment=classify", f"data.train={data}", f"data.dev={data}", "model.dropout=0.0", *common]
    if kind == "tagger":
        data = corpus / "toy.conllu"
        return ["experiment=ud_upos", f"data.train={data}", f"data.dev={data}", "model.window=null",
                "model.pooling=first", "model.char_channels=0", "model.dropout=0.0", *common]
    return ["experiment=pretrain", f"data.files=[{corpus / 'corpus.txt'}]", "task.warmup_steps=0",
            "data.max_tokens=512", "data.valid_fraction=0.2", *common]


def warnings(run: Path) -> list[str]:
    return [line for line in (run / "train.log").read_text(encoding="utf-8").splitlines()
            if "[WARNING]" in line and "init_from:" in line]


@pytest.mark.parametrize("family, pooler, kind, fresh", [
    ("bert", True, "classifier", "classifier, pooling"),
    ("bert", False, "tagger", "classifier"),
    ("roberta", True, "pretrain", "head_dense, head_norm, output_bias"),
    ("distilbert", False, "classifier", "classifier, pooling"),
])
def test_an_encoder_alone_starts_a_model_with_a_fresh_head(family, pooler, kind, fresh, corpus, tmp_path, capsys,
                                                           monkeypatch):
    folder = write_head_folder(family, "encoder", tmp_path / family, pooler=pooler)
    run = tmp_path / "run"
    code, err = main_status(train_cli, train_args(kind, corpus, folder, run), capsys, monkeypatch)
    assert code == 0, err
    said = warnings(run)
    assert len(said) == 1, said
    assert "holds the encoder alone, without the masked-LM head" in said[0] and said[0].endswith(f"fresh: {fresh}")
    assert ("not used: pooler.dense.bias, pooler.dense.weight" in said[0]) == pooler
    # the encoder is the folder's, tensor by tensor (learning rate 0)
    state = read_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"]
    base = transformers.AutoModel.from_pretrained(folder)
    assert torch.equal(state["model.encoder.embedding.weight"], base.embeddings.word_embeddings.weight)
    source = init_checkpoint(f"hf:{folder}")["state_dict"]
    assert all(torch.equal(state[k], v) for k, v in source.items())


def test_a_sentence_transformers_folder_fine_tunes_on_the_ids_transformers_gives(corpus, tmp_path, capsys,
                                                                                monkeypatch):
    """The issue's folder: a ``BertModel`` without the masked-LM head whose ``tokenizer.json`` pads
    and truncates to 128 pieces. Training reads each row as ``AutoTokenizer`` does: ``[CLS] … [SEP]``,
    no padding."""
    import datasets

    folder = write_head_folder("bert", "encoder", tmp_path / "minilm")
    state = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    state["padding"] = {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                        "pad_type_id": 0, "pad_token": "[PAD]"}
    state["truncation"] = {"direction": "Right", "max_length": 128, "strategy": "LongestFirst", "stride": 0}
    (folder / "tokenizer.json").write_text(json.dumps(state), encoding="utf-8")
    run = tmp_path / "run"
    code, err = main_status(train_cli, train_args("classifier", corpus, folder, run), capsys, monkeypatch)
    assert code == 0, err
    theirs = transformers.AutoTokenizer.from_pretrained(folder)([t for t, _ in texts(40, 0)])["input_ids"]
    assert max(map(len, theirs)) < 20
    cached = sorted((tmp_path / "cache" / "arrow").glob("*.arrow"))
    assert cached
    for path in cached:  # what training read, row by row
        rows = datasets.Dataset.from_file(str(path))
        assert [theirs[i] for i in rows["index"]] == rows["src"]


@pytest.mark.parametrize("family, head", [("bert", "cls.*"), ("distilbert", "vocab_layer_norm.*")])
def test_fill_refuses_an_encoder_alone_naming_the_head(family, head, tmp_path, capsys, monkeypatch):
    folder = write_head_folder(family, "encoder", tmp_path / family)
    code, err = main_status(fill_cli, [f"ckpt_path=hf:{folder}"], capsys, monkeypatch, stdin=b"the [MASK] .\n")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: hf:{folder}: a {'BertModel' if family == 'bert' else 'DistilBertModel'} "
                               f"folder holds the encoder alone, without the masked-LM head (")
    assert head in lines[0] and f"init_from=hf:{folder}" in lines[0], lines[0]


def test_a_fine_tuned_classifier_fine_tunes_further_and_needs_nothing_of_it(corpus, tmp_path, capsys, monkeypatch):
    folder = write_head_folder("roberta", "sequence", tmp_path / "roberta")
    run = tmp_path / "run"
    args = [a for a in train_args("classifier", corpus, folder, run) if a != "task.lr=0.0"]
    args += ["task.lr=1e-3", "model.pooling._target_=transformer.models.pooling.FirstPooling",
             "+model.pooling.dense=tanh"]
    code, err = main_status(train_cli, args, capsys, monkeypatch)
    assert code == 0, err
    said = warnings(run)
    assert len(said) == 1 and "a RobertaForSequenceClassification folder holds a sequence classifier" in said[0], said
    assert said[0].endswith("fresh: classifier, pooling")
    tuned = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert tuned["hyper_parameters"]["model"]["pooling"]["dense"] == "tanh"
    shutil.rmtree(folder)
    monkeypatch.chdir(tmp_path)
    code, err = main_status(classify_cli, [f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "output=out.txt"],
                            capsys, monkeypatch, stdin=b"the movie was great\nthe film was bad\n")
    assert code == 0, err
    out = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert len(out) == 2 and all(line.split("\t")[0] in ("pos", "neg") for line in out)


def test_a_classifier_of_the_same_labels_continues_from_the_folders_head(corpus, tmp_path, capsys, monkeypatch):
    """The folder's labels are the data's (in another order): its dense layer and label rows are
    copied, each row to its label, so before any update the checkpoint classifies as the folder."""
    folder = write_head_folder("bert", "sequence", tmp_path / "bert", labels=["pos", "neg"])
    run = tmp_path / "run"
    args = train_args("classifier", corpus, folder, run) + [
        "model.pooling._target_=transformer.models.pooling.FirstPooling", "+model.pooling.dense=tanh"]
    code, err = main_status(train_cli, args, capsys, monkeypatch)
    assert code == 0, err
    assert not warnings(run)  # nothing starts fresh
    log = (run / "train.log").read_text(encoding="utf-8")
    assert "its encoder and head (classifier.bias, classifier.weight, pooling.dense.bias, pooling.dense.weight) " \
           "are copied" in log
    pipe = transformers.pipeline("text-classification", model=str(folder), tokenizer=str(folder), top_k=None)
    lines = ["the movie was great", "the film was bad", "café naïve 日本語"]
    theirs = pipe(lines)
    shutil.rmtree(folder)
    monkeypatch.chdir(tmp_path)
    code, err = main_status(classify_cli, [f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "output=out.jsonl",
                                           "format=jsonl", "top_k=2"], capsys, monkeypatch,
                            stdin="".join(t + "\n" for t in lines).encode())
    assert code == 0, err
    ours = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    for mine, reference in zip(ours, theirs):
        scores = {row["label"]: row["probability"] for row in mine["top"]}
        assert mine["label"] == reference[0]["label"]
        assert all(abs(scores[row["label"]] - row["score"]) < 1e-5 for row in reference)


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


@pytest.mark.parametrize("change, message", [
    ({"id2label": {"0": "NEGATIVE", "1": "POSITIVE"}},
     r"weights: classifier\.weight scores 3 labels, but config\.json's id2label names 2"),
    ({"id2label": {"0": "A", "2": "B", "1": "A"}}, r"config\.json: id2label names 'A' twice"),
    ({"id2label": {"0": "A", "2": "B"}}, r"config\.json: id2label has the ids \[0, 2\]: expected 0 to 1, each once"),
    ({"id2label": {"zero": "A"}}, r"config\.json: id2label has the key 'zero': expected ids"),
    ({"_num_labels": 2}, r"config\.json: _num_labels=2, but id2label names 3 labels"),
    ({"problem_type": "multi_label_classification"}, r"config\.json: problem_type='multi_label_classification' has "
                                                     r"no place in our model"),
])
def test_a_bad_head_is_one_error_line(change, message, tmp_path, capsys, monkeypatch):
    folder = write_head_folder("bert", "sequence", tmp_path / "bert")
    edit_config(folder, **change)
    code, err = main_status(classify_cli, [f"ckpt_path=hf:{folder}"], capsys, monkeypatch, stdin=b"the movie\n")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: ") and re.search(message, lines[0]), lines[0]
