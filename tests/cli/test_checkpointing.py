"""The checkpoint callbacks of `conf/callbacks/default.yaml`, on a toy module: `last.ckpt`
must be the latest state even when the monitored score stops improving (Lightning 2.6
refreshes ModelCheckpoint's own `save_last` file only when a top-k file is written)."""

from __future__ import annotations

import lightning as L
import torch
from hydra_helpers import compose_cfg
from torch.utils.data import DataLoader, TensorDataset

from transformer.cli.train import _instantiate_group, checkpoint_summary


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
