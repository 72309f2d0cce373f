"""Evaluate a translation checkpoint on the Multi30k test sets, greedy and beam 5, and print a
Markdown table (cased sacreBLEU 13a, lowercased BLEU, chrF, sentences/s).

    python3 scripts/evaluate_multi30k.py outputs/multi30k_de_en_cpu/.../checkpoints/best.ckpt
    python3 scripts/evaluate_multi30k.py best.ckpt --splits test_2016_flickr --beam-size 5 --out eval/
    python3 scripts/evaluate_multi30k.py run1/best.ckpt run2/best.ckpt --out eval_ensemble/   # an ensemble

Each row is exactly what `transformer-evaluate ckpt_path=<ckpt> split=<split> decode.strategy=<greedy|beam>`
writes (hypotheses and JSON land in --out, with every row in summary.json).
"""

from __future__ import annotations

import argparse

from transformer.cli.evaluate import evaluate_grid
from transformer.evaluation.translation import markdown_table

SPLITS = ["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", nargs="+", help="one checkpoint, or several to decode as an ensemble")
    ap.add_argument("--splits", nargs="+", default=SPLITS)
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--length-penalty", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="default: eval/ (eval_ensemble/) beside the (first) checkpoint")
    ap.add_argument("--data-dir", default="data/cache")
    ap.add_argument("--mirror-root", default=None)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    lengths = {"max_len_a": 1.2, "max_len_b": 10, "max_tokens": 4096}
    decodes = [{"strategy": "greedy", **lengths},
               {"strategy": "beam", "beam_size": args.beam_size, "length_penalty": args.length_penalty,
                "n_best": 1, **lengths}]
    ckpt = args.ckpt[0] if len(args.ckpt) == 1 else args.ckpt
    results = evaluate_grid(ckpt, args.splits, decodes, args.out, data_dir=args.data_dir,
                            mirror_root=args.mirror_root, device=args.device)
    print(markdown_table(results))


if __name__ == "__main__":
    main()
