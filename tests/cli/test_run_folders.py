"""Run folders hold one run: two trainings started at once into one folder cannot mix, a
refused run writes nothing (not even ``.hydra/``), a resume never writes into another run's
folder, a lock left by a dead process does not block, and ``last.ckpt`` holds the final
state whatever the validation interval."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra_helpers import compose_cfg, main_status

from transformer.cli import train as train_cli
from transformer.files import LOCK_NAME, check_run_folder, claim_run_folder, release_run_folder

REPO = Path(__file__).resolve().parents[2]


def env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1",
                PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fake_run(folder: Path) -> Path:
    """A folder that holds a finished run (as far as the checks look)."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("the first run's config\n")
    return folder


def train_args(folder: Path, mirror_root: Path, cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "transformer.cli.train", "debug=fast", "model=tiny", f"hydra.run.dir={folder}",
            f"data.data_dir={cache}", f"data.mirror_root={mirror_root}", "callbacks.lr_monitor=null", "logger.tensorboard=null",
            *extra]


def test_a_refused_run_writes_nothing_not_even_hydra_files(tmp_path, capsys, monkeypatch):
    """Through transformer-train's ``main()`` in process, Hydra included (the other tests here run
    it as a process of its own)."""
    run = fake_run(tmp_path / "run")
    before = tree(run)
    monkeypatch.chdir(tmp_path)
    code, err = main_status(train_cli, ["model=tiny", f"hydra.run.dir={run}"], capsys, monkeypatch)
    assert code == 2, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("error: ") and "already holds a run" in err
    assert tree(run) == before


def test_a_resume_never_writes_into_another_run_s_folder(tmp_path):
    first, second = fake_run(tmp_path / "first"), fake_run(tmp_path / "second")
    with pytest.raises(FileExistsError, match=r"holds another run.*own run folder or a new one"):
        check_run_folder(second, str(first / "checkpoints" / "last.ckpt"))
    check_run_folder(first, str(first / "checkpoints" / "last.ckpt"))  # its own folder: fine
    check_run_folder(tmp_path / "new", str(first / "checkpoints" / "last.ckpt"))  # a new one: fine
    with pytest.raises(NotADirectoryError, match="a file, not a folder"):
        check_run_folder(first / "checkpoints" / "last.ckpt", None)


def test_a_folder_in_use_is_refused_and_a_dead_holder_s_lock_is_not(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    lock = folder / LOCK_NAME
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "os.write(fd, str(os.getpid()).encode()); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FileExistsError, match=rf"in use by another training run \(pid {holder.pid}\)"):
            claim_run_folder(folder)
        assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the holder died without cleaning up: its lock file stays, its lock does not
    assert lock.exists() and claim_run_folder(folder)
    assert lock.read_text().strip() == str(os.getpid())
    release_run_folder(folder)


def test_two_trainings_started_at_once_into_one_folder(mirror_root, tmp_path):
    folder = tmp_path / "run"
    procs = [subprocess.Popen(train_args(folder, mirror_root, tmp_path / f"cache{i}", f"task.lr={lr}"), cwd=tmp_path,
                              env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, lr in enumerate((0.001, 0.002))]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], [err[-1500:] for _, err in results]
    loser = next(err for code, err in results if code == 2)
    assert loser.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in loser
    winner_lr = (0.001, 0.002)[next(i for i, (code, _) in enumerate(results) if code == 0)]
    assert f"lr: {winner_lr}" in (folder / ".hydra" / "config.yaml").read_text()
    assert f"task.lr={winner_lr}" in (folder / ".hydra" / "overrides.yaml").read_text()
    for ckpt in (folder / "checkpoints").glob("*.ckpt"):
        assert torch.load(ckpt, weights_only=True)["hyper_parameters"]["lr"] == winner_lr, ckpt


class FinalWeights(L.Callback):
    """Saves the weights and step as training ends, to compare with ``last.ckpt``."""

    def __init__(self, path: str):
        self.path = path

    def on_train_end(self, trainer, pl_module):
        torch.save({"state_dict": pl_module.state_dict(), "global_step": trainer.global_step}, self.path)


def test_last_checkpoint_is_the_final_state_with_a_validation_interval(mirror_root, tmp_path):
    out = tmp_path / "run"
    summary = train_cli.run(compose_cfg("train", [
        "debug=fast", "model=tiny", f"output_dir={out}", f"data.data_dir={tmp_path / 'cache'}",
        f"data.mirror_root={mirror_root}", "callbacks.lr_monitor=null", "logger.tensorboard=null",
        "trainer.limit_train_batches=3", "trainer.val_check_interval=2",
        "+callbacks.final._target_=test_run_folders.FinalWeights", f"+callbacks.final.path={tmp_path / 'final.pt'}"]))
    final = torch.load(tmp_path / "final.pt", weights_only=True)
    last = torch.load(summary["last_checkpoint"], weights_only=True)
    assert summary["global_step"] == final["global_step"] == last["global_step"] == 3
    assert last["state_dict"].keys() == final["state_dict"].keys()
    for key, value in final["state_dict"].items():
        assert torch.equal(last["state_dict"][key], value), key
    assert not (out / LOCK_NAME).exists() or claim_run_folder(out, summary["last_checkpoint"])  # released
    release_run_folder(out)


def test_a_finished_run_removes_its_lock_file_and_logs_without_noise(mirror_root, tmp_path):
    """A smoke run into a pipe (as under nohup): its lock file is gone at the end, its log says
    where the data cache is, shows one plain progress line per refresh and none of Lightning's
    tips, "was configured" notes or deprecation warnings."""
    folder = tmp_path / "run"
    proc = subprocess.run(train_args(folder, mirror_root, tmp_path / "cache"),
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (folder / "train_summary.json").is_file() and not (folder / LOCK_NAME).exists()
    log = proc.stdout + proc.stderr
    assert f"data cache: {tmp_path / 'cache'}" in log
    assert "\r" not in log and "Tip" not in log and "was configured" not in log and "LeafSpec" not in log
    assert [line.split(" (")[0] for line in proc.stdout.splitlines() if line.startswith("epoch ")][:3] == [
        "epoch 0 step 1", "epoch 0 step 2", "epoch 0 step 3"]


def test_a_lock_file_removed_under_a_waiting_claim_is_not_trusted(tmp_path):
    """The holder removes its lock file as it releases it; a claim made after that locks a new
    file of that name, which a second claim then finds held."""
    folder = tmp_path / "run"
    assert claim_run_folder(folder)
    old = os.open(folder / LOCK_NAME, os.O_RDWR)  # what a second run opened before the release
    release_run_folder(folder)
    assert not (folder / LOCK_NAME).exists()
    try:
        assert claim_run_folder(folder)
        assert os.stat(folder / LOCK_NAME).st_ino != os.fstat(old).st_ino
        holder = subprocess.run(
            [sys.executable, "-c", "import sys; from transformer.files import claim_run_folder\n"
             f"claim_run_folder({str(folder)!r})"], env=env(), capture_output=True, text=True, timeout=120)
        assert holder.returncode == 1 and f"in use by another training run (pid {os.getpid()})" in holder.stderr
    finally:
        release_run_folder(folder)
        os.close(old)


def test_sigterm_saves_the_state_reached_and_exits_143_saying_how_to_resume(mirror_root, tmp_path):
    folder = tmp_path / "run"
    proc = subprocess.Popen(train_args(folder, mirror_root, tmp_path / "cache", "trainer.max_epochs=1000",
                                       "callbacks.progress_bar=null"),
                            cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not list((folder / "checkpoints").glob("epoch*.ckpt")) and time.monotonic() < deadline:
            time.sleep(0.5)  # a validation has run: the loop is in its steady state
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    err = proc.stderr.read().strip().splitlines()
    assert code == 143, err[-20:]
    last = folder / "checkpoints" / "last.ckpt"
    assert err[-1].startswith("error: training stopped by SIGTERM at step ") and f"ckpt_path={last}" in err[-1]
    stopped = int(err[-1].split("at step ")[1].split(";")[0])
    saved = int(err[-1].split("resume from step ")[1].split(" ")[0])
    # the step reached, or inside a validation the one that validation began at
    assert torch.load(last, weights_only=True)["global_step"] == saved and stopped - 3 <= saved <= stopped
    assert not (folder / LOCK_NAME).exists()
