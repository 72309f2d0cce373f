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
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from transformer.tasks.checkpoint import load_task
from transformer.tasks.tag_metrics import tagging_metrics
from transformer.tasks.tagging import read_tagged_split


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ckpts", nargs="+", help="tagging checkpoints (transformer-train, task=tagging)")
    p.add_argument("--split", default="test")
    p.add_argument("--data-dir", default="data/cache")
    p.add_argument("--mirror-root", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--output", help="also write the JSON here")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = [load_task(path).to(args.device) for path in args.ckpts]
    first = tasks[0]
    if getattr(first, "task_name", None) != "tagging":
        raise SystemExit(f"{args.ckpts[0]}: not a tagging checkpoint")
    for path, task in zip(args.ckpts[1:], tasks[1:]):
        same = (getattr(task, "task_name", None) == "tagging" and task.tags == first.tags
                and task.hparams.data["name"] == first.hparams.data["name"] and task.tagset == first.tagset)
        if not same:
            raise SystemExit(f"{path}: another dataset, tag set or tag inventory than {args.ckpts[0]}")
    sents = read_tagged_split(first.hparams.data, args.split, args.data_dir, args.mirror_root)
    words = [s.words for s in sents]
    gold = [getattr(s, first.tagset) for s in sents]

    members, total = [], None
    for path, task in zip(args.ckpts, tasks):
        probs = task.tag_probabilities(words, device=args.device)  # per sentence (n_words, C)
        pred = [[task.tags[i] for i in p.argmax(-1).tolist()] for p in probs]
        m = tagging_metrics(gold, pred, words, first.train_words)
        members.append({"checkpoint": path, "acc": m["acc"], "unseen_acc": m.get("unseen_acc")})
        total = probs if total is None else [a + b for a, b in zip(total, probs)]
    pred = [[first.tags[i] for i in p.argmax(-1).tolist()] for p in total]
    metrics = tagging_metrics(gold, pred, words, first.train_words)
    report = {"split": args.split, "dataset": first.hparams.data["name"], "tagset": first.hparams.data["tagset"],
              "members": members, "ensemble": {k: v for k, v in metrics.items() if k not in ("per_tag", "confusions")}}
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return report


if __name__ == "__main__":
    main()
