"""A callback that records, on each DDP rank, what that rank trained on and ended with;
`test_ddp.py` adds it to a real `transformer-train trainer.strategy=ddp` run."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import torch


class RankProbe(L.Callback):
    """Writes ``<folder>/rank<r>.json`` (the ``index`` of every training example of every
    batch, by epoch, and ``val/bleu`` after each validation) and ``rank<r>.pt`` (the final
    weights) at the end of fitting."""

    def __init__(self, folder: str):
        self.folder = Path(folder)
        self.batches: list[tuple[int, list[int]]] = []
        self.val_bleu: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append((trainer.current_epoch, batch["index"].tolist()))

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.val_bleu.append(float(trainer.callback_metrics["val/bleu"]))

    def on_fit_end(self, trainer, pl_module):
        self.folder.mkdir(parents=True, exist_ok=True)
        rank = trainer.global_rank
        record = {"world_size": trainer.world_size, "batches": self.batches, "val_bleu": self.val_bleu}
        (self.folder / f"rank{rank}.json").write_text(json.dumps(record))
        torch.save({k: v.detach().cpu() for k, v in pl_module.state_dict().items()}, self.folder / f"rank{rank}.pt")
