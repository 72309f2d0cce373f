"""What `transformer-train` hands its trainer besides the model and the data: the callbacks it
always adds (not a config choice: exact resume, ``last.ckpt`` holding the final state), its
checkpoint writer (whole or not at all), and the project's own classes that ``conf/train.yaml``'s
``callbacks`` and ``logger`` blocks name (an early stopping that skips unmeasured epochs, the progress display,
a CSV logger that keeps its rows across a resume).

Exact resume: Lightning's checkpoint holds the weights, optimizer, schedule, loop counters and
(through ``ResumableLoader``) the position in the epoch, but not the random generators. Dropout
draws its masks from them, so without their states a resumed run with dropout leaves the
uninterrupted run's trajectory at the first step after the resume point. Nor does Lightning's
``CSVLogger`` keep what it logged: it deletes a ``metrics.csv`` already in its folder when it
starts writing, so a run resumed into its own folder (``ckpt_path=<run>/checkpoints/last.ckpt``)
would lose every row logged before the resume; ``ResumableCSVLogger`` keeps them.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import EarlyStopping, ProgressBar, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities.exceptions import SIGTERMException

from transformer.files import atomic_open, save_torch

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, writing to a temporary name and renaming it into place
    (``transformer.files``): a full disk or a killed process leaves the previous checkpoint,
    never a truncated one, and a full disk is one ``DiskFullError`` naming the folder."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        save_torch(checkpoint, path)


def collect_rng_states() -> dict[str, Any]:
    """The states of Python's ``random``, NumPy's global generator, torch's CPU generator
    and every CUDA generator (when CUDA is initialised), as tensors and plain containers
    (so ``torch.load(weights_only=True)`` reads them)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch.cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_states(state: dict[str, Any]) -> None:
    """Set the generators to states from :func:`collect_rng_states`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state((np_state["name"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "torch.cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["torch.cuda"])


class RandomState(L.Callback):
    """Stores every rank's random generator states in each checkpoint and restores them
    just before the first training step of a resumed run.

    The states are taken when the checkpoint is written; between that moment and the next
    training step the uninterrupted run draws nothing (validation runs in eval mode, and
    the data loaders have generators of their own), so restoring them right before the
    resumed run's first step puts it where the uninterrupted run was.
    """

    def __init__(self) -> None:
        self._trainer: L.Trainer | None = None
        self._pending: dict[str, Any] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        state = collect_rng_states()
        trainer = self._trainer
        if trainer is not None and trainer.world_size > 1 and torch.distributed.is_initialized():
            # Lightning builds the checkpoint dict on every rank and writes rank 0's.
            ranks: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(ranks, state)
            return {"ranks": ranks}
        return {"ranks": [state]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._pending is None:
            return
        ranks = self._pending["ranks"]
        self._pending = None
        if len(ranks) != trainer.world_size:
            log.warning("the checkpoint holds random states for %d rank(s), this run has %d: "
                        "the resumed run will not repeat the interrupted one exactly", len(ranks), trainer.world_size)
        restore_rng_states(ranks[trainer.global_rank % len(ranks)])


class FinalLastCheckpoint(L.Callback):
    """At the end of training, write the latest-state checkpoints (``last.ckpt``: a
    ModelCheckpoint without a monitor, or one with ``save_last``) again when the run took
    steps after they were last written, so they hold the final weights whatever
    ``val_check_interval`` is: checkpoint callbacks write only after a validation."""

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for cb in trainer.checkpoint_callbacks:
            path = cb.best_model_path if cb.monitor is None else cb.last_model_path
            if cb.monitor is None and not path and "{" not in (cb.filename or "{") and cb.dirpath:
                path = f"{cb.dirpath}/{cb.filename}{cb.FILE_EXTENSION}"  # never validated
            if not path or getattr(cb, "_last_global_step_saved", -1) == trainer.global_step:
                continue
            trainer.save_checkpoint(path)
            cb._last_global_step_saved = trainer.global_step  # what it holds now
            if cb.monitor is None:
                cb.best_model_path = path
            log.info("wrote the final state (step %d) to %s", trainer.global_step, path)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """A SIGTERM (a scheduler's stop) between training steps: write the state reached, so
        that ``ckpt_path=last.ckpt`` resumes from it. Inside a validation the ``last.ckpt`` of
        the previous validation is kept: a half-finished validation is not a state to resume."""
        if isinstance(exception, SIGTERMException) and trainer.training:
            self.on_train_end(trainer, pl_module)


class ResumableCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger``; after ``keep_rows_before(step)`` the rows of an existing
    ``metrics.csv`` logged before ``step`` (the resumed checkpoint's global step: its updates
    are numbered 0 to step - 1, and Lightning logs each row with the number of the update
    it follows) are kept, and the resumed run appends to them.

    Later rows belong to the part of the run the checkpoint does not hold (an epoch cut
    short); the resumed run logs those steps again, so they are dropped rather than kept
    twice. Without ``keep_rows_before`` it behaves like ``CSVLogger`` except that every
    row is written to disk as soon as it is logged.
    """

    def __init__(self, *args, **kwargs) -> None:
        # Rows reach the disk as they are logged (Lightning buffers 100 steps), so a run that
        # is killed keeps every row up to its last checkpoint for the resumed run to extend.
        kwargs.setdefault("flush_logs_every_n_steps", 1)
        super().__init__(*args, **kwargs)
        self._keep_before: int | None = None

    def keep_rows_before(self, step: int) -> None:
        """Keep the existing rows whose ``step`` is below ``step``; call before training."""
        self._keep_before = int(step)

    @property
    @rank_zero_experiment
    def experiment(self):
        if self._experiment is not None:
            return self._experiment
        path = Path(self.log_dir) / "metrics.csv"
        header, rows = (read_rows_before(path, self._keep_before)
                        if self._keep_before is not None and path.is_file() else ([], []))
        writer = super().experiment  # Lightning removes the old metrics.csv here
        if header:
            with atomic_open(path) as f:
                out = csv.DictWriter(f, fieldnames=header)
                out.writeheader()
                out.writerows(rows)
            # Lightning appends with its known keys as the column order and rewrites the file
            # (reading it back) only when a new key appears, so the two must agree.
            writer.metrics_keys = list(header)
        return writer


def read_rows_before(path: Path, step: int) -> tuple[list[str], list[dict[str, str]]]:
    """The header of a Lightning ``metrics.csv`` and its rows with ``step < step``.

    A last line without its newline was cut short by a killed run; it is left out (that
    step is logged again by the resumed run)."""
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        log.warning("%s: the last line is incomplete (the run was killed while writing it); dropped", path)
        text = text[: text.rfind("\n") + 1]
    with io.StringIO(text, newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        if header and "step" not in header:
            raise ValueError(f"{path}: no 'step' column in the header, so it cannot be resumed")
        rows = []
        for row in reader:
            try:
                row_step = int(float(row["step"]))
            except (TypeError, ValueError):
                raise ValueError(f"{path}, line {reader.line_num}: step {row['step']!r} is not a number") from None
            if row_step < step:
                rows.append(row)
    return header, rows


class MeasuredEarlyStopping(EarlyStopping):
    """``EarlyStopping`` that skips validations whose monitored value is NaN (not measured that
    epoch, e.g. BLEU every ``task.val_bleu_every`` epochs), so patience counts measurements,
    and epochs without a validation (one cut short by ``trainer.max_steps`` or ``max_time``):
    they have nothing to judge."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._validated = False  # a validation ran in this training epoch

    def _measured(self, trainer: L.Trainer) -> bool:
        value = trainer.callback_metrics.get(self.monitor)
        return value is None or not math.isnan(float(value))

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validated = False

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validated = self._validated or not trainer.sanity_checking
        if self._measured(trainer):
            super().on_validation_end(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._validated and self._measured(trainer):
            super().on_train_epoch_end(trainer, pl_module)


class JointEarlyStopping(MeasuredEarlyStopping):
    """Early stopping and the kept model on two metrics, as graph attention networks are trained
    (Velickovic et al. 2018, the authors' training loop): patience counts the validations where
    neither ``monitor`` (in ``mode``) nor ``second`` (in ``second_mode``) reached its best so far,
    a tie counting as reached (GAT: validation accuracy or loss); a validation where both did, each
    at least as good as its own best, is the model to keep.

    Lightning's ``EarlyStopping`` and ``ModelCheckpoint`` each watch one metric, so this callback
    writes a third for the checkpoint to monitor: ``kept`` (with ``mode``), ``monitor``'s value at
    a validation to keep and NaN at the others, which ``ModelCheckpoint`` never saves. A later
    validation to keep replaces an earlier one with the same value, as GAT's loop saves over its
    model: ``kept`` carries a step of 1e-9 per kept validation (in float64, far below any digit
    reported). The checks run at the end of each validation, before the checkpoint reads ``kept``.

    Args:
        monitor, mode: the first metric (GAT: ``val/acc``, ``max``).
        second, second_mode: the second (GAT's, the defaults: ``val/loss``, ``min``).
        kept: the name of the metric written for ``ModelCheckpoint``.
        patience and the rest: ``EarlyStopping``'s.
    """

    def __init__(self, monitor: str, second: str = "val/loss", mode: str = "max", second_mode: str = "min",
                 kept: str = "val/kept", **kwargs) -> None:
        kwargs["check_on_train_epoch_end"] = False  # kept must be written before the checkpoint reads it
        super().__init__(monitor=monitor, mode=mode, **kwargs)
        if second_mode not in ("min", "max"):
            raise ValueError(f"second_mode must be 'min' or 'max', got {second_mode!r}")
        self.second, self.second_mode, self.kept = second, second_mode, kept
        self.second_best = torch.tensor(math.inf if second_mode == "min" else -math.inf)
        self.n_kept = 0

    @staticmethod
    def _reached(value: torch.Tensor, best: torch.Tensor, mode: str) -> bool:
        return bool(value <= best) if mode == "min" else bool(value >= best)

    def _run_early_stopping_check(self, trainer: L.Trainer) -> None:
        logs = trainer.callback_metrics
        if trainer.fast_dev_run or not self._validate_condition_metric(logs):
            return
        if self.second not in logs:
            raise RuntimeError(f"JointEarlyStopping: the second metric {self.second!r} was not logged "
                               f"(logged: {', '.join(sorted(logs))})")
        first, second = logs[self.monitor].squeeze().double(), logs[self.second].squeeze().double()
        reached = (self._reached(first, self.best_score.double(), self.mode),
                   self._reached(second, self.second_best.double(), self.second_mode))
        if all(reached):
            self.n_kept += 1
            logs[self.kept] = first + (1e-9 if self.mode == "max" else -1e-9) * self.n_kept
        else:
            logs[self.kept] = torch.tensor(math.nan, dtype=torch.float64)
        if any(reached):
            pick = torch.maximum if self.mode == "max" else torch.minimum
            self.best_score = pick(first, self.best_score.double()).float()
            pick = torch.maximum if self.second_mode == "max" else torch.minimum
            self.second_best = pick(second, self.second_best.double()).float()
            self.wait_count = 0
            return
        self.wait_count += 1
        if self.wait_count >= self.patience:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            self.stopping_reason_message = (f"neither {self.monitor} nor {self.second} reached its best in the last "
                                            f"{self.wait_count} validations")

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "second_best": self.second_best, "n_kept": self.n_kept}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.second_best, self.n_kept = state_dict["second_best"], state_dict["n_kept"]


class LineProgressBar(ProgressBar):
    """Progress for a log file (``nohup``, a scheduler, a pipe): one plain line every
    ``refresh_rate`` training steps and one after each validation, instead of a terminal bar's
    ``\\r`` frames, which fill a file with thousands of redrawn lines."""

    def __init__(self, refresh_rate: int = 50) -> None:
        super().__init__()
        self.refresh_rate = int(refresh_rate)
        self._enabled = True
        self._start = 0.0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _line(self, trainer: L.Trainer, pl_module: L.LightningModule, what: str) -> None:
        metrics = self.get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
        print(f"epoch {trainer.current_epoch} step {trainer.global_step} {what} {shown}".rstrip(), flush=True)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.monotonic()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._enabled and self.refresh_rate > 0 and trainer.global_step % self.refresh_rate == 0:
            rate = trainer.global_step / max(time.monotonic() - self._start, 1e-9)
            self._line(trainer, pl_module, f"({rate:.2f} steps/s)")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._enabled and not trainer.sanity_checking:
            self._line(trainer, pl_module, "validated:")


def progress_bar(refresh_rate: int = 50) -> ProgressBar:
    """Lightning's TQDM bar on a terminal; :class:`LineProgressBar` when standard output is a
    file or a pipe. Either way it redraws every ``refresh_rate`` steps."""
    if sys.stdout.isatty():
        return TQDMProgressBar(refresh_rate=refresh_rate)
    return LineProgressBar(refresh_rate=refresh_rate)


class QuietLightning(logging.Filter):
    """Drops Lightning's start-up lines that a user of this project cannot act on: product
    tips, and the notes that a ``limit_*`` or ``val_check_interval`` default "was configured"."""

    NOISE = ("💡 Tip", "was configured so")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(n in message for n in self.NOISE)


def quiet_library_noise() -> None:
    """Install :class:`QuietLightning` and silence a deprecation warning Lightning itself
    triggers on every run (its own use of torch's ``LeafSpec``)."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, QuietLightning) for f in logger.filters):
        logger.addFilter(QuietLightning())
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
