"""A training run killed with SIGKILL mid-epoch and resumed from its last step checkpoint
continues exactly as the uninterrupted run does, with dropout on: every row of
``csv/metrics.csv`` (losses, learning rate, validation scores) equals the uninterrupted
run's. This needs the random generator states and the position in the epoch in the
checkpoint, and the rows logged before the kill on disk."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
ARGS = [
    "model=tiny", "model.dropout=0.1", "data.vocab_size=400", "data.train_subset=200", "data.max_tokens=300",
    "data.eval_splits=[val]", "trainer.max_epochs=2", "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=2", "task.warmup_steps=10", "task.lr=3e-3", "callbacks.progress_bar=null",
    "callbacks.early_stopping=null", "logger.tensorboard=null", "task.val_decode.max_len_a=0", "task.val_decode.max_len_b=5",
    # a checkpoint every 4 steps, each in its own file
    "+callbacks.every_steps._target_=lightning.pytorch.callbacks.ModelCheckpoint",
    "+callbacks.every_steps.dirpath=${output_dir}/steps", "+callbacks.every_steps.every_n_train_steps=4",
    "+callbacks.every_steps.save_top_k=-1",
]


@pytest.fixture()
def env(mirror_root, tmp_path):
    # One thread per run: the two runs go side by side, and the same thread count keeps the
    # fp32 sums of both in the same order.
    return dict(os.environ, TRANSFORMER_DATA_MIRROR=str(mirror_root), HF_DATASETS_OFFLINE="1",
                OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


def train(out: Path, cache: Path, env: dict, *extra: str) -> subprocess.Popen:
    log = (out.parent / f"{out.name}.log").open("a")
    return subprocess.Popen([sys.executable, "-m", "transformer.cli.train", *ARGS, f"hydra.run.dir={out}",
                             f"data.data_dir={cache}", *extra], env=env, cwd=REPO, stdout=log, stderr=log)


def step_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """The step checkpoints that load completely (a kill can cut the newest one short)."""
    found = []
    for path in folder.glob("*.ckpt"):
        try:
            torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            continue
        found.append((int(re.search(r"step=(\d+)", path.name).group(1)), path))
    return sorted(found)


def rows(run: Path) -> list[dict[str, str]]:
    with (run / "csv" / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def wait(proc: subprocess.Popen, out: Path) -> None:
    assert proc.wait(timeout=300) == 0, (out.parent / f"{out.name}.log").read_text()[-3000:]


def test_a_run_killed_mid_epoch_resumes_bit_for_bit(env, tmp_path):
    cache = tmp_path / "cache"
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    uninterrupted = train(whole, cache, env)
    victim = train(killed, cache, env)
    deadline = time.monotonic() + 240
    while not any(step >= 8 for step, _ in step_checkpoints(killed / "steps")):
        assert victim.poll() is None and time.monotonic() < deadline, (
            "the run ended before it could be killed:\n" + (tmp_path / "killed.log").read_text()[-3000:])
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    wait(uninterrupted, whole)

    step, ckpt = step_checkpoints(killed / "steps")[-1]
    reference = rows(whole)
    epoch0_steps = max(int(r["step"]) for r in reference if r["epoch"] == "0")
    assert 0 < step < epoch0_steps  # killed in the middle of the first epoch
    before = rows(killed)
    assert any(int(r["step"]) == step - 1 for r in before)  # the killed run's rows reached the disk

    wait(train(killed, cache, env, f"ckpt_path='{ckpt}'"), killed)
    resumed = rows(killed)
    assert len(resumed) == len(reference)
    for i, (got, want) in enumerate(zip(resumed, reference)):
        assert got == want, f"row {i} differs after resuming at step {step}"
    assert {r["epoch"] for r in reference if r["val/bleu"]} == {"0", "1"}
