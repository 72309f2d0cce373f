#!/usr/bin/env python3
"""Most-frequent-tag baseline for the tagging benchmarks, scored with the same metrics as
`transformer-evaluate` on a tagging checkpoint.

Each word gets the tag it carries most often in the training data the model is trained on
(for CoNLL-2000: the training file minus the last `--dev-size` sentences, which the
experiments hold out as dev); unseen words get the most frequent tag overall.

    python3 scripts/tagging_baseline.py                       # GUM upos+xpos, CoNLL-2000 pos; test
    python3 scripts/tagging_baseline.py --task gum:upos --split dev --output-dir baselines/
    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/tagging_baseline.py --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from transformer.evaluation.tagging import format_report, most_frequent_tag_baseline

DEFAULT_TASKS = ["gum:upos", "gum:xpos", "conll2000:pos"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", action="append", help="dataset:tagset (repeatable); default: %s" % DEFAULT_TASKS)
    ap.add_argument("--split", default="test")
    ap.add_argument("--data-dir", default="data/cache")
    ap.add_argument("--mirror-root", default=None, help="default: $TRANSFORMER_DATA_MIRROR, then HTTP")
    ap.add_argument("--dev-size", type=int, default=500, help="CoNLL-2000 sentences held out as dev")
    ap.add_argument("--output-dir", default=None, help="also write <dataset>.<tagset>.<split>.baseline.{json,txt}")
    ap.add_argument("--json", action="store_true", help="print the full metrics as JSON")
    args = ap.parse_args(argv)
    results = []
    for spec in args.task or DEFAULT_TASKS:
        dataset, _, tagset = spec.partition(":")
        m = most_frequent_tag_baseline(dataset, tagset, args.split, args.data_dir, args.mirror_root, args.dev_size)
        results.append(m)
        if args.output_dir:
            out = Path(args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            stem = out / f"{dataset}.{tagset}.{args.split}.baseline"
            stem.with_suffix(".json").write_text(json.dumps(m, indent=2) + "\n", encoding="utf-8")
            stem.with_suffix(".txt").write_text(format_report(m, f"{spec} {args.split} most-frequent-tag"), encoding="utf-8")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{'task':<16} {'split':<6} {'acc %':>7} {'unseen %':>9} {'unseen n':>9} {'sent %':>7}")
        for m in results:
            print(f"{m['dataset'] + ':' + m['tagset']:<16} {m['split']:<6} {100 * m['acc']:>7.2f} "
                  f"{100 * (m['unseen_acc'] or 0):>9.2f} {m['unseen_tokens']:>9} {100 * m['sentence_acc']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
