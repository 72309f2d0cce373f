"""scripts/speaker_sweep.py: settings parsed, every (setting, seed, fold) run, the settings ranked
by their dev speakers over complete seeds only, and the deadline stops what cannot finish."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.script_module import load_script


def load():
    return load_script("speaker_sweep")


def test_settings_parse_into_names_and_overrides():
    sweep = load()
    assert sweep.parse_setting("base=") == ("base", [])
    assert sweep.parse_setting("trim-30='data.trim_db=30' 'data.speed_perturb=[0.9,1.0]'") == (
        "trim-30", ["data.trim_db=30", "data.speed_perturb=[0.9,1.0]"])
    for bad in ("noequals", "=x=1", "a b=x=1", "a/b=x=1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--setting"):
            sweep.parse_setting(bad)


def fake_start(dev_of_seed: dict):
    """A stand-in for one fold's training: a child process that writes the fold's summary (dev
    accuracy by seed, test 0.5) after ``sleep`` seconds, ``sleep`` read from the overrides."""
    def start(speaker, out, overrides):
        seed = int(next(o for o in overrides if o.startswith("seed=")).split("=")[1])
        sleep = float(next((o.split("=")[1] for o in overrides if o.startswith("sleep=")), "0"))
        summary = {"best_score": dev_of_seed[seed], "test": {"test": {"acc": 0.5}}}
        code = (f"import time, json, pathlib; time.sleep({sleep}); p = pathlib.Path({str(out / speaker)!r}); "
                f"p.mkdir(parents=True, exist_ok=True); (p / 'train_summary.json').write_text({json.dumps(summary)!r})")
        return subprocess.Popen([sys.executable, "-c", code])
    return start


def run_main(sweep, monkeypatch, argv):
    monkeypatch.setattr(sweep, "write_fold_manifests", lambda out, speakers: {s: [f"fold={s}"] for s in speakers})
    monkeypatch.setattr(sys, "argv", ["speaker_sweep.py", *argv])
    sweep.main()


def test_every_fold_runs_and_settings_rank_by_dev(tmp_path, monkeypatch, capsys):
    sweep = load()
    monkeypatch.setattr(sweep, "start", fake_start({1: 0.8, 2: 0.9}))
    run_main(sweep, monkeypatch, ["--out", str(tmp_path), "--parallel", "4", "--seeds", "1", "2",
                                  "--setting", "a=", "--setting", "b=x=1"])
    result = json.loads((tmp_path / "summary.json").read_text())
    for name in ("a", "b"):
        assert result[name]["complete_seeds"] == [1, 2]
        assert result[name]["dev_mean"] == pytest.approx(0.85) and result[name]["test_mean"] == 0.5
        assert sorted(result[name]["folds"]["1"]) == sorted(sweep.SPEAKERS)
    assert result["b"]["overrides"] == ["x=1"] and result["_run"]["not_started"] == 0
    table = capsys.readouterr().out
    assert "85.00" in table and "50.00" in table


def test_the_deadline_stops_long_runs_and_counts_only_complete_seeds(tmp_path, monkeypatch):
    """Folds of 30 s under a 3-s deadline are stopped, none is reported, and nothing waits for them."""
    sweep = load()
    monkeypatch.setattr(sweep, "start", fake_start({1: 0.8}))
    run_main(sweep, monkeypatch, ["--out", str(tmp_path), "--parallel", "2", "--deadline-s", "3", "--seeds", "1",
                                  "--setting", "slow=sleep=30"])
    result = json.loads((tmp_path / "summary.json").read_text())
    assert result["slow"]["complete_seeds"] == [] and "dev_mean" not in result["slow"]
    assert len(result["_run"]["stopped"]) == 2 and result["_run"]["not_started"] == 4
    assert result["_run"]["seconds"] < 15
