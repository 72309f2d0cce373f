"""The multilingual translation families (M2M100, NLLB, mBART-50) in our modules against
`transformers` on the same random weights: exactness, then M2M100's speed against `generate`.

    python3 scripts/hub_multilingual.py [--threads 1] [--repeats 9] [--json FILE] [--skip-speed]

Exactness: each family's tiny random folder (tests/hub/multi_folders.py: d_model 32, 2 + 2
layers, 2 heads, weights drawn away from their initial values) loaded with `hf:<folder>`; the
largest absolute difference of the encoder states and the teacher-forced decoder logits on a
padded batch (fp32, real positions only), and whether `transformer-decode ... src_lang=en
tgt_lang=fr` gives `generate`'s lines (its French code forced first) on 64 sentences, greedy
and beam 5 (length cap 20 new tokens, PAD banned on both sides).

Speed: an M2M100 of d_model 256, 3 + 3 layers, 4 heads, FFN 1024 (the tests' SentencePiece
vocabulary and 100 language codes) translating 64 sentences en -> fr in one batch, text in,
text out: our ``task.translator(...).translate`` (what ``transformer-decode`` runs,
``accel=none``) against ``M2M100Tokenizer`` + ``generate(forced_bos_token_id=...)`` +
``batch_decode``; greedy and beam 5, length cap N new tokens (``--max-new``). The lines are
checked equal before they are timed; warm-up, then ``--repeats`` interleaved runs, median.
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

from folders import sentences  # noqa: E402  (the tests' folder builders)
from multi_folders import CODES, FAMILIES, write_multi_folder  # noqa: E402

from transformer.tasks.checkpoint import load_task  # noqa: E402

TEXTS = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über"]
SPEED = dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=1024, decoder_ffn_dim=1024, max_position_embeddings=128)


def _hf(folder: Path):
    import transformers

    return transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), \
        transformers.AutoTokenizer.from_pretrained(folder)


def _generate(hf, tok, family: str, texts: list[str], beams: int, max_new: int) -> list[str]:
    code = tok.convert_tokens_to_ids(CODES[family][1])
    batch = tok(texts, padding=True, return_tensors="pt")
    out = hf.generate(**batch, num_beams=beams, do_sample=False, max_length=max_new + 2, length_penalty=1.0,
                      early_stopping=True, forced_eos_token_id=None, forced_bos_token_id=code,
                      bad_words_ids=[[tok.pad_token_id]])
    return tok.batch_decode(out[:, 2:], skip_special_tokens=True)  # after the start and the forced code


def _translate(task, beams: int, max_new: int):
    decode = {"strategy": "greedy" if beams == 1 else "beam", "beam_size": beams, "length_penalty": 1.0,
              "max_len_a": 0.0, "max_len_b": max_new, "max_tokens": 10**6}  # all sentences in one batch
    translator = task.translator(decode).set_target_language("fr", "en")
    return lambda texts: [h[0][0] for h in translator.translate(texts)]


def exactness(family: str, root: Path, max_new: int = 20) -> dict:
    folder = write_multi_folder(root / family, family)
    task = load_task(f"hf:{folder}")
    hf, tok = _hf(folder)
    batch = tok(TEXTS, text_target=TEXTS[::-1], padding=True, return_tensors="pt")
    labels = batch["labels"]  # (B, T)
    tgt_in = torch.cat([torch.full_like(labels[:, :1], hf.config.decoder_start_token_id), labels[:, :-1]], 1)
    src_real, tgt_real = batch["attention_mask"].bool(), labels.ne(tok.pad_token_id)
    texts = sentences(364)[300:]
    with torch.no_grad():
        out = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=tgt_in)
        memory = task.model.encode(batch["input_ids"]).memory
        logits = task.model(batch["input_ids"], tgt_in)
        lines = {beams: (_translate(task, beams, max_new)(texts), _generate(hf, tok, family, texts, beams, max_new))
                 for beams in (1, 5)}
    return {"encoder states": (memory - out.encoder_last_hidden_state)[src_real].abs().max().item(),
            "decoder logits": (logits - out.logits)[tgt_real].abs().max().item(),
            "largest logit": out.logits.abs().max().item(),
            **{f"{'greedy' if b == 1 else f'beam {b}'} lines equal": sum(x == y for x, y in zip(*pair))
               for b, pair in lines.items()}, "sentences": len(texts)}


def speed_folder(path: Path) -> Path:
    """The tests' M2M100 folder (tokenizer and codes), its model replaced by a mid-size one."""
    import transformers as tf

    write_multi_folder(path, "m2m100")
    tok = tf.M2M100Tokenizer.from_pretrained(path)
    vocab = max(tok.lang_token_to_id.values()) + 1 + 8
    cfg = tf.M2M100Config(vocab_size=vocab, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                          bos_token_id=tok.bos_token_id, decoder_start_token_id=tok.eos_token_id,
                          encoder_layerdrop=0.0, decoder_layerdrop=0.0, **SPEED)
    torch.manual_seed(0)
    model = tf.M2M100ForConditionalGeneration(cfg)
    scale = 0.3 * math.sqrt(32 / SPEED["d_model"])  # the tests' 0.3 at d_model 32, kept per unit
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1 + torch.randn_like(p) * 0.3)
            else:
                p.normal_(0, scale)
        model.lm_head.weight[tok.eos_token_id] += 0.3
        model.lm_head.weight[len(tok.encoder):] *= 0.1  # codes and made-up words: rarely chosen
    model.eval().save_pretrained(path)
    return path


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


def speed(root: Path, repeats: int, max_new: int, n: int = 64) -> dict:
    folder = speed_folder(root / "m2m100_speed")
    task = load_task(f"hf:{folder}")
    hf, tok = _hf(folder)
    texts = sentences(n + 300)[300:]
    rows = {}
    for beams in (1, 5):
        translate = _translate(task, beams, max_new)
        with torch.inference_mode():
            lines = translate(texts)
            assert lines == _generate(hf, tok, "m2m100", texts, beams, max_new), f"beam {beams}: lines differ"
            t_ours, t_theirs = interleaved(lambda: translate(texts),
                                           lambda: _generate(hf, tok, "m2m100", texts, beams, max_new), repeats)
        rows["greedy" if beams == 1 else f"beam {beams}"] = {
            "sentences": n, "same lines": True, "empty lines": sum(not line for line in lines),
            "ours s": t_ours, "transformers s": t_theirs, "ours sentences/s": n / t_ours,
            "transformers sentences/s": n / t_theirs, "ratio": t_theirs / t_ours}
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--repeats", type=int, default=9, help="timed runs per side (median)")
    ap.add_argument("--max-new", type=int, default=32, help="speed rows' length cap N of new tokens")
    ap.add_argument("--skip-speed", action="store_true", help="the exactness table only")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    import transformers

    with tempfile.TemporaryDirectory() as tmp:
        table = {family: exactness(family, Path(tmp)) for family in FAMILIES}
        fast = {} if args.skip_speed else speed(Path(tmp), args.repeats, args.max_new)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, fp32, {args.threads} thread(s)")
    print("| family | encoder states | decoder logits | largest logit | greedy lines equal | beam 5 lines equal |")
    print("|---|---|---|---|---|---|")
    for family, r in table.items():
        print(f"| {family} | {r['encoder states']:.1e} | {r['decoder logits']:.1e} | {r['largest logit']:.1f} "
              f"| {r['greedy lines equal']} of {r['sentences']} | {r['beam 5 lines equal']} of {r['sentences']} |")
    if fast:
        print(f"\n| M2M100 row, median of {args.repeats} | ours | transformers | ratio (theirs time / ours) |")
        print("|---|---|---|---|")
        for name, r in fast.items():
            print(f"| {name}, {r['sentences']} sentences, same lines | {r['ours sentences/s']:.1f} sentences/s "
                  f"| {r['transformers sentences/s']:.1f} sentences/s | {r['ratio']:.2f}x |")
    if args.json:
        meta = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": args.threads,
                "repeats": args.repeats, "max_new": args.max_new, "speed model": SPEED}
        Path(args.json).write_text(json.dumps({"meta": meta, "exactness": table, "speed": fast}, indent=2) + "\n",
                                   encoding="utf-8")


if __name__ == "__main__":
    main()
