#!/usr/bin/env python3
"""Score an ensemble of tagging checkpoints: each word gets the tag with the highest mean
probability over the models (each model reads the words with its own tokenizer), scored with
the same metrics as `transformer-evaluate` on one checkpoint.

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/tagging_ensemble.py \
        runs/gum_upos/checkpoints/a.ckpt runs/gum_upos_seed1/checkpoints/b.ckpt --split test

All checkpoints must be taggers of the same dataset and tag set with the same tag inventory;
unseen-word accuracy uses the first checkpoint's training words. Also prints each member's
accuracy on the split, so the ensemble's gain over its members is visible. For the ensemble
alone, with the evaluate CLI's report files, use ``transformer-evaluate "ckpt_path=[a,b]"``
(``TaggingTask.ensemble``; the same probabilities, the same metrics).

With ``--choose-on dev`` the checkpoints are candidates: every non-empty subset of them is
scored on the dev split (mean probabilities, as above), the one with the most words right is
kept (ties: fewer members, then the earlier checkpoints), and only that subset is scored on
``--split``. The report lists the best subsets on dev under ``selection``, so an ensemble
chosen this way never looked at the split it is reported on.

The work is ``transformer.evaluation.tagging.ensemble_report``; this script parses the
arguments and prints (and optionally writes) its JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from transformer.evaluation.tagging import ensemble_report
from transformer.tasks.checkpoint import load_task


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ckpts", nargs="+", help="tagging checkpoints (transformer-train, task=tagging)")
    p.add_argument("--split", default="test")
    p.add_argument("--data-dir", default="data/cache")
    p.add_argument("--mirror-root", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--output", help="also write the JSON here")
    p.add_argument("--choose-on", metavar="SPLIT",
                   help="score every subset of the checkpoints on SPLIT and report only the best one on --split")
    p.add_argument("--top", type=int, default=10, help="with --choose-on: how many subsets to list")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        tasks = [load_task(path) for path in args.ckpts]
        report = ensemble_report(tasks, args.ckpts, args.split, args.data_dir, args.mirror_root, args.device,
                                 args.choose_on, args.top)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2) + "\n"
    sys.stdout.write(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
