"""Loggers for `transformer-train` (``conf/logger/``).

Lightning's ``CSVLogger`` deletes a ``metrics.csv`` already in its folder when it starts
writing, so a run resumed into its own folder (``ckpt_path=<run>/checkpoints/last.ckpt``)
would lose every row logged before the resume. ``ResumableCSVLogger`` keeps them.
"""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment

from transformer.files import atomic_open

log = logging.getLogger(__name__)


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
