#!/usr/bin/env python3
"""Most-frequent-tag baseline, scored with the same metrics as `transformer-evaluate` on a
tagging checkpoint: the first number to compare a tagger with.

Each word gets the tag it carries most often in the training file; unseen words get the most
frequent tag overall. On your own treebank, name its files; on the presets, name the task
(for CoNLL-2000 the training file minus the last `--dev-size` sentences, held out as dev):

    python3 scripts/tagging_baseline.py --train my-ud-train.conllu --eval my-ud-dev.conllu --eval my-ud-test.conllu
    python3 scripts/tagging_baseline.py --train train.conllu --eval test.conllu --tagset xpos --json
    python3 scripts/tagging_baseline.py                       # GUM upos+xpos, CoNLL-2000 pos; test
    python3 scripts/tagging_baseline.py --task gum:upos --split dev --output-dir baselines/

Bad input (a missing file, an unknown task or tag set, a malformed line) is one `error:` line
and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from transformer.data.core.readers import DataFormatError
from transformer.data.tagged.corpus import PRESETS
from transformer.evaluation.tagging import format_report, most_frequent_tag_baseline
from transformer.files import inside, write_text

DEFAULT_TASKS = ["gum:upos", "gum:xpos", "conll2000:pos"]


def baselines(args: argparse.Namespace) -> list[tuple[str, dict]]:
    """``(label, metrics)`` for each file or split asked for."""
    if args.train:
        if not args.eval:
            raise ValueError("--train needs at least one --eval file to score")
        name = Path(args.train).stem
        files = {"train": args.train}
        return [(f"{name}:{args.tagset} {Path(e).name}",
                 most_frequent_tag_baseline(name, args.tagset, e, files=files, fmt=args.format))
                for e in args.eval]
    if args.eval:
        raise ValueError("--eval needs --train (the file the baseline learns from)")
    out = []
    for spec in args.task or DEFAULT_TASKS:
        dataset, _, tagset = spec.partition(":")
        if dataset not in PRESETS or not tagset:
            raise ValueError(f"--task {spec}: expected <preset>:<tagset> with a preset from {sorted(PRESETS)}; "
                             f"for your own treebank give --train FILE --eval FILE")
        out.append((f"{spec} {args.split}", most_frequent_tag_baseline(
            dataset, tagset, args.split, args.data_dir, args.mirror_root, args.dev_size)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="your training file (CoNLL-U, or --format conll2000)")
    ap.add_argument("--eval", action="append", help="a file to score (repeatable), with --train")
    ap.add_argument("--tagset", default="upos", help="with --train: upos or xpos (CoNLL-U), pos (conll2000)")
    ap.add_argument("--format", default="conllu", choices=["conllu", "conll2000"], help="with --train")
    ap.add_argument("--task", action="append", help="preset:tagset (repeatable); default: %s" % DEFAULT_TASKS)
    ap.add_argument("--split", default="test")
    ap.add_argument("--data-dir", default="data/cache")
    ap.add_argument("--mirror-root", default=None, help="default: $TRANSFORMER_DATA_MIRROR, then HTTP")
    ap.add_argument("--dev-size", type=int, default=500, help="CoNLL-2000 sentences held out as dev")
    ap.add_argument("--output-dir", default=None, help="also write <label>.baseline.{json,txt}")
    ap.add_argument("--json", action="store_true", help="print the full metrics as JSON")
    args = ap.parse_args(argv)
    try:
        results = baselines(args)
    except (ValueError, KeyError, FileNotFoundError, IsADirectoryError, DataFormatError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for label, m in results:
            stem = label.replace(" ", ".").replace(":", ".")
            write_text(inside(out, f"{stem}.baseline.json"), json.dumps(m, indent=2) + "\n")
            write_text(inside(out, f"{stem}.baseline.txt"), format_report(m, f"{label} most-frequent-tag"))
    if args.json:
        print(json.dumps([m for _, m in results], indent=2))
    else:
        width = max(len(label) for label, _ in results)
        print(f"{'task':<{width}} {'acc %':>7} {'unseen %':>9} {'unseen n':>9} {'sent %':>7}")
        for label, m in results:
            print(f"{label:<{width}} {100 * m['acc']:>7.2f} {100 * (m['unseen_acc'] or 0):>9.2f} "
                  f"{m['unseen_tokens']:>9} {100 * m['sentence_acc']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
