"""scripts/gpu_check.sh end to end in its dry mode (CPU, toy sizes, ~3 minutes): slow, run with
`pytest -m slow tests/scripts`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
FILES = ["log.txt", "env.txt", "gpu_tests.txt", "bench_train.json", "bench_decode.json", "profile.txt",
         "recipe.json", "summary.md"]
STEPS = ["env", "bench_train", "bench_decode", "profile", "recipe_train", "eval_greedy", "eval_beam5", "gpu_tests"]


def test_dry_run_writes_every_output_and_passes(tmp_path, mirror_root):
    out = tmp_path / "out"
    env = dict(os.environ, GPU_CHECK_DRY="1", TRANSFORMER_DATA_MIRROR=str(mirror_root),
               GPU_CHECK_WORK=str(tmp_path / "work"))
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]

    # At most 8 files, flat, named as the device tool brings them back.
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    for name in FILES:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
        assert re.fullmatch(r"[A-Za-z0-9._-]+", name)

    # Ours eager and compiled in one run, the compile time apart.
    bench = json.loads((out / "bench_train.json").read_text())
    assert bench["ours"]["compile"] is True
    for name in ("ours", "ours_compiled"):
        assert bench["train_tokens_per_s"][name] > 0, name
    assert bench["train_warm_up_seconds"]["ours_compiled"] > 0
    decode = json.loads((out / "bench_decode.json").read_text())
    for key in ("decode_beam1_batched", "decode_beam5_batched"):
        for name in ("ours", "ours_compiled"):
            assert decode[key][name]["sentences_per_s"] > 0, (key, name)
        assert decode[key]["ours_compiled"]["warm_up_seconds"] > 0
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["train_summary"]["global_step"] > 0
    for search in ("greedy", "beam5"):
        assert recipe["test_2016_flickr"][search]["sentences"] == 1000
        assert recipe["test_2016_flickr"][search]["bleu"] >= 0
    assert "self_cpu_time_total" in (out / "profile.txt").read_text()

    summary = (out / "summary.md").read_text()
    for step in STEPS:
        assert re.search(rf"^\| {step} \| ok \|", summary, re.M), f"{step} is not ok in summary.md"
    log = (out / "log.txt").read_text()
    assert "8 steps, 0 failed" in log


def dry_run(tmp_path, mirror_root, recipe: str) -> Path:
    """The dry run of ``GPU_CHECK_RECIPE=recipe`` without the benchmark steps; its output folder."""
    out = tmp_path / "out"
    env = dict(os.environ, GPU_CHECK_DRY="1", TRANSFORMER_DATA_MIRROR=str(mirror_root),
               GPU_CHECK_WORK=str(tmp_path / "work"), GPU_CHECK_RECIPE=recipe,
               GPU_CHECK_SKIP="bench_train bench_decode profile")
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return out


def test_dry_run_of_the_multilingual_recipe_scores_each_direction(tmp_path, mirror_root):
    out = dry_run(tmp_path, mirror_root, "multi30k_multi")
    recipe = json.loads((out / "recipe.json").read_text())
    assert "experiment=multi30k_cpu data.pairs=[en-de,en-fr,en-cs] data.vocab_size=12000" in recipe["command"]
    for search in ("greedy", "beam5"):
        each = recipe["test_2016_flickr"][search]
        assert sorted(each) == ["en-cs", "en-de", "en-fr"], each
        assert all(r["sentences"] == 1000 and r["bleu"] >= 0 for r in each.values())
    summary = (out / "summary.md").read_text()
    assert "experiment=multi30k_multi, en→{de,fr,cs}" in summary and "test_2016_flickr en-fr beam5: BLEU" in summary


def test_dry_run_of_the_other_inputs_trains_and_tests_each_preset(tmp_path, mirror_root):
    out = dry_run(tmp_path, mirror_root, "inputs")
    assert len(list(out.iterdir())) <= 8
    inputs = json.loads((out / "recipe.json").read_text())["inputs"]
    assert sorted(inputs) == ["cora", "digits", "fsdd_digits", "fsdd_strings"]
    assert "experiment=graph_nodes data.preset=cora trainer.accelerator=cpu" in inputs["cora"]["command"]
    for name, run in inputs.items():
        assert run["global_step"] > 0 and run["wall_s"] > 0, name
    for name in ("cora", "digits", "fsdd_digits"):
        assert 0 <= inputs[name]["test"]["test"]["acc"] <= 1, name
    assert inputs["fsdd_strings"]["test"]["test"]["wer"] >= 0
    summary = (out / "summary.md").read_text()
    assert re.search(r"^\| recipe_train \| ok \|", summary, re.M) and "| fsdd_strings |" in summary
    assert "eval_greedy" not in summary


def test_an_unknown_recipe_is_refused_in_one_line(tmp_path):
    env = dict(os.environ, GPU_CHECK_DRY="1", GPU_CHECK_RECIPE="wmt14", GPU_CHECK_WORK=str(tmp_path / "work"))
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", str(tmp_path / "out")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if line.startswith("error:")] == [
        "error: GPU_CHECK_RECIPE=wmt14: expected multi30k, multi30k_multi or inputs"]
