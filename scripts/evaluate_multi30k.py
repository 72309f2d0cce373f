"""Evaluate a translation checkpoint on the Multi30k test sets, greedy and beam 5, and print a
Markdown table (cased sacreBLEU 13a, lowercased BLEU, chrF, sentences/s).

    python3 scripts/evaluate_multi30k.py outputs/multi30k_de_en_cpu/.../checkpoints/best.ckpt
    python3 scripts/evaluate_multi30k.py best.ckpt --splits test_2016_flickr --beam-size 5 --out eval/
    python3 scripts/evaluate_multi30k.py run1/best.ckpt run2/best.ckpt --out eval_ensemble/   # an ensemble

Each row is exactly what `transformer-evaluate ckpt_path=<ckpt> split=<split> decode=<greedy|beam>`
writes (hypotheses and JSON land in --out).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformer.cli.evaluate import evaluate_checkpoint

SPLITS = ["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", nargs="+", help="one checkpoint, or several to decode as an ensemble")
    ap.add_argument("--splits", nargs="+", default=SPLITS)
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--length-penalty", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="default: eval/ beside the checkpoint")
    ap.add_argument("--data-dir", default="data/cache")
    ap.add_argument("--mirror-root", default=None)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    ckpt = args.ckpt[0] if len(args.ckpt) == 1 else args.ckpt
    default_dir = "eval" if len(args.ckpt) == 1 else "eval_ensemble"
    out = Path(args.out) if args.out else Path(args.ckpt[0]).resolve().parent / default_dir
    decodes = {
        "greedy": {"strategy": "greedy", "max_len_a": 1.2, "max_len_b": 10, "max_tokens": 4096},
        f"beam {args.beam_size}": {"strategy": "beam", "beam_size": args.beam_size,
                                   "length_penalty": args.length_penalty, "n_best": 1,
                                   "max_len_a": 1.2, "max_len_b": 10, "max_tokens": 4096},
    }
    rows, results = [], []
    for split in args.splits:
        for name, cfg in decodes.items():
            m = evaluate_checkpoint(ckpt, split, cfg, out, data_dir=args.data_dir,
                                    mirror_root=args.mirror_root, device=args.device)
            results.append(m)
            rows.append(f"| {m['pair']} | {split} | {name} | {m['bleu']:.2f} | {m['bleu_lowercase']:.2f} "
                        f"| {m['chrf']:.2f} | {m['sentences']} | {m['sentences_per_second']:.1f} |")
    (out / "summary.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print("| pair | split | decoding | BLEU (cased) | BLEU (lowercased) | chrF | sentences | sentences/s |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nsignature: {results[0]['bleu_signature']}")


if __name__ == "__main__":
    main()
