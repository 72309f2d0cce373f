"""Writing files safely: one writer for every file the project writes, and names confined to
the folder a user chose.

Every file (checkpoints, averages, exports, tokenizers, predictions, metrics, summaries) is
written to a temporary name in its own folder, flushed to disk, then renamed into place
(``os.replace`` is atomic on POSIX). A reader therefore sees the old file or the whole new
one, never half of it; a full disk leaves the old file as it was and no temporary behind, and
is reported as :class:`DiskFullError` naming the folder. Renaming also replaces a symbolic
link planted at the destination instead of writing through it.

Reading one back: :func:`sha256_file` fingerprints a file (the data cache's integrity records,
downloads checked against their pinned checksums); :func:`read_json_object` reads a JSON object
from a file a user was given (a downloaded model folder's), any way it is broken one
``ValueError`` naming the file.

Names that come from a checkpoint or a data config (a dataset name, a language code, a split)
are untrusted: :func:`safe_name` turns one into a single path component, so that
``folder / safe_name(x)`` always lies inside ``folder``.

A training run's folder holds one run: :func:`run_folder` claims it (a lock, then a check that
no other run is there) before the run writes anything.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import IO, Iterator

from filelock import FileLock, Timeout

# Anything but letters, digits and a few punctuation marks becomes "_": no separators, no NUL,
# no control characters, no spaces a shell would split on.
_UNSAFE = re.compile(r"[^\w.+@=-]", re.UNICODE)
NAME_LIMIT = 120  # bytes are what file systems cap (255); leave room for suffixes


class DiskFullError(OSError):
    """No space (or quota) left while writing a file; the message names the folder."""

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno 28]"
        return str(self.args[-1]) if self.args else ""


def safe_name(value: object, default: str = "unnamed") -> str:
    """``value`` as one harmless path component: separators, NUL and other unsafe characters
    become ``_``, leading dots are dropped (no ``..``, no hidden files), the length is capped;
    an empty result is ``default``."""
    text = _UNSAFE.sub("_", str(value)).lstrip(".")
    while len(text.encode("utf-8")) > NAME_LIMIT:
        text = text[:-1]
    return text or default


def inside(folder: Path | str, name: object, default: str = "unnamed") -> Path:
    """``folder / safe_name(name)``: a path that cannot leave ``folder``."""
    return Path(folder) / safe_name(name, default)


SPLIT_WORDS = re.compile(r"[-_.]?(train|training)$", re.IGNORECASE)
DATA_SUFFIXES = {".gz", ".conllu", ".conll", ".tsv", ".csv", ".jsonl", ".json", ".txt"}


def corpus_name(source: object, default: str) -> str:
    """A name for a user's corpus taken from its training file: the file's stem without data
    suffixes or a trailing ``train`` (``en_lines-ud-train.conllu`` -> ``en_lines-ud``); a bare
    ``train`` file is named after its folder (``sst2/train.tsv`` -> ``sst2``). ``default`` when
    there is no file (a preset). ``source`` may be a ``{lang: path}`` map of a parallel corpus."""
    if isinstance(source, dict) or hasattr(source, "values"):
        source = next(iter(source.values()), None)
    if not isinstance(source, str) or not source:
        return default
    path = Path(source.split("!", 1)[0].split(":", 1)[-1] if source.startswith("registry:") else source)
    name = path.name
    while Path(name).suffix.lower() in DATA_SUFFIXES:
        name = Path(name).stem
    name = SPLIT_WORDS.sub("", name.replace("{lang}", "").rstrip("-_.")).rstrip("-_.")
    return safe_name(name or path.parent.name, default)


def full_disk_error(exc: BaseException | None) -> OSError | None:
    """The "no space left" (or quota) error in ``exc`` or the errors it was raised from, if
    any: a writer may wrap it (``torch.save`` raises a RuntimeError over a short write)."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def disk_full(exc: OSError, path: Path | str) -> DiskFullError:
    """The one-line error for a full disk while writing ``path``."""
    folder = Path(path).parent
    return DiskFullError(exc.errno, f"no space left on the device holding {folder} (writing {Path(path).name}); "
                                    f"free some space or write elsewhere")


@contextlib.contextmanager
def atomic_open(path: Path | str, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing (``"w"`` text or ``"wb"`` bytes);
    when the block ends without an error the file is synced and renamed to ``path``. On any
    error the temporary file is removed and ``path`` is left as it was."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode {mode!r} (expected 'w' or 'wb')")
    path = Path(path)
    if path.exists() and not path.is_file():  # a device or a named pipe (/dev/stdout): written through
        with open(path, mode, **({} if "b" in mode else {"encoding": encoding, "newline": ""})) as f:
            yield f
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:60]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": encoding, "newline": ""})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        full = full_disk_error(exc)
        if full is not None and not isinstance(full, DiskFullError):
            raise disk_full(full, path) from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: Path | str, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_open`); returns ``path``."""
    with atomic_open(path, "w", encoding) as f:
        f.write(text)
    return Path(path)


def write_bytes(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def save_torch(obj: object, path: Path | str) -> Path:
    """``torch.save(obj)`` to ``path`` atomically: a checkpoint is whole or absent."""
    import torch

    with atomic_open(path, "wb") as f:
        torch.save(obj, f)
    return Path(path)


__all__ = ["DiskFullError", "atomic_open", "corpus_name", "disk_full", "full_disk_error", "inside", "read_json_object",
           "refusal_reason", "safe_name", "save_torch", "write_bytes", "write_text"]


def refusal_reason(exc: BaseException) -> str:
    """The line of torch's weights-only refusal (``torch.load(weights_only=True)``) that names
    the object a pickle asked for, not its advice to load the file with code enabled."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    named = [line for line in lines if "GLOBAL" in line or "Unsupported" in line]
    return (named or lines or ["unsupported content"])[0].rstrip(".")


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_json_object(path: str | os.PathLike) -> dict:
    """The JSON object in the file ``path``. Not UTF-8, not JSON, nested past Python's recursion
    limit (``[[[...]]]`` 100,000 deep) or not an object: a ``ValueError`` naming the file."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: not JSON we read (nested too deep)") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not a JSON object")
    return value


# A training run's folder is claimed by one run at a time (docs/cli.md): ``<folder>/.run.lock``
# (filelock) dies with its process, so a killed run's lock file does not block the next one.
LOCK_NAME = ".run.lock"
# Run folders this process holds: resolved path -> its lock.
_HELD: dict[str, FileLock] = {}


def ddp_worker() -> bool:
    """True in a DDP worker process (rank > 0): it follows rank 0 into rank 0's folder."""
    return os.environ.get("LOCAL_RANK", "0") != "0"


def held_run(out: Path) -> Path | None:
    """A file showing that ``out`` already holds a run (a checkpoint, metrics, a summary)."""
    found = sorted((out / "checkpoints").glob("*.ckpt")) if (out / "checkpoints").is_dir() else []
    found += [p for p in (out / "csv" / "metrics.csv", out / "train_summary.json") if p.is_file()]
    return found[0] if found else None


def check_run_folder(out: Path, ckpt_path: str | None) -> None:
    """Refuse ``out`` when it holds a run that this one is not resuming."""
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
    """Take ``out`` for this run (``FileExistsError``: a live run holds it, or another run is there)."""
    if ddp_worker():
        return False
    out = Path(out)
    check_run_folder(out, ckpt_path)  # before anything is written
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(out / LOCK_NAME)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = (out / LOCK_NAME).read_text(errors="replace").strip() or "?"
        raise FileExistsError(f"{out} is in use by another training run (pid {holder}); start this "
                              f"run in another folder (hydra.run.dir=<new folder>)") from None
    try:
        check_run_folder(out, ckpt_path)  # again: a run may have finished there since the first look
    except BaseException:
        lock.release()
        raise
    (out / LOCK_NAME).write_text(f"{os.getpid()}\n")
    _HELD[str(out.resolve())] = lock
    return True


def release_run_folder(out: Path) -> None:
    """Let another run have ``out``: remove the lock file, then drop the lock."""
    lock = _HELD.pop(str(Path(out).resolve()), None)
    if lock is not None:
        try:
            (Path(out) / LOCK_NAME).unlink(missing_ok=True)
        finally:
            lock.release()


@contextlib.contextmanager
def run_folder(out: Path, ckpt_path: str | None) -> Iterator[None]:
    """``out`` claimed for this run for the block (:func:`claim_run_folder`)."""
    took = claim_run_folder(out, ckpt_path)
    try:
        yield
    finally:
        if took:
            release_run_folder(out)
