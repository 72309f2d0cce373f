"""The checkpoint callbacks of `conf/train.yaml`'s callbacks, on a toy module: `last.ckpt`
must be the latest state even when the monitored score stops improving (Lightning 2.6
refreshes ModelCheckpoint's own `save_last` file only when a top-k file is written), and
a resumed run's `metrics.csv` must keep the rows logged before the resume."""

from __future__ import annotations

import lightning as L
import torch
import csv

import pytest
from hydra_helpers import compose_cfg
from torch.utils.data import DataLoader, TensorDataset

from transformer.cli.train import _instantiate_group, build_loggers, checkpoint_summary


class FallingScore(L.LightningModule):
    """Validation BLEU 10, 9, 8, ...: only the first epochs enter the top 3."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.lin(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/bleu", 10.0 - self.current_epoch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader():
    return DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)


def fit(tmp_path, epochs, ckpt_path=None):
    cfg = compose_cfg("train", [f"output_dir={tmp_path}", "callbacks.progress_bar=null", "callbacks.early_stopping=null",
                              "callbacks.lr_monitor=null"])
    trainer = L.Trainer(max_epochs=epochs, callbacks=_instantiate_group(cfg.callbacks), logger=False,
                        enable_model_summary=False, enable_progress_bar=False)
    trainer.fit(FallingScore(), train_dataloaders=loader(), val_dataloaders=loader(), ckpt_path=ckpt_path)
    return trainer


def test_last_checkpoint_follows_every_epoch_and_resumes_from_the_end(tmp_path):
    trainer = fit(tmp_path, epochs=5)
    summary = checkpoint_summary(trainer)
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("epoch*.ckpt"))
    assert kept == ["epoch000-step2.ckpt", "epoch001-step4.ckpt", "epoch002-step6.ckpt"]  # the best three
    assert summary["best_checkpoint"].endswith("epoch000-step2.ckpt") and summary["best_score"] == 10.0
    last = summary["last_checkpoint"]
    assert last == str(tmp_path / "checkpoints" / "last.ckpt")
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == trainer.global_step == 10 and state["epoch"] == 4
    # resuming from it continues at epoch 5, not from the last top-3 epoch
    again = fit(tmp_path, epochs=6, ckpt_path=last)
    assert again.global_step == 12
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 12


class LoggedScore(FallingScore):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train/loss", loss)
        return loss


def fit_logged(tmp_path, epochs, ckpt_path=None, resumed_step=None):
    cfg = compose_cfg("train", [f"output_dir={tmp_path}", "logger.tensorboard=null", "callbacks.progress_bar=null",
                                "callbacks.early_stopping=null", "callbacks.lr_monitor=null"])
    trainer = L.Trainer(max_epochs=epochs, callbacks=_instantiate_group(cfg.callbacks),
                        logger=build_loggers(cfg, resumed_step), log_every_n_steps=1,
                        enable_model_summary=False, enable_progress_bar=False)
    trainer.fit(LoggedScore(), train_dataloaders=loader(), val_dataloaders=loader(), ckpt_path=ckpt_path)
    return tmp_path / "csv" / "metrics.csv"


def read_metrics(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_resumed_run_keeps_the_metrics_logged_before_it(tmp_path):
    metrics = fit_logged(tmp_path, epochs=3)
    before = read_metrics(metrics)
    # A run stopped mid-epoch has logged steps its last.ckpt does not hold: the resumed run
    # logs them again, so they must not stay.
    header = list(before[0])
    with metrics.open("a", newline="") as f:
        csv.DictWriter(f, fieldnames=header).writerow({**{k: "" for k in header}, "step": "6", "train/loss": "9.9"})
    last = tmp_path / "checkpoints" / "last.ckpt"
    step = torch.load(last, map_location="cpu", weights_only=False)["global_step"]
    assert step == 6
    rows = read_metrics(fit_logged(tmp_path, epochs=5, ckpt_path=last, resumed_step=step))
    assert rows[: len(before)] == before  # the history before the resume, unchanged
    val = [(r["epoch"], r["val/bleu"]) for r in rows if r["val/bleu"]]
    assert val == [(str(e), f"{10.0 - e}") for e in range(5)]  # every epoch once, in order
    train_steps = [int(r["step"]) for r in rows if r["train/loss"]]
    assert train_steps == sorted(set(train_steps)) and len(train_steps) == 10
    assert "9.9" not in {r["train/loss"] for r in rows}


def test_a_fresh_run_in_the_same_folder_starts_a_new_metrics_file(tmp_path):
    fit_logged(tmp_path, epochs=2)
    rows = read_metrics(fit_logged(tmp_path, epochs=1))
    assert [r["epoch"] for r in rows if r["val/bleu"]] == ["0"]


def test_a_metrics_file_with_a_bad_step_names_its_line(tmp_path):
    metrics = fit_logged(tmp_path, epochs=1)
    metrics.write_text(metrics.read_text() + ",,x,\n")
    with pytest.raises(ValueError, match=r"metrics\.csv, line \d+: step"):
        fit_logged(tmp_path, epochs=2, ckpt_path=tmp_path / "checkpoints" / "last.ckpt", resumed_step=2)
