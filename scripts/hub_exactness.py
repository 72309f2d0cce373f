"""The exactness table: our modules against `transformers` on the same weights, per family.

    python3 scripts/hub_exactness.py [--json FILE]

Builds a tiny random model of each family from its config class (hidden 32, 2 layers, 2 heads,
weights drawn away from their initial values), saves it with its tokenizer to a temporary folder
(the test helpers in tests/hub/ do this), loads the folder with `load_task("hf:<folder>")`, and
prints the largest absolute difference of each output on a padded batch in fp32, real positions
only: BERT, RoBERTa and DistilBERT encoder states and masked-LM logits; each family's encoder
alone (``BertModel`` ...) against its states, its fine-tuned sequence and token classifiers
(``*ForSequenceClassification``, ``*ForTokenClassification``) against their logits and the
``text-classification`` and ``token-classification`` pipelines' labels and scores; MarianMT
encoder states and teacher-forced decoder logits. Needs `transformers` (`pip install -e .[bench]` or `.[dev]`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "hub"))

from folders import write_folder  # noqa: E402  (the tests' tiny-folder builders)
from head_folders import write_head_folder  # noqa: E402
from marian_folder import write_marian_folder  # noqa: E402

from transformer.tasks.checkpoint import load_task  # noqa: E402

TEXTS = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über"]


def encoder_family(family: str, root: Path) -> dict[str, float]:
    import transformers

    folder = write_folder(family, root / family)
    task = load_task(f"hf:{folder}")
    hf = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    tok = task.tokenizer
    ids = [tok.frame(tok.encode(t)) for t in TEXTS]
    longest = max(map(len, ids))
    src = torch.tensor([i + [tok.pad_id] * (longest - len(i)) for i in ids])  # (B, T)
    real = src.ne(tok.pad_id)
    with torch.no_grad():
        out = hf(input_ids=src, attention_mask=real.long(), output_hidden_states=True)
        states, logits = task.model.encode(src), task.model(src)
    return {"encoder states": (states - out.hidden_states[-1])[real].abs().max().item(),
            "masked-LM logits": (logits - out.logits)[real].abs().max().item(),
            "largest logit": out.logits.abs().max().item()}


def _padded(tok, rows: list[list[int]]) -> torch.Tensor:
    longest = max(map(len, rows))
    return torch.tensor([r + [tok.pad_id] * (longest - len(r)) for r in rows])  # (B, T)


def encoder_alone(family: str, root: Path) -> dict[str, float | None]:
    """The family's base model (``BertModel`` ...) read as the encoder that starts fine-tuning."""
    import transformers

    from transformer.hub import init_checkpoint
    from transformer.models.mlm import MaskedLanguageModel
    from transformer.tasks.build import build_model

    folder = write_head_folder(family, "encoder", root / f"{family}-encoder")
    ckpt = init_checkpoint(f"hf:{folder}")
    hp = ckpt["hyper_parameters"]
    model = build_model(hp["model"], vocab_size=hp["piece_vocab_size"], pad_id=hp["pad_id"])
    assert isinstance(model, MaskedLanguageModel)
    model.encoder.load_state_dict({k[len("model.encoder."):]: v for k, v in ckpt["state_dict"].items()})
    model.eval()
    load = transformers.AutoTokenizer.from_pretrained(folder)
    src = torch.tensor(load(TEXTS, padding=True)["input_ids"])  # (B, T)
    real = src.ne(hp["pad_id"])
    with torch.no_grad():
        theirs = transformers.AutoModel.from_pretrained(folder).eval()(input_ids=src, attention_mask=real.long())
        states = model.encode(src)
    return {"encoder states": (states - theirs.last_hidden_state)[real].abs().max().item(),
            "largest logit": None}


def sequence_classifier(family: str, root: Path) -> dict[str, float]:
    """``*ForSequenceClassification`` as our classifier: logits, and ``transformer-classify``'s
    probabilities against the text-classification pipeline's (every label's score)."""
    import transformers

    folder = write_head_folder(family, "sequence", root / f"{family}-sequence")
    task = load_task(f"hf:{folder}")
    tok = task.tokenizer
    src = _padded(tok, [tok.frame(tok.encode(t)) for t in TEXTS])
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    pipe = transformers.pipeline("text-classification", model=str(folder), tokenizer=str(folder), top_k=None)
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=src.ne(tok.pad_id).long()).logits  # (B, C)
        ours = task.model(src)
    probs = task.classifier().probabilities(TEXTS)  # (B, C)
    scores, same = 0.0, 0
    for row, answer in zip(probs, pipe(TEXTS)):
        same += task.labels[int(row.argmax())] == answer[0]["label"]
        scores = max(scores, max(abs(row[task.labels.index(a["label"])].item() - float(a["score"])) for a in answer))
    return {"classifier logits": (ours - theirs).abs().max().item(),
            f"pipeline scores (labels: {same} of {len(TEXTS)} equal)": scores,
            "largest logit": theirs.abs().max().item()}


def token_classifier(family: str, root: Path) -> dict[str, float]:
    """``*ForTokenClassification`` as our tagger: each word's logits (its first piece's), and
    ``transformer-tag``'s probabilities against the token-classification pipeline's."""
    import transformers

    folder = write_head_folder(family, "token", root / f"{family}-token")
    task = load_task(f"hf:{folder}")
    load = transformers.AutoTokenizer.from_pretrained(folder)
    hf = transformers.AutoModelForTokenClassification.from_pretrained(folder).eval()
    pipe = transformers.pipeline("token-classification", model=str(folder), tokenizer=str(folder),
                                 aggregation_strategy="none", ignore_labels=[])
    sentences = [t.replace(".", "").split() for t in TEXTS]
    probs = task.tagger().tag_probabilities(sentences)
    logits, scores, same, words = 0.0, 0.0, 0, 0
    largest = 0.0
    for words_of, p in zip(sentences, probs):
        enc = load(words_of, is_split_into_words=True, return_tensors="pt")
        firsts = [enc.word_ids().index(w) for w in range(len(words_of))]
        ids, word_ids = task.tokenizer.encode_words(words_of)
        prefix, _ = task.tokenizer.framing
        src = torch.tensor([task.tokenizer.frame(ids)])  # (1, T)
        wid = torch.tensor([[-1] * len(prefix) + word_ids + [-1] * (src.size(1) - len(prefix) - len(ids))])
        with torch.no_grad():
            theirs = hf(**enc).logits[0, firsts]  # (W, C)
            ours = task.model(src, wid)[0]  # (W, C)
        logits, largest = max(logits, (ours - theirs).abs().max().item()), max(largest, theirs.abs().max().item())
        rows = {r["index"]: r for r in pipe([words_of], is_split_into_words=True)[0]}
        for w, first in enumerate(firsts):
            same += task.tags[int(p[w].argmax())] == rows[first]["entity"]
            scores = max(scores, abs(p[w].max().item() - float(rows[first]["score"])))
            words += 1
    return {"tagger logits (first pieces)": logits, f"pipeline scores (labels: {same} of {words} equal)": scores,
            "largest logit": largest}


def marian(root: Path) -> dict[str, float]:
    import transformers

    folder = write_marian_folder(root / "marian")
    task = load_task(f"hf:{folder}")
    hf = transformers.MarianMTModel.from_pretrained(folder).eval()
    tok = transformers.MarianTokenizer.from_pretrained(folder)
    batch = tok(TEXTS, text_target=TEXTS[::-1], padding=True, return_tensors="pt")
    labels = batch["labels"]  # (B, T)
    tgt_in = torch.cat([torch.full_like(labels[:, :1], hf.config.decoder_start_token_id), labels[:, :-1]], 1)
    src_real, tgt_real = batch["attention_mask"].bool(), labels.ne(tok.pad_token_id)
    with torch.no_grad():
        out = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=tgt_in)
        memory = task.model.encode(batch["input_ids"]).memory
        logits = task.model(batch["input_ids"], tgt_in)
    return {"encoder states": (memory - out.encoder_last_hidden_state)[src_real].abs().max().item(),
            "decoder logits": (logits - out.logits)[tgt_real].abs().max().item(),
            "largest logit": out.logits.abs().max().item()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="also write the table here")
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        table = {family: encoder_family(family, Path(tmp)) for family in ("bert", "roberta", "distilbert")}
        for family in ("bert", "roberta", "distilbert"):
            table[f"{family} encoder alone"] = encoder_alone(family, Path(tmp))
            table[f"{family} sequence classifier"] = sequence_classifier(family, Path(tmp))
            table[f"{family} token classifier"] = token_classifier(family, Path(tmp))
        table["marian"] = marian(Path(tmp))
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, fp32, max |ours - theirs|")
    print("| family | output | max abs difference | largest logit (abs) |")
    print("|---|---|---|---|")
    for family, row in table.items():
        for name, diff in row.items():
            if name != "largest logit":
                largest = row["largest logit"]
                print(f"| {family} | {name} | {diff:.1e} | {'–' if largest is None else f'{largest:.1f}'} |")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
