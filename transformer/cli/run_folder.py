"""A training run's folder, claimed by one run at a time.

Two trainings started at once into one folder would both find it empty and then mix their
configs and checkpoints. So a run takes an exclusive ``flock`` on ``<folder>/.run.lock``
before it writes anything else, and checks under the lock that the folder holds no other run.
The kernel drops the lock when the process ends, however it ends: a lock file left by a killed
run (its pid no longer alive) does not block the next one, and a run that ends normally removes
its lock file. A resume (``ckpt_path=``) may write into the folder its checkpoint comes from, or
into an empty one, never into another run's.
"""

from __future__ import annotations

import atexit
import fcntl
import os
from pathlib import Path

LOCK_NAME = ".run.lock"
# Folders this process holds: resolved path -> the open lock file's descriptor.
_HELD: dict[str, int] = {}


def held_run(out: Path) -> Path | None:
    """A file showing that ``out`` already holds a run (a checkpoint, metrics, a summary)."""
    found = sorted((out / "checkpoints").glob("*.ckpt")) if (out / "checkpoints").is_dir() else []
    found += [p for p in (out / "csv" / "metrics.csv", out / "train_summary.json") if p.is_file()]
    return found[0] if found else None


def check_run_folder(out: Path, ckpt_path: str | None) -> None:
    """Refuse ``out`` when it holds a run that this one is not resuming: a fresh run would
    overwrite its checkpoints and metrics, and a resume of another run's checkpoint would
    replace its ``last.ckpt`` and summary."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"output_dir={out}: a file, not a folder")
    held = held_run(out) if out.is_dir() else None
    if held is None:
        return
    last = out / "checkpoints" / "last.ckpt"
    if not ckpt_path:
        raise FileExistsError(
            f"{out} already holds a run ({held}); resume it with ckpt_path={last}, or start a new "
            f"run in another folder (hydra.run.dir=<new folder>)")
    if out.resolve() not in Path(ckpt_path).resolve().parents:
        raise FileExistsError(
            f"{out} holds another run ({held}); a resume from {ckpt_path} writes into that checkpoint's "
            f"own run folder or a new one (hydra.run.dir=<new folder>)")


def claim_run_folder(out: Path, ckpt_path: str | None = None) -> bool:
    """Take ``out`` for this process's run (see the module docstring); a folder in use by a
    live run, or holding another run, is a ``FileExistsError`` and nothing is written. Returns
    whether this call claimed it: a folder this process already holds is left as it is, and
    DDP workers follow rank 0."""
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return False
    out = Path(out)
    key = str(out.resolve())
    if key in _HELD:
        return False
    check_run_folder(out, ckpt_path)  # before anything is written
    out.mkdir(parents=True, exist_ok=True)
    fd = _lock(out / LOCK_NAME)
    try:
        check_run_folder(out, ckpt_path)  # again: a run may have finished there since the first look
    except BaseException:
        os.close(fd)  # closing drops the lock
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = fd
    atexit.register(release_run_folder, out)
    return True


def _lock(path: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive lock. A lock file is removed by the
    run that held it (while still holding it), so a descriptor locked just after that removal
    belongs to a file no longer in the folder: then open the new one and lock again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise FileExistsError(f"{path.parent} is in use by another training run (pid {holder}); start this "
                                  f"run in another folder (hydra.run.dir=<new folder>)") from None
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def release_run_folder(out: Path) -> None:
    """Let another run have ``out``: remove the lock file, then drop the lock."""
    out = Path(out)
    fd = _HELD.pop(str(out.resolve()), None)
    if fd is not None:
        try:
            (out / LOCK_NAME).unlink(missing_ok=True)
        finally:
            os.close(fd)
