"""scripts/image_folds.py: the folds deal every class evenly and a fold never trains on the
images it scores; a tiny run scores one held-out fold of the training and dev images."""

from __future__ import annotations

import numpy as np

from tests.script_module import load_script


def load():
    return load_script("image_folds")


def test_each_class_is_dealt_evenly_round_the_folds():
    labels = np.repeat(np.arange(3), [8, 9, 5])
    folds = load().fold_of(labels, 4)
    for c in range(3):
        counts = np.bincount(folds[labels == c], minlength=4)
        assert counts.max() - counts.min() <= 1
    assert np.array_equal(folds, load().fold_of(labels, 4))  # fixed, whatever the training seed


def test_a_tiny_run_scores_one_fold_of_the_pool(tmp_path, capsys):
    out = load().main(["--steps", "2", "--folds", "1", "--mixup", "0.2", "--data-dir", str(tmp_path),
                       "model.n_layers=1"])
    assert 355 <= out["n"] <= 364  # about a quarter of the 1,438 training and dev images
    assert 0 <= out["ema_correct"] <= out["n"] and out["args"]["overrides"] == ["model.n_layers=1"]
    assert "fold 1:" in capsys.readouterr().out


def test_a_tiny_distilled_run_trains_each_folds_teacher_once(tmp_path, capsys):
    args = ["--steps", "2", "--folds", "0", "--teacher", "cnn", "--teacher-steps", "2", "--teacher-cache",
            str(tmp_path / "teachers"), "--distill", "online", "--mixup", "0.8", "--cutmix", "1.0",
            "--data-dir", str(tmp_path), "model.n_layers=1"]
    out = load().main(args)
    assert 355 <= out["n"] <= 364 and out["args"]["teacher"] == "cnn"
    (kept,) = (tmp_path / "teachers").glob("cnn_fold0of4_seed1_steps2.pt")
    printed = capsys.readouterr().out
    assert "fold 0: teacher trained" in printed and "fold 0: teacher (cnn)" in printed
    load().main(args)  # the same fold's teacher is read back, not trained again
    assert "teacher trained" not in capsys.readouterr().out
