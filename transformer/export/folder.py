"""What every export shares: its error (:class:`ExportError`, a model the format cannot express
or a folder it may not write), and writing the folder whole or not at all: built in a temporary
folder beside the target and renamed into place, so a failed export (a refusal, a full disk)
leaves no half-written model folder, and a non-empty ``output_dir`` is replaced only with
``force``.

An export is a folder of its own: the current folder, or one that holds it (``.``, ``..``, the
root), is refused rather than replaced. A symbolic link at ``output_dir`` is replaced by the
export as any other file there would be (``transformer.files`` writes no file through a link),
and the link alone is removed, never what it points to."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


class ExportError(ValueError):
    """The checkpoint's model cannot be expressed exactly in the target format, or its folder
    cannot be written; nothing is written."""


def write_export_dir(output_dir: str | Path, fill: Callable[[Path], None], force: bool = False) -> Path:
    """Call ``fill(tmp)`` on a fresh folder beside ``output_dir``, then move it to ``output_dir``.
    A place :func:`check_export_dir` refuses is an :class:`ExportError` and nothing is written."""
    given, output_dir = Path(output_dir), check_export_dir(output_dir, force)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output_dir.name[:60]}.", suffix=".tmp", dir=output_dir.parent))
    old = None
    try:
        fill(tmp)
        if output_dir.exists() or output_dir.is_symlink():  # empty, replaced with force=true, or a link
            old = output_dir.with_name(f"{tmp.name}.old")
            output_dir.rename(old)
        tmp.rename(output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not (output_dir.exists() or output_dir.is_symlink()):
            old.rename(output_dir)
        raise
    if old is not None:
        if old.is_symlink():
            old.unlink()  # the link, not the folder it points to
        else:
            shutil.rmtree(old, ignore_errors=True)
    return given


def check_export_dir(output_dir: str | Path, force: bool = False, ) -> Path:
    """``output_dir`` as an absolute path (``.`` and ``..`` resolved, links not followed), or
    an :class:`ExportError` naming what makes it no place for an export: the current folder or one that holds
    it, a file, or a folder with files in it without ``force``."""
    path = Path(os.path.abspath(output_dir))
    cwd = Path.cwd()
    if not path.name or path == cwd or path in cwd.parents:
        where = ("the root folder" if not path.name else "the current folder" if path == cwd
                 else "a folder that holds the current folder")
        raise ExportError(f"output_dir={output_dir}: {where}; an export is written to a folder of its own "
                    f"(output_dir=<new folder>), which force=true replaces whole")
    if path.exists() and not path.is_dir():
        raise ExportError(f"output_dir {output_dir}: a file, not a folder")
    if path.exists() and any(path.iterdir()) and not force:
        raise ExportError(f"output_dir {output_dir} exists and is not empty; pass force=true to replace it")
    return path


__all__ = ["ExportError", "check_export_dir", "write_export_dir"]
