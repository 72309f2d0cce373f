"""Speaker-independent digit accuracy on FSDD: leave one speaker out, the mean of the six folds.

Each fold trains ``experiment=fsdd_digits data.fold=<speaker>`` (that speaker's 500 recordings are
the test set, the other five speakers' the training set) and reads the test accuracy back from the
run's ``train_summary.json``. Folds run ``--parallel`` at a time, one thread each.

    python3 scripts/speaker_folds.py --out runs/folds [--parallel 2] [--speakers george theo] [-- key=value ...]

The default fold validates on a seeded tenth of its training speakers' recordings: a dev set of
voices the model trains on, which cannot tell whether a change carries a digit to a new voice.
``--dev-speaker next`` holds a second speaker out as the dev set instead (the speaker after the
test speaker in ``SPEAKERS``' order, round the end: george's fold validates on jackson, yweweler's
on george): four speakers train, one unseen speaker picks the checkpoint, another is tested. The
fold's manifests go to ``<out>/manifests/<test speaker>/{train,dev,test}.tsv``, each row with its
speaker (``data.normalize=speaker_mean`` normalises by it; the held-out speaker's statistics come
from their own unlabelled recordings).

``--train-voices K`` trains each fold on K voices only (the K speakers after the test speaker,
and after the dev speaker if any, round the end: across the six folds each speaker trains as often
as any other), for accuracy on unseen voices against the number of voices seen; the fold's
manifests are written as above, with the training speakers' own tenth as dev without
``--dev-speaker``.

Prints one JSON object: each fold's test accuracy and best dev accuracy (with ``--dev-speaker``,
each fold's dev speaker too), the test accuracies' mean and standard deviation.
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


def dev_speaker_of(speaker: str) -> str:
    """The speaker held out as dev when ``speaker`` is tested: the next one, round the end."""
    return SPEAKERS[(SPEAKERS.index(speaker) + 1) % len(SPEAKERS)]


def training_voices(test_speaker: str, dev_speaker: str | None, k: int | None) -> list[str]:
    """The speakers a fold trains on: everyone but the test and dev speakers, or with ``k`` the
    first ``k`` of them in ``SPEAKERS``' order after the test speaker, round the end."""
    i = SPEAKERS.index(test_speaker)
    others = [s for s in SPEAKERS[i + 1:] + SPEAKERS[:i] if s != dev_speaker]
    if k is not None and not 1 <= k <= len(others):
        raise ValueError(f"--train-voices {k}: expected 1 to {len(others)} (the speakers left to train on)")
    return others if k is None else others[:k]


def fold_rows(recordings, test_speaker: str, dev_speaker: str | None,
              train_voices: int | None = None) -> dict[str, list[tuple[Path, str, str]]]:
    """``(audio path, digit, speaker)`` rows of one fold: the test speaker's recordings, the dev speaker's
    (none without one), and those of the training voices (:func:`training_voices`; every index of
    each: a fold ignores the official split)."""
    if test_speaker == dev_speaker:
        raise ValueError(f"the dev speaker must differ from the test speaker ({test_speaker})")
    voices = set(training_voices(test_speaker, dev_speaker, train_voices))
    rows = {"train": [], "dev": [], "test": []}
    for r in recordings:
        split = "test" if r.speaker == test_speaker else "dev" if r.speaker == dev_speaker else "train"
        if split != "train" or r.speaker in voices:
            rows[split].append((r.path, str(r.digit), r.speaker))
    return rows if dev_speaker else {"train": rows["train"], "test": rows["test"]}


def write_fold_manifests(out: Path, speakers: list[str], dev: bool = True,
                         train_voices: int | None = None) -> dict[str, list[str]]:
    """Each fold's manifests under ``out/manifests/<speaker>`` (``dev``: the next speaker's, else
    none, the data module's tenth of the training rows); returns the data overrides of each fold
    (its own manifests instead of the preset)."""
    from transformer.data.speech.fsdd import fsdd_recordings
    from transformer.data.speech.manifest import write_manifest

    data_dir = Path(os.environ.get("TRANSFORMER_CACHE", Path(os.environ.get("HOME", ".")) / ".cache/transformer"))
    recordings = fsdd_recordings(data_dir)
    overrides = {}
    for speaker in speakers:
        folder = out / "manifests" / speaker
        folder.mkdir(parents=True, exist_ok=True)
        rows = fold_rows(recordings, speaker, dev_speaker_of(speaker) if dev else None, train_voices)
        for split, split_rows in rows.items():
            write_manifest(folder / f"{split}.tsv", split_rows)
        overrides[speaker] = ["data.preset=null", *(f"data.{s}={folder / f'{s}.tsv'}" for s in rows)]
    return overrides


def start(speaker: str, out: Path, overrides: list[str]) -> subprocess.Popen:
    run = out / speaker
    log = (out / f"{speaker}.log").open("w")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "transformer.cli.train", "experiment=fsdd_digits",
                             f"hydra.run.dir={run}", *overrides],
                            stdout=log, stderr=subprocess.STDOUT, env=env)


def summary(out: Path, speaker: str) -> dict:
    return json.loads((out / speaker / "train_summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a folder for the six runs and their logs")
    parser.add_argument("--parallel", type=int, default=1, help="folds trained at once (one thread each)")
    parser.add_argument("--speakers", nargs="+", default=list(SPEAKERS), choices=SPEAKERS)
    parser.add_argument("--dev-speaker", choices=["none", "next"], default="none",
                        help="none: a seeded tenth of the training speakers validates; next: the next "
                             "speaker is held out as dev")
    parser.add_argument("--train-voices", type=int, default=None,
                        help="train each fold on this many speakers only (default: all the others)")
    parser.add_argument("overrides", nargs="*", help="training overrides for every fold (after --)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.dev_speaker == "next" or args.train_voices is not None:
        fold_overrides = write_fold_manifests(args.out, args.speakers, args.dev_speaker == "next", args.train_voices)
    else:
        fold_overrides = {s: [f"data.fold={s}"] for s in args.speakers}
    todo, running, seconds = list(args.speakers), {}, {}
    while todo or running:
        while todo and len(running) < args.parallel:
            speaker = todo.pop(0)
            running[speaker] = (start(speaker, args.out, [*fold_overrides[speaker], *args.overrides]),
                                time.perf_counter())
        time.sleep(5)
        for speaker, (proc, began) in list(running.items()):
            if proc.poll() is not None:
                if proc.returncode != 0:
                    sys.exit(f"error: fold {speaker} failed (exit {proc.returncode}); see {args.out / speaker}.log")
                seconds[speaker] = round(time.perf_counter() - began)
                del running[speaker]
    summaries = {s: summary(args.out, s) for s in args.speakers}
    folds = {s: summaries[s]["test"]["test"]["acc"] for s in args.speakers}
    values = list(folds.values())
    result = {"folds": folds, "mean": statistics.mean(values),
              "stdev": statistics.stdev(values) if len(values) > 1 else 0.0, "seconds": seconds}
    if args.dev_speaker == "next":
        result["dev_speakers"] = {s: dev_speaker_of(s) for s in args.speakers}
    if args.train_voices is not None:
        dev_of = dev_speaker_of if args.dev_speaker == "next" else lambda s: None
        result["train_voices"] = {s: training_voices(s, dev_of(s), args.train_voices) for s in args.speakers}
    result["best_dev"] = {s: summaries[s]["best_score"] for s in args.speakers}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
