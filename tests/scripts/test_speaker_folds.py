"""scripts/speaker_folds.py: with a dev speaker, a fold trains, validates and tests on three
disjoint sets of voices."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.script_module import load_script
from transformer.data.speech.fsdd import FSDD_SPEAKERS, Recording


def load():
    return load_script("speaker_folds")


def recordings():
    return [Recording(d, s, i, Path(f"/r/{d}_{s}_{i}.wav")) for s in FSDD_SPEAKERS for d in range(10) for i in range(3)]


def test_each_fold_validates_on_another_unseen_speaker():
    folds = load()
    assert folds.SPEAKERS == FSDD_SPEAKERS
    dev = [folds.dev_speaker_of(s) for s in folds.SPEAKERS]
    assert sorted(dev) == sorted(folds.SPEAKERS)  # every speaker is a dev speaker once
    assert all(d != s for d, s in zip(dev, folds.SPEAKERS))
    assert folds.dev_speaker_of("yweweler") == "george"


def test_a_folds_splits_hold_disjoint_speakers_and_every_recording():
    rows = load().fold_rows(recordings(), "lucas", "nicolas")
    speakers = {split: {Path(p).stem.split("_")[1] for p, _, _ in split_rows} for split, split_rows in rows.items()}
    assert speakers["test"] == {"lucas"} and speakers["dev"] == {"nicolas"}
    assert speakers["train"] == set(FSDD_SPEAKERS) - {"lucas", "nicolas"}
    assert [len(rows[s]) for s in ("train", "dev", "test")] == [120, 30, 30]
    assert ("/r/7_lucas_2.wav", "7", "lucas") in [(str(p), t, s) for p, t, s in rows["test"]]
    # the speaker column names each row's speaker (data.normalize=speaker groups by it)
    assert all(Path(p).stem.split("_")[1] == s for split_rows in rows.values() for p, _, s in split_rows)


def test_the_dev_speaker_is_not_the_test_speaker():
    with pytest.raises(ValueError, match="must differ"):
        load().fold_rows(recordings(), "theo", "theo")


def test_k_training_voices_follow_the_test_speaker_and_each_trains_as_often():
    folds = load()
    assert folds.training_voices("theo", None, 2) == ["yweweler", "george"]
    assert folds.training_voices("theo", "yweweler", 2) == ["george", "jackson"]
    assert folds.training_voices("lucas", None, None) == ["nicolas", "theo", "yweweler", "george", "jackson"]
    for k in (1, 2, 3, 4):
        trained = [v for s in folds.SPEAKERS for v in folds.training_voices(s, None, k)]
        assert all(trained.count(s) == k for s in folds.SPEAKERS)  # over the six folds, each speaker k times
    with pytest.raises(ValueError, match=r"--train-voices 5: expected 1 to 4"):
        folds.training_voices("theo", "yweweler", 5)


def test_a_fold_of_k_voices_trains_on_them_alone_and_has_no_dev_speaker_without_one():
    rows = load().fold_rows(recordings(), "george", None, 2)
    assert set(rows) == {"train", "test"}
    assert {s for _, _, s in rows["train"]} == {"jackson", "lucas"} and {s for _, _, s in rows["test"]} == {"george"}
    assert len(rows["train"]) == 60 and len(rows["test"]) == 30
