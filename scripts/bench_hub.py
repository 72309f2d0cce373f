"""Speed on pretrained weights: our modules against `transformers` (and against the CTranslate2
export of the same Marian model) on the same random weights.

    python3 scripts/bench_hub.py [--threads 1] [--json FILE]

Rows, each on a random model written as a Hugging Face folder (the tokenizers come from the
test helpers in tests/hub/, the models are built here at a mid size, weights drawn away from
their initial values as the helpers draw them) and read with ``hf:<folder>``:

* encoder: a BERT (hidden 256, 4 layers, 4 heads, intermediate 1024) on one padded batch of
  32 sentences of 40-64 pieces; our ``task.model.encode(src)`` against ``BertModel`` (``hf.bert``,
  last hidden state) under ``torch.inference_mode()``; tokens/s counts real (unpadded) pieces.
* Marian: a MarianMT (d_model 256, 3 + 3 layers, 4 heads, FFN 1024, the tests' SentencePiece
  vocabulary) translating 64 sentences, all in one batch on both sides, text in, text out: our
  ``task.translator(...).translate`` (what ``transformer-decode`` runs, ``accel=none``) against
  ``MarianTokenizer`` + ``generate`` + ``batch_decode`` with the settings tests/hub/test_marian.py
  uses; greedy and beam 5, length cap N new tokens. The script asserts both sides give the same
  lines before it times them.
* Marian on CTranslate2: the same model exported with ``transformer-export format=ctranslate2``
  (float32) and run through ``export.ctranslate2.CTranslate2Translator`` (what ``transformer-serve``
  runs for an export: ``ctranslate2.Translator``, ``--threads`` intra-op threads, the 64 sentences
  in one call), text in, text out, against our ``translate`` as above; greedy must give the same
  lines, beam 5 reports how many lines agree (CTranslate2 ranks finished hypotheses its own way).

Each row: warm-up, then ``--repeats`` interleaved runs (ours, theirs, ours, theirs, ...), median.
Needs ``transformers`` and ``sentencepiece`` (``pip install -e .[bench]`` or ``.[dev]``); the
CTranslate2 rows need ``ctranslate2`` (``.[export]``) and are skipped without it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "hub"))

from folders import sentences, train_tokenizer  # noqa: E402  (the tests' tokenizer builders)
from marian_folder import write_marian_folder  # noqa: E402

from transformer.cli.common import load_for_inference  # noqa: E402

BERT = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
            max_position_embeddings=128)
MARIAN = dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
              encoder_ffn_dim=1024, decoder_ffn_dim=1024, max_position_embeddings=128)


def interleaved(ours, theirs, repeats: int, warmup: int = 2) -> tuple[float, float]:
    """Median seconds of ``ours()`` and ``theirs()``, run alternately after a warm-up."""
    for _ in range(warmup):
        ours(), theirs()
    a, b = [], []
    for _ in range(repeats):
        for fn, times in ((ours, a), (theirs, b)):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(a), statistics.median(b)


# ----------------------------------------------------------------------------- encoder
def bert_folder(path: Path) -> Path:
    import transformers as tf

    tok = train_tokenizer("bert")
    torch.manual_seed(0)
    model = tf.BertForMaskedLM(tf.BertConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **BERT))
    with torch.no_grad():  # as tests/hub/folders.py draws them
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.3)
            else:
                p.normal_(0, 0.2)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


def encoder_row(root: Path, repeats: int, batch: int = 32) -> dict:
    import transformers

    folder = bert_folder(root / "bert")
    task, _ = load_for_inference(f"hf:{folder}", "cpu", "none")
    model = task.model.eval()
    hf = transformers.BertForMaskedLM.from_pretrained(folder).eval()
    tok = task.tokenizer
    pool = tok.encode(" ".join(sentences(400)))
    g = torch.Generator().manual_seed(0)
    ids, at = [], 0
    for n in torch.randint(38, 63, (batch,), generator=g).tolist():  # 40-64 pieces with [CLS] and [SEP]
        ids.append(tok.frame(pool[at:at + n]))
        at += n
    longest = max(map(len, ids))
    src = torch.tensor([i + [tok.pad_id] * (longest - len(i)) for i in ids])  # (B, T)
    mask = src.ne(tok.pad_id)
    with torch.inference_mode():
        diff = (model.encode(src) - hf.bert(src, attention_mask=mask.long()).last_hidden_state)[mask].abs().max()
        assert diff.item() < 1e-4, f"encoder states differ by {diff.item()}"
        ours, theirs = interleaved(lambda: model.encode(src),
                                   lambda: hf.bert(src, attention_mask=mask.long()).last_hidden_state, repeats)
    tokens = int(mask.sum())
    return {"batch": list(src.shape), "real tokens": tokens, "max abs difference": diff.item(),
            "ours s": ours, "transformers s": theirs, "ours tokens/s": tokens / ours,
            "transformers tokens/s": tokens / theirs, "ratio": theirs / ours}


# ----------------------------------------------------------------------------- Marian
def marian_folder(path: Path) -> Path:
    """The tests' folder (tokenizer and vocabulary), its model replaced by a mid-size one."""
    import transformers as tf

    write_marian_folder(path)
    tok = tf.MarianTokenizer.from_pretrained(path)
    cfg = tf.MarianConfig(vocab_size=len(tok), decoder_vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                          eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id,
                          forced_eos_token_id=tok.eos_token_id, activation_function="swish", scale_embedding=True,
                          share_encoder_decoder_embeddings=True, **MARIAN)
    torch.manual_seed(0)
    model = tf.MarianMTModel(cfg)
    scale = 0.3 * math.sqrt(32 / MARIAN["d_model"])  # the tests' 0.3 at d_model 32, kept per unit
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1 + torch.randn_like(p) * 0.3)
            else:
                p.normal_(0, scale)
        model.final_logits_bias.normal_(0, 0.1)
        model.final_logits_bias[0, tok.eos_token_id] += 3.0
    model.eval().save_pretrained(path)
    return path


def marian_rows(root: Path, repeats: int, max_new: int, threads: int, n: int = 64) -> dict:
    import transformers

    folder = marian_folder(root / "marian")
    task, device = load_for_inference(f"hf:{folder}", "cpu", "none")
    ct2 = ct2_translator(task, root / "marian_ct2", max_new, threads)
    hf = transformers.MarianMTModel.from_pretrained(folder).eval()
    tok = transformers.MarianTokenizer.from_pretrained(folder)
    texts = sentences(n + 300)[300:]
    rows = {}
    for beams in (1, 5):
        decode = {"strategy": "greedy" if beams == 1 else "beam", "beam_size": beams, "length_penalty": 1.0,
                  "max_len_a": 0.0, "max_len_b": max_new, "max_tokens": 10**6}  # all n in one batch
        translator = task.translator(decode, device=device)

        def ours():
            return [h[0][0] for h in translator.translate(texts)]

        def theirs():
            batch = tok(texts, padding=True, return_tensors="pt")
            out = hf.generate(**batch, num_beams=beams, do_sample=False, max_length=max_new + 1, length_penalty=1.0,
                              early_stopping=True, forced_eos_token_id=None, bad_words_ids=[[tok.pad_token_id]])
            return tok.batch_decode(out, skip_special_tokens=True)

        with torch.inference_mode():
            lines = ours()
            assert lines == theirs(), f"beam {beams}: our lines differ from generate's"
            t_ours, t_theirs = interleaved(ours, theirs, repeats)
        out_pieces = [len(task.tgt_tokenizer.encode(line)) for line in lines]
        rows["greedy" if beams == 1 else f"beam {beams}"] = {
            "sentences": n, "same lines": True, "mean output pieces (lines re-encoded)": sum(out_pieces) / n,
            "ours s": t_ours, "transformers s": t_theirs, "ours sentences/s": n / t_ours,
            "transformers sentences/s": n / t_theirs, "ratio": t_theirs / t_ours}
        if ct2 is not None:
            rows[f"{'greedy' if beams == 1 else f'beam {beams}'} ctranslate2"] = ct2_row(ours, ct2, texts, beams, repeats)
    return rows


# ----------------------------------------------------------------------------- CTranslate2
def ct2_translator(task, out: Path, max_new: int, threads: int):
    """The task's model exported to CTranslate2 (float32) and its translator, or None without
    ``ctranslate2``."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        print("ctranslate2 is not installed: the CTranslate2 rows are skipped", file=sys.stderr)
        return None
    from transformer.export.ctranslate2 import CTranslate2Translator, export_ctranslate2

    export_ctranslate2(task, out)
    return CTranslate2Translator(out, threads=threads, max_len_a=0.0, max_len_b=max_new, max_batch_size=10**6)


def ct2_row(ours, ct2, texts: list[str], beams: int, repeats: int) -> dict:
    n = len(texts)

    def theirs():
        return ct2.translate(texts, beam_size=beams, length_penalty=1.0)

    with torch.inference_mode():
        same = sum(a == b for a, b in zip(ours(), theirs()))
        if beams == 1:
            assert same == n, f"greedy: CTranslate2 gives {n - same} other lines"
        t_ours, t_theirs = interleaved(ours, theirs, repeats)
    return {"sentences": n, "same lines": same, "ours s": t_ours, "ctranslate2 s": t_theirs,
            "ours sentences/s": n / t_ours, "ctranslate2 sentences/s": n / t_theirs, "ratio": t_theirs / t_ours}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--repeats", type=int, default=15, help="timed runs per side (median)")
    ap.add_argument("--max-new", type=int, default=32, help="length cap N: max_len_b (ours), max_length N+1 (theirs)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    with tempfile.TemporaryDirectory() as tmp:
        table = {"encoder": encoder_row(Path(tmp), args.repeats)}
        table.update(marian_rows(Path(tmp), args.repeats, args.max_new, args.threads))
    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": args.threads,
            "repeats": args.repeats, "max_new": args.max_new, "bert": BERT, "marian": MARIAN}
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} thread(s), fp32, "
          f"median of {args.repeats} interleaved runs")
    print("| row | ours | transformers | ratio (theirs time / ours) |")
    print("|---|---|---|---|")
    e = table["encoder"]
    print(f"| encoder forward, {e['batch'][0]}x{e['batch'][1]} | {e['ours tokens/s']:.0f} tokens/s "
          f"| {e['transformers tokens/s']:.0f} tokens/s | {e['ratio']:.2f}x |")
    for name in ("greedy", "beam 5"):
        r = table[name]
        print(f"| Marian {name}, {r['sentences']} sentences, same lines | {r['ours sentences/s']:.1f} sentences/s "
              f"| {r['transformers sentences/s']:.1f} sentences/s | {r['ratio']:.2f}x |")
    ct2_names = [name for name in ("greedy ctranslate2", "beam 5 ctranslate2") if name in table]
    if ct2_names:
        print("\n| row | ours | CTranslate2 (float32) | ratio (CTranslate2 time / ours) |")
        print("|---|---|---|---|")
    for name in ct2_names:
        r = table[name]
        print(f"| Marian {name.removesuffix(' ctranslate2')}, {r['sentences']} sentences, {r['same lines']} same lines "
              f"| {r['ours sentences/s']:.1f} sentences/s | {r['ctranslate2 sentences/s']:.1f} sentences/s "
              f"| {r['ratio']:.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, **table}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
