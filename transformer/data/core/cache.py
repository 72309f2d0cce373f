"""The Arrow cache every kind of data is prepared into: ``datasets.Dataset`` tables on disk,
memory-mapped, written here and read here without loading them.

A kind's data module writes its tables through :func:`map_cached` (tokenizing a table batch by
batch, optionally in ``num_proc`` worker processes) or its own streaming writer, then reads
back what batching needs: the length columns as numpy arrays (:func:`column_arrays`); a
loader reads each batch's rows from the memory-mapped table. Tokenizer training reads the text
columns as a stream (:func:`iter_text_batches`), never as a list of every sentence.

Every cache file is named by :func:`cache_key` over what it was made from (the source files'
sha256 or the caller's key, the tokenizer's content hash, for tagging the tag vocabulary)
and :data:`FORMAT_VERSION`. A changed file or tokenizer therefore gets a different Arrow
file, never a stale one; an unchanged one is memory-mapped back without being built again,
once its sha256 matches the one recorded beside it (``<file>.sha256``, written when it was
built; :func:`check_cache`); a file that does not match is rebuilt with a warning. Runs sharing
a cache folder take turns building it (:func:`cache_lock`). Nothing here needs the network
(``HF_DATASETS_OFFLINE=1`` is fine).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Iterator

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from filelock import FileLock

from transformer.files import sha256_file
from transformer.files import write_text

log = logging.getLogger(__name__)

#: Bump when the layout of the cached columns changes.
FORMAT_VERSION = 1

_List = getattr(datasets, "List", None) or datasets.Sequence  # datasets<4 spells it Sequence
#: The feature of a column of piece-id lists (``src``, ``tgt``, ``word_ids``, ``tags``).
ID_LIST = _List(datasets.Value("int32"))


def cache_key(*parts: Any) -> str:
    """sha256 over a JSON rendering of ``parts`` (plus the format version)."""
    blob = json.dumps([FORMAT_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def record_cache(path: str | os.PathLike) -> None:
    """Write ``<path>.sha256`` (the file's sha256) beside a cache file just built."""
    path = Path(path)
    digest = _digest_path(path)
    write_text(digest, f"{sha256_file(path)}  {path.name}\n")


def publish_cache(built: str | os.PathLike, path: str | os.PathLike) -> None:
    """Move the finished file ``built`` (in ``path``'s folder) to ``path``, recording its sha256
    first: another process checking the cache meanwhile never sees the file without its digest
    (which :func:`check_cache` would take for a stale file and remove)."""
    path = Path(path)
    write_text(_digest_path(path), f"{sha256_file(built)}  {path.name}\n")
    os.replace(built, path)


@contextlib.contextmanager
def cache_lock(cache_dir: str | os.PathLike) -> Iterator[None]:
    """Hold the cache folder's lock (``<cache_dir>/.lock``, a ``filelock.FileLock``) for the
    block: two runs sharing a cache take turns building it, and the second finds every file
    the first built, complete and with its digest. A folder that cannot hold a lock file (read
    only) is used without one: nothing is built there."""
    folder = Path(cache_dir)
    lock = FileLock(folder / ".lock")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except OSError:
        yield
        return
    try:
        yield
    finally:
        lock.release()


def check_cache(path: str | os.PathLike) -> bool:
    """True when the cache file ``path`` exists and matches the sha256 recorded when it was
    built. A file that does not match (truncated, corrupted, or from before digests were
    recorded) is removed, with a warning when a digest said otherwise, so it is rebuilt."""
    path = Path(path)
    digest = _digest_path(path)
    if not path.is_file():
        return False
    recorded = digest.read_text(encoding="utf-8").split()[:1] if digest.is_file() else []
    actual = sha256_file(path)
    if recorded == [actual]:
        return True
    if recorded:
        log.warning("cache file %s has sha256 %s, but %s was recorded when it was built: rebuilding it",
                    path, actual, recorded[0])
    else:
        log.info("cache file %s has no recorded sha256: rebuilding it", path)
    path.unlink()
    digest.unlink(missing_ok=True)
    return False


#: Rows per Arrow record batch written (and per tokenizing batch). Opening a memory-mapped
#: table reads every batch's header, and each read faults in the file pages around it, which
#: count as resident: fewer, larger batches keep that small.
WRITE_ROWS = 10_000


def _shard_files(cache_file: Path, num_proc: int) -> list[Path]:
    """The files ``Dataset.map(num_proc=n)`` writes for ``cache_file`` (one per worker)."""
    if num_proc <= 1:
        return [cache_file]
    return [cache_file.with_name(f"{cache_file.stem}_{r:05d}_of_{num_proc:05d}{cache_file.suffix}")
            for r in range(num_proc)]


def default_num_proc(n_rows: int) -> int:
    """Worker processes for tokenizing ``n_rows`` examples: one below 100k rows (starting
    workers costs more than it saves), else one per available core."""
    if n_rows < 100_000:
        return 1
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def map_cached(ds: datasets.Dataset, fn, cache_file: Path, key: str, features, remove: list[str],
                num_proc: int = 1) -> datasets.Dataset:
    """``ds.map(fn)`` cached in ``cache_file`` (one file per worker with ``num_proc > 1``); the
    files are reused only when every sha256 still matches the one recorded when it was
    written (a corrupted id is never trained on)."""
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    num_proc = max(1, min(int(num_proc), len(ds)))
    files = _shard_files(cache_file, num_proc)
    verified = [check_cache(f) for f in files]
    if not all(verified):  # one bad shard: rebuild them all, so none is stale
        for f in files:
            f.unlink(missing_ok=True)
            _digest_path(f).unlink(missing_ok=True)
    out = ds.map(
        fn,
        batched=True,
        batch_size=WRITE_ROWS,
        writer_batch_size=WRITE_ROWS,
        remove_columns=remove,
        features=features,
        cache_file_name=str(cache_file),
        new_fingerprint=key[:40],  # datasets appends "_0000r_of_0000n" per worker; 64 at most
        load_from_cache_file=True,
        num_proc=num_proc if num_proc > 1 else None,
        desc=f"tokenizing {cache_file.stem}",
    )
    if not all(verified):
        for f in files:
            record_cache(f)
    return out


def ids_column(seqs: list[list[int]]) -> tuple[pa.Array, np.ndarray]:
    """Piece-id lists as one Arrow ``list<int32>`` column (built from flat numpy buffers,
    not row by row) and the lists' lengths."""
    lengths = np.fromiter((len(x) for x in seqs), dtype=np.int32, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)), lengths


def int_column(ds: datasets.Dataset, column: str) -> list[int]:
    """A scalar column as Python ints, honouring any ``select`` indices mapping."""
    # One columnar read: iterating a Column formats row by row (slow).
    return ds.select_columns([column]).with_format("arrow")[:][column].to_pylist()


def column_arrays(ds: datasets.Dataset, columns: Sequence[str]) -> list[np.ndarray]:
    """Scalar columns (a lengths column: a few bytes per example, what batching keeps in
    memory) as numpy arrays, honouring any ``select`` mapping.

    A table that is its files as they are is read as a stream, batch by batch, rather than
    through its memory map: picking one small column out of a memory-mapped table would
    fault in the pages around it, leaving much of the file counted as resident memory.
    """
    if ds._indices is None and ds.cache_files:  # noqa: SLF001  (no public "has a mapping" test)
        parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
        for f in ds.cache_files:
            for batch in _stream_batches(f["filename"]):
                for c in columns:  # a copy: a view would keep the whole batch it was read in alive
                    parts[c].append(batch.column(c).to_numpy().copy())
        if sum(len(x) for x in parts[columns[0]]) == len(ds):  # else a slice of its files
            return [np.concatenate(parts[c]) if parts[c] else np.zeros(0, np.int64) for c in columns]
    table = ds.select_columns(list(columns)).with_format("arrow")[:]
    return [table[c].to_numpy() for c in columns]


def column_array(ds: datasets.Dataset, column: str) -> np.ndarray:
    """One scalar column as a numpy array (:func:`column_arrays`)."""
    return column_arrays(ds, [column])[0]


def list_column_ids(ds: datasets.Dataset, column: str, batch_size: int = 10_000) -> np.ndarray:
    """The sorted distinct ids in a list-of-ids column (e.g. every target token of a split),
    read batch by batch: one pass, the distinct ids the only thing kept."""
    seen = np.zeros(0, np.int64)
    if ds._indices is None and ds.cache_files:  # noqa: SLF001  (no public "has a mapping" test)
        batches = (b.column(column) for f in ds.cache_files for b in _stream_batches(f["filename"]))
    else:
        batches = (b[column] for b in ds.select_columns([column]).with_format("arrow").iter(batch_size))
    for col in batches:
        ids = pc.unique(pc.list_flatten(col)).to_numpy(zero_copy_only=False).astype(np.int64)
        seen = np.union1d(seen, ids)
    return seen


#: Rows a tokenizer is trained on at most (a sample spread over the table, as sentencepiece's
#: ``input_sentence_size`` does): the subword vocabulary settles long before, while the
#: trainer's word counting would grow with the corpus.
TOKENIZER_TRAIN_ROWS = 500_000


def iter_text_batches(ds: datasets.Dataset, columns: Sequence[str], batch_size: int = 1000,
                      max_rows: int | None = None) -> Iterator[list[str]]:
    """The text of ``columns``, as lists of strings, one list per column per batch of rows;
    with ``max_rows``, only every k-th batch, k chosen so that about ``max_rows`` rows come.

    A table read straight from its Arrow files (no ``select``/``shuffle`` mapping) is read
    as a stream: each batch is read into memory and let go, so one pass over a corpus
    leaves none of it resident (memory-mapped pages that a pass touches stay counted in
    the process's resident size). Feeds ``tokenizers``' ``train_from_iterator`` in batches.
    """
    stride = -(-len(ds) // max_rows) if max_rows and len(ds) > max_rows else 1
    if ds._indices is None and ds.cache_files:  # noqa: SLF001  (no public "has a mapping" test)
        batches = (b for f in ds.cache_files for b in _stream_batches(f["filename"]))
    else:
        batches = ds.select_columns(list(columns)).with_format("arrow").iter(batch_size)
    for i, batch in enumerate(batches):
        if i % stride == 0:
            for column in columns:
                yield batch.column(column).to_pylist()


def _stream_batches(path: str) -> Iterator[pa.RecordBatch]:
    with pa.OSFile(path) as source:
        yield from pa.ipc.open_stream(source)


__all__ = ["FORMAT_VERSION", "ID_LIST", "TOKENIZER_TRAIN_ROWS", "WRITE_ROWS", "cache_key", "cache_lock", "check_cache",
           "column_array", "column_arrays", "default_num_proc", "ids_column", "int_column", "iter_text_batches",
           "list_column_ids", "map_cached", "publish_cache", "record_cache"]
