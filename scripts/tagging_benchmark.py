#!/usr/bin/env python3
"""The POS-tagging benchmark recipe: train each tagging experiment, evaluate its best
checkpoint on test, score the most-frequent-tag baseline on the same split, and print a
Markdown table (the one in BENCHMARKS.md).

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/tagging_benchmark.py
    python3 scripts/tagging_benchmark.py --experiments gum_upos --threads 2 --out bench/

Each training runs as ``transformer-train experiment=<name> output_dir=<out>/<name>`` with
``OMP_NUM_THREADS=--threads``: on a 2-core machine shared with other jobs one thread per
process was ~5x faster per batch than two (thread oversubscription), on an idle machine
use 2. Extra Hydra overrides for every training go after ``--``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from transformer.evaluation.hardware import cpu_name
from transformer.evaluation.tagging import most_frequent_tag_baseline

# name: (dataset, tag set, the training command's overrides)
EXPERIMENTS = {
    "gum_upos": ("gum", "upos", ["experiment=gum_upos"]),
    # gum_upos's recipe on Penn Treebank tags, with full attention
    "gum_xpos": ("gum", "xpos", ["experiment=gum_upos", "data.tagset=xpos", "model.window=null", "name=gum_xpos"]),
    "conll2000_pos": ("conll2000", "pos", ["experiment=conll2000_pos"]),
}


def run(cmd: list[str], env: dict) -> str:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS), choices=list(EXPERIMENTS))
    ap.add_argument("--out", default="outputs/tagging_benchmark")
    ap.add_argument("--split", default="test")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir", default="data/cache")
    args = ap.parse_args(argv)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = Path(args.out)
    rows = []
    for name in args.experiments:
        dataset, tagset, recipe = EXPERIMENTS[name]
        run_dir = out / name
        start = time.perf_counter()
        run([sys.executable, "-m", "transformer.cli.train", *recipe, f"output_dir={run_dir}",
             f"hydra.run.dir={run_dir}", f"data.data_dir={args.data_dir}", *extra], env)
        train_s = time.perf_counter() - start
        summary = json.loads((run_dir / "train_summary.json").read_text())
        stdout = run([sys.executable, "-m", "transformer.cli.evaluate", f"ckpt_path={summary['best_checkpoint']}",
                      f"split={args.split}", f"data_dir={args.data_dir}", f"output_dir={run_dir / 'eval'}"], env)
        metrics = json.loads(stdout[stdout.index("{\n"):])
        base = most_frequent_tag_baseline(dataset, tagset, args.split, args.data_dir, None)
        rows.append({"experiment": name, "train_seconds": round(train_s), "epochs": summary["epochs"],
                     "parameters": summary["parameters"], "dev_acc": summary["best_score"],
                     "model": metrics, "baseline": base})
    (out / "benchmark.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "benchmark.json").write_text(json.dumps(rows, indent=2) + "\n")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    print(f"Hardware: {cpu_name()}, {os.cpu_count()} cores, "
          f"OMP_NUM_THREADS={args.threads}; {when}\n")
    print(f"| experiment | split | acc % | unseen-word acc % | sentence acc % | baseline acc % | "
          f"baseline unseen % | train time | epochs | params |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m, b = r["model"], r["baseline"]
        print(f"| {r['experiment']} | {args.split} | {100 * m['acc']:.2f} | {100 * m['unseen_acc']:.2f} "
              f"({m['unseen_tokens']}) | {100 * m['sentence_acc']:.2f} | {100 * b['acc']:.2f} | "
              f"{100 * b['unseen_acc']:.2f} | {r['train_seconds'] / 60:.1f} min | {r['epochs']} | {r['parameters']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
