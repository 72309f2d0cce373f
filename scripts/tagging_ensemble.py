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
"""

from __future__ import annotations

import argparse
import itertools
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
    p.add_argument("--choose-on", metavar="SPLIT",
                   help="score every subset of the checkpoints on SPLIT and report only the best one on --split")
    p.add_argument("--top", type=int, default=10, help="with --choose-on: how many subsets to list")
    return p.parse_args(argv)


def rank_subsets(member_probs: list[list[torch.Tensor]], gold_ids: list[list[int]]) -> list[dict]:
    """Every non-empty subset of the members, by the number of words its mean probability
    tags right: most first, then fewer members, then earlier members.

    ``member_probs[m][s]`` is member m's (n_words, n_tags) probabilities for sentence s;
    ``gold_ids[s]`` the gold tag indices (-1 for a tag outside the inventory: never right).
    Returns ``[{"members": (indices), "correct": int, "tokens": int, "acc": fraction}]``.
    """
    gold = torch.tensor([i for sent in gold_ids for i in sent], dtype=torch.long)
    flat = []
    for m, probs in enumerate(member_probs):
        if [len(p) for p in probs] != [len(g) for g in gold_ids]:
            raise ValueError(f"member {m}: its sentences do not align with the gold tags")
        flat.append(torch.cat([p.float() for p in probs]) if probs else torch.zeros(0, 1))
    ranked = []
    for size in range(1, len(flat) + 1):
        for subset in itertools.combinations(range(len(flat)), size):
            pred = sum(flat[i] for i in subset).argmax(-1) if len(gold) else gold
            correct = int((pred == gold).sum())
            ranked.append({"members": subset, "correct": correct, "tokens": len(gold),
                           "acc": correct / len(gold) if len(gold) else None})
    ranked.sort(key=lambda r: (-r["correct"], len(r["members"]), r["members"]))
    return ranked


def _check_same_tagger_kind(paths, tasks) -> None:
    first = tasks[0]
    if getattr(first, "task_name", None) != "tagging":
        raise SystemExit(f"{paths[0]}: not a tagging checkpoint")
    for path, task in zip(paths[1:], tasks[1:]):
        same = (getattr(task, "task_name", None) == "tagging" and task.tags == first.tags
                and task.hparams.data["name"] == first.hparams.data["name"] and task.tagset == first.tagset)
        if not same:
            raise SystemExit(f"{path}: another dataset, tag set or tag inventory than {paths[0]}")


def _split_words_and_gold(task, split: str, args):
    sents = read_tagged_split(task.hparams.data, split, args.data_dir, args.mirror_root)
    return [s.words for s in sents], [getattr(s, task.tagset) for s in sents]


def choose(args, tasks) -> tuple[list[int], dict]:
    """The subset of ``tasks`` best on ``args.choose_on``, and the selection report."""
    first = tasks[0]
    words, gold = _split_words_and_gold(first, args.choose_on, args)
    index = {t: i for i, t in enumerate(first.tags)}
    gold_ids = [[index.get(t, -1) for t in sent] for sent in gold]
    probs = [task.tag_probabilities(words, device=args.device) for task in tasks]
    ranked = rank_subsets(probs, gold_ids)
    chosen = list(ranked[0]["members"])
    listing = [{"checkpoints": [args.ckpts[i] for i in r["members"]], "acc": r["acc"], "correct": r["correct"]}
               for r in ranked[: args.top]]
    singles = {r["members"][0]: r["acc"] for r in ranked if len(r["members"]) == 1}
    return chosen, {"split": args.choose_on, "tokens": ranked[0]["tokens"], "subsets": len(ranked),
                    "chosen": [args.ckpts[i] for i in chosen], "best": listing,
                    "single_acc": [singles[i] for i in range(len(tasks))]}


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = [load_task(path).to(args.device) for path in args.ckpts]
    _check_same_tagger_kind(args.ckpts, tasks)
    paths, selection = args.ckpts, None
    if args.choose_on:
        chosen, selection = choose(args, tasks)
        paths, tasks = [paths[i] for i in chosen], [tasks[i] for i in chosen]
    first = tasks[0]
    words, gold = _split_words_and_gold(first, args.split, args)

    members, total = [], None
    for path, task in zip(paths, tasks):
        probs = task.tag_probabilities(words, device=args.device)  # per sentence (n_words, C)
        pred = [[task.tags[i] for i in p.argmax(-1).tolist()] for p in probs]
        m = tagging_metrics(gold, pred, words, first.train_words)
        members.append({"checkpoint": path, "acc": m["acc"], "unseen_acc": m.get("unseen_acc")})
        total = probs if total is None else [a + b for a, b in zip(total, probs)]
    pred = [[first.tags[i] for i in p.argmax(-1).tolist()] for p in total]
    metrics = tagging_metrics(gold, pred, words, first.train_words)
    report = {"split": args.split, "dataset": first.hparams.data["name"], "tagset": first.hparams.data["tagset"],
              "members": members, "ensemble": {k: v for k, v in metrics.items() if k not in ("per_tag", "confusions")}}
    if selection is not None:
        report["selection"] = selection
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return report


if __name__ == "__main__":
    main()
