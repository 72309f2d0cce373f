"""What every export shares: its error (:class:`ExportError`, a model the format cannot express
or a folder it may not write), and writing the folder whole or not at all: built in a temporary
folder beside the target and renamed into place, so a failed export (a refusal, a full disk)
leaves no half-written model folder, and a non-empty ``output_dir`` is replaced only with
``force``."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable


class ExportError(ValueError):
    """The checkpoint's model cannot be expressed exactly in the target format, or its folder
    cannot be written; nothing is written."""


def write_export_dir(output_dir: str | Path, fill: Callable[[Path], None], force: bool = False) -> Path:
    """Call ``fill(tmp)`` on a fresh folder beside ``output_dir``, then move it to ``output_dir``.
    A non-empty ``output_dir`` without ``force`` is an :class:`ExportError` and nothing is written."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ExportError(f"output_dir {output_dir}: a file, not a folder")
    if output_dir.exists() and any(output_dir.iterdir()) and not force:
        raise ExportError(f"output_dir {output_dir} exists and is not empty; pass force=true to replace it")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output_dir.name[:60]}.", suffix=".tmp", dir=output_dir.parent))
    old = None
    try:
        fill(tmp)
        if output_dir.exists():  # empty, or replaced with force=true
            old = output_dir.with_name(f"{tmp.name}.old")
            output_dir.rename(old)
        tmp.rename(output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not output_dir.exists():
            old.rename(output_dir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return output_dir


__all__ = ["ExportError", "write_export_dir"]
