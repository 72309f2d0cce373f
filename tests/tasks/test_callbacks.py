"""GAT's stopping rule (``JointEarlyStopping``): patience resets when either metric reaches its
best, and the checkpoint kept is the last validation where both did, through Lightning's own
Trainer and ModelCheckpoint."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from transformer.tasks.callbacks import JointEarlyStopping

# (val/acc, val/loss) per epoch, and what GAT's loop does with each
SCRIPT = [(0.5, 1.0),   # 0: both best: keep
          (0.6, 0.9),   # 1: both best: keep
          (0.6, 0.8),   # 2: accuracy tied, loss best: keep (the later of two equal accuracies)
          (0.7, 0.85),  # 3: accuracy best, loss not: patience resets, not kept
          (0.65, 0.95),  # 4: neither: 1
          (0.7, 0.81),  # 5: accuracy tied: patience resets
          (0.65, 0.9),  # 6: neither: 1
          (0.6, 0.9),   # 7: 2
          (0.6, 0.9),   # 8: 3 = patience: stop
          (0.9, 0.1)]   # 9: never reached


class Scripted(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.w - 1).square().sum()

    def validation_step(self, batch, batch_idx):
        acc, loss = SCRIPT[self.current_epoch]
        self.log("val/acc", acc)
        self.log("val/loss", loss)

    def train_dataloader(self):
        return [torch.zeros(1)]

    def val_dataloader(self):
        return [torch.zeros(1)]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_gats_rule_stops_on_neither_metric_and_keeps_the_last_model_where_both_were_best(tmp_path):
    stopping = JointEarlyStopping(monitor="val/acc", patience=3)  # GAT's second metric by default: the dev loss
    assert (stopping.second, stopping.second_mode) == ("val/loss", "min")
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="epoch{epoch:03d}", auto_insert_metric_name=False,
                                 monitor="val/kept", mode="max", save_top_k=1)
    trainer = L.Trainer(max_epochs=len(SCRIPT), callbacks=[stopping, checkpoint], logger=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(Scripted())
    assert stopping.stopped_epoch == 8 and trainer.current_epoch == 9  # stopped after epoch 8's validation
    assert checkpoint.best_model_path.endswith("epoch002.ckpt")  # not epoch 3, the best accuracy alone
    assert float(checkpoint.best_model_score) == pytest.approx(0.6)
    restored = JointEarlyStopping(monitor="val/acc", second="val/loss")
    restored.load_state_dict(stopping.state_dict())
    assert (float(restored.best_score), float(restored.second_best), restored.n_kept) == \
        (pytest.approx(0.7), pytest.approx(0.8), 3)
