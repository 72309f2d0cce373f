"""The exactness table: our modules against `transformers` on the same weights, per family.

    python3 scripts/hub_exactness.py [--json FILE]

Builds a tiny random model of each family from its config class (hidden 32, 2 layers, 2 heads,
weights drawn away from their initial values), saves it with its tokenizer to a temporary folder
(the test helpers in tests/hub/ do this), loads the folder with `load_task("hf:<folder>")`, and
prints the largest absolute difference of each output on a padded batch in fp32, real positions
only: BERT, RoBERTa and DistilBERT encoder states and masked-LM logits; MarianMT encoder states
and teacher-forced decoder logits. Needs `transformers` (`pip install -e .[bench]` or `.[dev]`).
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
        table["marian"] = marian(Path(tmp))
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, fp32, max |ours - theirs|")
    print("| family | output | max abs difference | largest logit (abs) |")
    print("|---|---|---|---|")
    for family, row in table.items():
        for name, diff in row.items():
            if name != "largest logit":
                print(f"| {family} | {name} | {diff:.1e} | {row['largest logit']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
