"""The door every command goes through: the command line is composed once per job, checked
once, then run in its folder with the ``.hydra/`` record Hydra writes; a ``-m`` sweep runs each
job in its own folder, with ``multirun.yaml`` beside them."""

from __future__ import annotations

import json
import sys

import hydra
import pytest
import yaml

from transformer.cli import train as train_cli

TINY = ["debug=fast", "model=tiny", "data.vocab_size=300", "data.train_subset=32", "trainer.limit_train_batches=1",
        "trainer.limit_val_batches=1", "test_splits=[]", "data.eval_splits=[val]", "logger.tensorboard=null"]


@pytest.fixture
def counted(monkeypatch):
    """How many times a config was composed and a training config checked."""
    calls = {"compose": 0, "check": 0}
    compose, check = hydra.compose, train_cli.check_config

    def counting_compose(*args, **kwargs):
        calls["compose"] += 1
        return compose(*args, **kwargs)

    def counting_check(cfg, **kwargs):
        calls["check"] += 1
        return check(cfg, **kwargs)

    monkeypatch.setattr(hydra, "compose", counting_compose)
    monkeypatch.setattr(train_cli, "check_config", counting_check)
    return calls


def run_main(args: list[str], monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["transformer-train", *args])
    train_cli.main()


def test_a_training_composes_its_config_once_and_checks_it_once(counted, mirror_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run_main([*TINY, f"hydra.run.dir={run}", f"data.data_dir={tmp_path / 'cache'}"], monkeypatch)
    assert counted == {"compose": 1, "check": 1}
    recorded = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    assert recorded["output_dir"] == str(run) and recorded["model"]["d_model"] == 32
    assert "model=tiny" in yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
    assert json.loads((run / "train_summary.json").read_text())["global_step"] == 1


def test_a_sweep_runs_each_job_once_in_its_own_folder(counted, mirror_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "S"
    run_main(["-m", *TINY, "seed=1,2", f"hydra.sweep.dir={sweep}", f"data.data_dir={tmp_path / 'cache'}"],
             monkeypatch)
    # one composition per job, one for multirun.yaml (the sweep as typed); one check per job
    assert counted == {"compose": 3, "check": 2}
    assert "seed=1,2" in yaml.safe_load((sweep / "multirun.yaml").read_text())["hydra"]["overrides"]["task"]
    for num, seed in ((0, 1), (1, 2)):
        recorded = yaml.safe_load((sweep / str(num) / ".hydra" / "config.yaml").read_text())
        assert recorded["seed"] == seed and recorded["output_dir"] == str(sweep / str(num))
        assert json.loads((sweep / str(num) / "train_summary.json").read_text())["output_dir"] == str(sweep / str(num))


def test_a_failure_that_is_no_user_error_is_raised_not_swallowed(tmp_path, monkeypatch):
    from transformer.cli.common import hydra_entry

    def broken(cfg):
        raise RuntimeError("a bug")

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.ckpt").write_bytes(b"")
    monkeypatch.setattr(sys, "argv", ["transformer-export", "ckpt_path=model.ckpt", "output_dir=out"])
    with pytest.raises(RuntimeError, match="a bug"):  # with its traceback, and a non-zero exit status
        hydra_entry("export")(broken)()


def test_an_early_error_line_does_not_wait_for_lightning(tmp_path):
    """A command that fails before it needs Lightning prints its error line without importing it
    (seconds of start-up on a CPU machine); once Lightning is loaded its configuration error is
    still a user error."""
    import subprocess

    probe = (
        "import sys\n"
        "from transformer.cli import decode\n"
        "sys.argv = ['transformer-decode', 'ckpt_path=missing.ckpt']\n"
        "try:\n"
        "    decode.main()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, 'lightning' in sys.modules)\n"
        "from transformer.cli.common import user_errors\n"
        "from lightning.fabric.utilities.exceptions import MisconfigurationException\n"
        "print(MisconfigurationException in user_errors())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.stdout.split() == ["2", "False", "True"], done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == ["error: ckpt_path=missing.ckpt: checkpoint not found"]
