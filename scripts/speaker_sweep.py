"""Settings for unseen speakers compared on the dev-speaker folds, many runs at once.

Each setting (``--setting NAME='key=value ...'``) trains the six folds of
``scripts/speaker_folds.py --dev-speaker next`` at each ``--seeds`` seed: four speakers train, the
next speaker's recordings pick the checkpoint and score the setting, the held-out speaker's are
tested and never choose. Runs are queued setting by setting and seed by seed, ``--parallel`` at a
time, one thread each (``trainer.accelerator=gpu`` in the common overrides puts them all on one GPU).

    python3 scripts/speaker_sweep.py --out runs/sweep --parallel 16 --seeds 1234 1 \\
        --setting base= --setting trim30='data.trim_db=30' -- trainer.max_epochs=15 ...

``--deadline-s``: no run starts that could not end in time (a run's expected length is the
longest one finished so far), and runs still going at the deadline are stopped, so a
time-boxed machine returns every finished fold. ``<out>/summary.json`` (rewritten as runs finish)
and the printed table rank the settings by the dev speakers' mean best accuracy over their
complete seeds (all six folds done); the test speakers' mean is printed beside it, not used.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speaker_folds import SPEAKERS, dev_speaker_of, start, summary, write_fold_manifests  # noqa: E402


def parse_setting(text: str) -> tuple[str, list[str]]:
    """``NAME=override override ...`` -> ``(NAME, [override, ...])``; an empty list is the common
    overrides alone."""
    name, sep, overrides = text.partition("=")
    if not sep or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise argparse.ArgumentTypeError(f"--setting {text!r}: NAME='key=value ...' (NAME of letters, digits, - and _)")
    return name, shlex.split(overrides)


def fold_scores(out: Path, speaker: str) -> dict | None:
    """A finished fold's best dev and test accuracy, or None."""
    path = out / speaker / "train_summary.json"
    if not path.exists():
        return None
    s = summary(out, speaker)
    return {"dev": s["best_score"], "test": s["test"]["test"]["acc"]}


def tabulate(out: Path, settings: dict[str, list[str]], seeds: list[int]) -> dict:
    """Every setting's folds read back; the dev and test means over the seeds whose six folds
    all finished."""
    result = {}
    for name in settings:
        per_seed, complete = {}, []
        for seed in seeds:
            folds = {s: fold_scores(out / name / f"seed{seed}", s) for s in SPEAKERS}
            per_seed[seed] = {s: f for s, f in folds.items() if f is not None}
            if len(per_seed[seed]) == len(SPEAKERS):
                complete.append(seed)
        entry = {"overrides": settings[name], "folds": per_seed, "complete_seeds": complete}
        if complete:
            entry["dev_mean"] = statistics.mean(per_seed[k][s]["dev"] for k in complete for s in SPEAKERS)
            entry["test_mean"] = statistics.mean(per_seed[k][s]["test"] for k in complete for s in SPEAKERS)
        result[name] = entry
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--setting", type=parse_setting, action="append", required=True,
                        help="NAME='key=value ...' (repeat; NAME= alone is the common overrides)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1234])
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--deadline-s", type=float, default=None, help="stop starting and running folds after this")
    parser.add_argument("overrides", nargs="*", help="overrides for every run (after --)")
    args = parser.parse_args()
    settings = dict(args.setting)
    if len(settings) != len(args.setting):
        parser.error("two --setting share a name")
    args.out.mkdir(parents=True, exist_ok=True)
    fold_overrides = write_fold_manifests(args.out, list(SPEAKERS))
    began = time.perf_counter()
    queue = [(name, seed, speaker) for seed in args.seeds for name in settings for speaker in SPEAKERS]
    running, longest, stopped = {}, 0.0, []
    while queue or running:
        elapsed = time.perf_counter() - began
        while queue and len(running) < args.parallel and (
                args.deadline_s is None or elapsed + max(longest, 1.0) <= args.deadline_s):
            name, seed, speaker = job = queue.pop(0)
            out = args.out / name / f"seed{seed}"
            out.mkdir(parents=True, exist_ok=True)
            overrides = [*fold_overrides[speaker], *args.overrides, *settings[name], f"seed={seed}"]
            running[job] = (start(speaker, out, overrides), time.perf_counter())
        if args.deadline_s is not None and elapsed > args.deadline_s:
            for job, (proc, _) in running.items():
                proc.kill()
                stopped.append(job)
            break
        if not running:  # the deadline leaves no room for what is queued
            break
        time.sleep(2)
        for job, (proc, t0) in list(running.items()):
            if proc.poll() is not None:
                if proc.returncode != 0:
                    print(f"fold {job} failed (exit {proc.returncode}); see its log", file=sys.stderr)
                longest = max(longest, time.perf_counter() - t0)
                del running[job]
                (args.out / "summary.json").write_text(json.dumps(tabulate(args.out, settings, args.seeds), indent=1))
    result = tabulate(args.out, settings, args.seeds)
    result_meta = {"seconds": round(time.perf_counter() - began), "not_started": len(queue),
                   "stopped": [list(j) for j in stopped], "dev_speakers": {s: dev_speaker_of(s) for s in SPEAKERS}}
    (args.out / "summary.json").write_text(json.dumps({**result, "_run": result_meta}, indent=1))
    ranked = sorted(result.items(), key=lambda kv: -kv[1].get("dev_mean", -1.0))
    print(f"{'setting':<14} {'seeds':>6} {'dev mean':>9} {'test mean':>9}  overrides")
    for name, e in ranked:
        dev = f"{100 * e['dev_mean']:.2f}" if "dev_mean" in e else "-"
        test = f"{100 * e['test_mean']:.2f}" if "test_mean" in e else "-"
        print(f"{name:<14} {len(e['complete_seeds']):>6} {dev:>9} {test:>9}  {' '.join(e['overrides'])}")
    print(json.dumps(result_meta))


if __name__ == "__main__":
    main()
