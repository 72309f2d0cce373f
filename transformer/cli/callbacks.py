"""Lightning callbacks that ``transformer-train`` adds to the configured ones."""

from __future__ import annotations

import math

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping

from transformer import accel


class AccelCallback(L.Callback):
    """Switch the model to an ``accel`` backend once it sits on its training device.

    ``auto`` gives the CPU fast paths to an eager model on a CPU and the plain modules to a
    GPU or a compiled loss (``task.compile``), which wants the plain modules to trace.
    """

    def __init__(self, backend: str | None = "auto"):
        self.backend = backend
        accel.resolve(backend, "cpu")  # an unknown backend fails before any data is read

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        compiled = bool(pl_module.hparams.get("compile", False))
        accel.apply(pl_module.model, accel.resolve(self.backend, pl_module.device.type, compiled))


class MeasuredEarlyStopping(EarlyStopping):
    """``EarlyStopping`` that skips validations whose monitored value is NaN (not measured that
    epoch, e.g. BLEU every ``task.val_bleu_every`` epochs), so patience counts measurements."""

    def _measured(self, trainer: L.Trainer) -> bool:
        value = trainer.callback_metrics.get(self.monitor)
        return value is None or not math.isnan(float(value))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._measured(trainer):
            super().on_validation_end(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._measured(trainer):
            super().on_train_epoch_end(trainer, pl_module)
