"""Speaker-independent digit accuracy on FSDD: leave one speaker out, the mean of the six folds.

Each fold trains ``experiment=fsdd_digits data.fold=<speaker>`` (that speaker's 500 recordings are
the test set, the other five speakers' the training set) and reads the test accuracy back from the
run's ``train_summary.json``. Folds run ``--parallel`` at a time, one thread each.

    python3 scripts/speaker_folds.py --out runs/folds [--parallel 2] [--speakers george theo] [-- key=value ...]

Prints one JSON object: each fold's accuracy, their mean and standard deviation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SPEAKERS = ("george", "jackson", "lucas", "nicolas", "theo", "yweweler")


def start(speaker: str, out: Path, overrides: list[str]) -> subprocess.Popen:
    run = out / speaker
    log = (out / f"{speaker}.log").open("w")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "transformer.cli.train", "experiment=fsdd_digits",
                             f"data.fold={speaker}", f"hydra.run.dir={run}", *overrides],
                            stdout=log, stderr=subprocess.STDOUT, env=env)


def accuracy(out: Path, speaker: str) -> float:
    summary = json.loads((out / speaker / "train_summary.json").read_text())
    return summary["test"]["test"]["acc"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a folder for the six runs and their logs")
    parser.add_argument("--parallel", type=int, default=1, help="folds trained at once (one thread each)")
    parser.add_argument("--speakers", nargs="+", default=list(SPEAKERS), choices=SPEAKERS)
    parser.add_argument("overrides", nargs="*", help="training overrides for every fold (after --)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    todo, running, seconds = list(args.speakers), {}, {}
    while todo or running:
        while todo and len(running) < args.parallel:
            speaker = todo.pop(0)
            running[speaker] = (start(speaker, args.out, args.overrides), time.perf_counter())
        time.sleep(5)
        for speaker, (proc, began) in list(running.items()):
            if proc.poll() is not None:
                if proc.returncode != 0:
                    sys.exit(f"error: fold {speaker} failed (exit {proc.returncode}); see {args.out / speaker}.log")
                seconds[speaker] = round(time.perf_counter() - began)
                del running[speaker]
    folds = {s: accuracy(args.out, s) for s in args.speakers}
    values = list(folds.values())
    print(json.dumps({"folds": folds, "mean": statistics.mean(values),
                      "stdev": statistics.stdev(values) if len(values) > 1 else 0.0, "seconds": seconds}, indent=2))


if __name__ == "__main__":
    main()
