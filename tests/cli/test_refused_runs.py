"""A refused command changes nothing: a ``-m`` sweep into a folder that holds runs leaves every
byte as it was (``multirun.yaml`` and each job's ``.hydra/`` included), a bad job anywhere in a
sweep is refused before the first job starts, flags may come after or before the overrides, and
a training that meets a full disk leaves no partial checkpoint and says so in one line."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer.cli.common import prepare
from transformer.cli.train import preflight

REPO = Path(__file__).resolve().parents[2]


def env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def train(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer.cli.train", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=300)


def fake_sweep(folder: Path) -> Path:
    """A sweep folder whose job 0 holds a finished run with seed 7."""
    (folder / "0" / "checkpoints").mkdir(parents=True)
    (folder / "0" / "checkpoints" / "last.ckpt").write_bytes(b"weights trained with seed 7")
    (folder / "0" / ".hydra").mkdir()
    (folder / "0" / ".hydra" / "config.yaml").write_text("seed: 7\n")
    (folder / "0" / ".hydra" / "overrides.yaml").write_text("- seed=7\n")
    (folder / "multirun.yaml").write_text("seed: 7\n")
    return folder


def test_a_refused_sweep_leaves_every_byte_as_it_was(tmp_path, capsys, monkeypatch):
    from hydra_helpers import main_status

    from transformer.cli import train as train_cli

    sweep = fake_sweep(tmp_path / "S")
    before = tree(sweep)
    monkeypatch.chdir(tmp_path)
    code, err = main_status(train_cli, ["-m", "debug=fast", "model=tiny", "seed=8", f"hydra.sweep.dir={sweep}"],
                            capsys, monkeypatch)
    assert code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: -m job 0:") and "hydra.sweep.dir=" in lines[0]
    assert tree(sweep) == before


def test_a_bad_job_later_in_a_sweep_refuses_the_whole_sweep_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="d_model"):
        prepare("train", ["-m", "debug=fast", "model=tiny", "model.d_model=32,-5", f"hydra.sweep.dir={tmp_path / 'S'}"],
                preflight)
    assert not (tmp_path / "S").exists()


def test_jobs_sharing_one_folder_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="would both write"):
        prepare("train", ["-m", "model=tiny", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'S'}",
                          "hydra.sweep.subdir=same"], preflight)


def test_a_flag_typed_after_the_overrides_still_makes_a_sweep(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["model=tiny", "seed=1,2", "-m", f"hydra.sweep.dir={tmp_path / 'S'}"]
    jobs = prepare("train", args, preflight)
    assert [(job.sweep is not None, job.cfg.seed, job.cfg.output_dir) for job in jobs] == [
        (True, 1, str(tmp_path / "S" / "0")), (True, 2, str(tmp_path / "S" / "1"))]
    assert not (tmp_path / "S").exists()  # composed and checked; nothing written yet


@pytest.fixture
def full_disk(monkeypatch):
    """``torch.save`` writes part of a checkpoint, then the disk is full."""
    def save(obj, f, *args, **kwargs):
        f.write(b"\x80" * 4096)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", save)


def test_a_full_disk_during_training_is_one_line_and_leaves_no_partial_checkpoint(full_disk, mirror_root, tmp_path,
                                                                                   capsys, monkeypatch):
    from transformer.cli import train as train_cli

    run = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["transformer-train", "debug=fast", "model=tiny", f"hydra.run.dir={run}",
                                      f"data.data_dir={tmp_path / 'cache'}", f"data.mirror_root={mirror_root}",
                                      "logger.tensorboard=null", "callbacks.progress_bar=null"])
    with pytest.raises(SystemExit) as exit_:
        train_cli.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: no space left on the device holding ") and str(run / "checkpoints") in err[-1]
    assert "Traceback" not in "\n".join(err)
    left = sorted(p.name for p in (run / "checkpoints").iterdir()) if (run / "checkpoints").exists() else []
    assert left == []  # no truncated .ckpt, no temporary file


@pytest.mark.slow
def test_a_real_small_file_system_filling_up_during_training(mirror_root, tmp_path):
    """The same on a tmpfs too small for the second checkpoint, where the machine lets the test
    mount one (root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size=1200k tmpfs {mount} 2>/dev/null") != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root); the ENOSPC writer test covers it")
    try:
        proc = train("debug=fast", "model=tiny", f"hydra.run.dir={mount / 'run'}", f"data.data_dir={tmp_path / 'c'}",
                     f"data.mirror_root={mirror_root}", "logger.tensorboard=null", "callbacks.progress_bar=null",
                     "trainer.max_epochs=3", cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr[-3000:]
        lines = proc.stderr.strip().splitlines()
        assert lines[-1].startswith("error: no space left on the device holding ") and "Traceback" not in proc.stderr
        for ckpt in (mount / "run" / "checkpoints").glob("*"):
            assert not ckpt.name.startswith("."), f"a temporary file was left: {ckpt}"
            torch.load(ckpt, weights_only=True)  # every checkpoint left is whole
    finally:
        os.system(f"umount {mount}")
