"""Splits as Hugging Face ``datasets.Dataset`` objects: Arrow files on disk, memory-mapped,
made here and read here without loading them.

A parallel corpus is prepared in two cached steps, neither of which holds it in memory:

1. :func:`raw_pairs_dataset` writes the pairs a reader streams into an Arrow table
   (``src_text, tgt_text, index``), a few thousand rows at a time;
2. :func:`tokenize_translation` maps that table, batch by batch and optionally in
   ``num_proc`` worker processes, into the tokenized table (``src, tgt, index, src_len,
   tgt_len``).

Unlabelled text to pretrain on takes the same two steps: :func:`raw_text_dataset` writes the
passages (``text, index``), :func:`tokenize_text` the pieces, a passage longer than the model
reads cut into chunks (``src, index, n_pieces``).

Batching then needs only the length columns, as numpy arrays (:func:`column_arrays`), and a
loader reads each batch's rows from the memory-mapped table. Tokenizer training reads the text
columns as a stream (:func:`iter_text_batches`), never as a list of every sentence; a raw pairs
table is read as a sequence of ``(src, tgt)`` tuples (:class:`ArrowPairs`).

Every cache file is named by :func:`cache_key` over what it was made from (the source files'
sha256 or the caller's key, the tokenizer's content hash, for tagging the tag vocabulary)
and :data:`FORMAT_VERSION`. A changed file or tokenizer therefore gets a different Arrow
file, never a stale one; an unchanged one is memory-mapped back without being built again,
once its sha256 matches the one recorded beside it (``<file>.sha256``, written when it was
built; :func:`check_cache`); a file that does not match is rebuilt with a warning. Nothing
here needs the network (``HF_DATASETS_OFFLINE=1`` is fine).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.arrow_writer import ArrowWriter

from transformer.data.batching import IGNORE_INDEX
from transformer.data.readers import TaggedSentence
from transformer.data.sources import sha256_file
from transformer.data.tokenizer import SubwordTokenizer
from transformer.files import inside, write_text

log = logging.getLogger(__name__)

#: Bump when the layout of the cached columns changes.
FORMAT_VERSION = 1

_List = getattr(datasets, "List", None) or datasets.Sequence  # datasets<4 spells it Sequence

RAW_PAIR_FEATURES = datasets.Features(
    {"src_text": datasets.Value("string"), "tgt_text": datasets.Value("string"), "index": datasets.Value("int64")}
)
TRANSLATION_FEATURES = datasets.Features(
    {
        "src": _List(datasets.Value("int32")),
        "tgt": _List(datasets.Value("int32")),
        "index": datasets.Value("int64"),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)
TAGGING_FEATURES = datasets.Features(
    {
        "src": _List(datasets.Value("int32")),
        "word_ids": _List(datasets.Value("int32")),
        "tags": _List(datasets.Value("int32")),
        "index": datasets.Value("int64"),
        "n_pieces": datasets.Value("int32"),
    }
)
RAW_TEXT_FEATURES = datasets.Features({"text": datasets.Value("string"), "index": datasets.Value("int64")})
TEXT_FEATURES = datasets.Features(
    {"src": _List(datasets.Value("int32")), "index": datasets.Value("int64"), "n_pieces": datasets.Value("int32")}
)
# With an auxiliary tag set (multi-task tagging): a second tag id per word.
TAGGING_AUX_FEATURES = datasets.Features({**TAGGING_FEATURES, "aux_tags": _List(datasets.Value("int32"))})


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
    """Hold the cache folder's lock (``<cache_dir>/.lock``, an exclusive ``flock``) for the
    block: two runs sharing a cache take turns building it, and the second finds every file
    the first built, complete and with its digest. A folder that cannot hold a lock file (read
    only) is used without one: nothing is built there."""
    folder = Path(cache_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / ".lock", "a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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


# Rows per Arrow record batch written (and per tokenizing batch). Opening a memory-mapped
# table reads every batch's header, and each read faults in the file pages around it, which
# count as resident: fewer, larger batches keep that small.
_WRITE_ROWS = 10_000


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


def _map_cached(ds: datasets.Dataset, fn, cache_file: Path, key: str, features, remove: list[str],
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
        batch_size=_WRITE_ROWS,
        writer_batch_size=_WRITE_ROWS,
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


def _list_column(seqs: list[list[int]]) -> tuple[pa.Array, np.ndarray]:
    """Piece-id lists as one Arrow ``list<int32>`` column (built from flat numpy buffers,
    not row by row) and the lists' lengths."""
    lengths = np.fromiter((len(x) for x in seqs), dtype=np.int32, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)), lengths




def _one_sided_warning(label: str, lines: list[int], n: int) -> str:
    shown = ", ".join(map(str, lines)) + (" ..." if n > len(lines) else "")
    return f"{label}: {n} pair(s) with one side empty left out of training (line {shown})"


def _write_pairs(pairs: Iterable[tuple[str, str]], path: Path, drop_one_sided: bool) -> tuple[list[int], int]:
    """Stream ``pairs`` into the Arrow file ``path``, ``_WRITE_ROWS`` at a time; with
    ``drop_one_sided``, pairs with exactly one empty (or whitespace) side are left out.
    Returns the first ten left-out line numbers (1-based positions in ``pairs``) and how many."""
    dropped: list[int] = []
    n_dropped = n_kept = 0
    src: list[str] = []
    tgt: list[str] = []
    with ArrowWriter(features=RAW_PAIR_FEATURES, path=str(path), writer_batch_size=_WRITE_ROWS) as writer:
        def flush() -> None:
            nonlocal n_kept
            index = pa.array(np.arange(n_kept, n_kept + len(src), dtype=np.int64))
            writer.write_table(pa.table({"src_text": pa.array(src, pa.string()), "tgt_text": pa.array(tgt, pa.string()),
                                         "index": index}))
            n_kept += len(src)
            src.clear()
            tgt.clear()

        for line, (s, t) in enumerate(pairs, 1):
            if drop_one_sided and bool(s.strip()) != bool(t.strip()):
                n_dropped += 1
                if len(dropped) < 10:
                    dropped.append(line)
                continue
            src.append(s)
            tgt.append(t)
            if len(src) == _WRITE_ROWS:
                flush()
        if src or not n_kept:
            flush()
        writer.finalize()
    return dropped, n_dropped


def raw_pairs_dataset(
    pairs_fn: Callable[[], Iterable[tuple[str, str]]],
    cache_dir: str | os.PathLike,
    name: str,
    key: Any,
    drop_one_sided: str | None = None,
) -> datasets.Dataset:
    """A split's sentence pairs as a memory-mapped Arrow table with columns ``src_text,
    tgt_text`` and ``index`` (position in the table), cached under
    ``cache_dir/arrow/{name}-raw-{hash}.arrow``.

    ``pairs_fn()`` streams the ``(src, tgt)`` pairs; it is called only when the cache has no
    valid table for ``key``, which must identify the text (the files' sha256, a subset
    size, ...). The pairs are written as they come, so memory does not grow with the corpus.

    ``drop_one_sided``: a label (the file or corpus name) to leave out pairs with one side
    empty and the other not, counted in a warning naming their lines; such a pair teaches
    the model to translate a sentence into nothing. The warning is repeated whenever the
    cached table is reused. None keeps every pair (evaluation splits).
    """
    full = cache_key("pairs", key, drop_one_sided is not None)
    path = inside(Path(cache_dir) / "arrow", f"{name}-raw-{full[:16]}.arrow")
    note = path.with_name(path.name + ".dropped")
    if not check_cache(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            lines, n = _write_pairs(pairs_fn(), tmp, drop_one_sided is not None)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        note.unlink(missing_ok=True)
        if n:
            write_text(note, _one_sided_warning(drop_one_sided, lines, n) + "\n")
        publish_cache(tmp, path)
    if note.is_file():
        log.warning("%s", note.read_text(encoding="utf-8").strip())
    return datasets.Dataset.from_file(str(path))


def tokenize_translation(
    raw: datasets.Dataset,
    src_tokenizer: SubwordTokenizer,
    tgt_tokenizer: SubwordTokenizer,
    cache_dir: str | os.PathLike,
    name: str,
    key: Any,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Dataset with columns ``src, tgt`` (piece ids, no specials), ``index`` (the raw row's
    ``index``), ``src_len, tgt_len``; cached under ``cache_dir/arrow/{name}-{hash}.arrow``
    (``..._0000r_of_0000n.arrow`` per worker with ``num_proc=n``).

    ``raw`` has the columns ``src_text, tgt_text, index`` (:func:`raw_pairs_dataset`);
    ``key`` must identify its text. It is read and written in batches, in ``num_proc``
    worker processes (None: :func:`default_num_proc`); the result is memory-mapped.
    """
    key = cache_key("translation", key, len(raw), src_tokenizer.content_hash, tgt_tokenizer.content_hash)
    cache_file = inside(Path(cache_dir) / "arrow", f"{name}-{key[:16]}.arrow")

    def fn(batch: pa.Table) -> pa.Table:
        src, src_len = _list_column(src_tokenizer.encode_batch(batch.column("src_text").to_pylist()))
        tgt, tgt_len = _list_column(tgt_tokenizer.encode_batch(batch.column("tgt_text").to_pylist()))
        return pa.table({"src": src, "tgt": tgt, "index": batch.column("index"),
                         "src_len": pa.array(src_len), "tgt_len": pa.array(tgt_len)})

    n = default_num_proc(len(raw)) if num_proc is None else num_proc
    ds = _map_cached(raw.with_format("arrow"), fn, cache_file, key, TRANSLATION_FEATURES,
                     ["src_text", "tgt_text"], n)
    return ds.with_format(None)


def raw_text_dataset(texts_fn: Callable[[], Iterable[str]], cache_dir: str | os.PathLike, name: str,
                     key: Any) -> datasets.Dataset:
    """A split's passages as a memory-mapped Arrow table with columns ``text`` and ``index``
    (position in the table), cached under ``cache_dir/arrow/{name}-raw-{hash}.arrow`` like
    :func:`raw_pairs_dataset`: ``texts_fn()`` streams them, only when the cache has no valid
    table for ``key``, and they are written as they come."""
    path = inside(Path(cache_dir) / "arrow", f"{name}-raw-{cache_key('text', key)[:16]}.arrow")
    if not check_cache(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with ArrowWriter(features=RAW_TEXT_FEATURES, path=str(tmp), writer_batch_size=_WRITE_ROWS) as writer:
                n = 0
                for chunk in _batched(texts_fn(), _WRITE_ROWS):
                    index = pa.array(np.arange(n, n + len(chunk), dtype=np.int64))
                    writer.write_table(pa.table({"text": pa.array(chunk, pa.string()), "index": index}))
                    n += len(chunk)
                if not n:
                    writer.write_table(pa.table({"text": pa.array([], pa.string()), "index": pa.array([], pa.int64())}))
                writer.finalize()
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        publish_cache(tmp, path)
    return datasets.Dataset.from_file(str(path))


def _batched(items: Iterable[str], n: int) -> Iterator[list[str]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, n)):
        yield chunk


#: A chunk's ``index`` is its passage's index times this, plus the chunk's number: unique per row.
CHUNKS_PER_PASSAGE = 1 << 20


def chunk_spans(word_start: Sequence[bool], max_len: int) -> list[tuple[int, int]]:
    """``[start, end)`` spans of at most ``max_len`` pieces covering a passage, each ending
    before a piece that begins a word when one is in reach (a word longer than ``max_len`` is
    cut inside)."""
    spans, start, n = [], 0, len(word_start)
    while start < n:
        end = min(start + max_len, n)
        if end < n:
            cut = end
            while cut > start + 1 and not word_start[cut]:
                cut -= 1
            end = cut if word_start[cut] and cut > start else end
        spans.append((start, end))
        start = end
    return spans


def tokenize_text(raw: datasets.Dataset, tokenizer: SubwordTokenizer, cache_dir: str | os.PathLike, name: str,
                  key: Any, max_len: int, num_proc: int | None = None) -> datasets.Dataset:
    """Dataset with columns ``src`` (piece ids, no specials), ``index`` (``passage index *
    CHUNKS_PER_PASSAGE + chunk number``) and ``n_pieces``, cached like
    :func:`tokenize_translation`. A passage of more than ``max_len`` pieces becomes several
    rows (:func:`chunk_spans`, cut between words where it can), never dropped."""
    key = cache_key("text", key, len(raw), tokenizer.content_hash, max_len)
    cache_file = inside(Path(cache_dir) / "arrow", f"{name}-{key[:16]}.arrow")
    starts = tokenizer.word_starts()

    def fn(batch: pa.Table) -> pa.Table:
        src: list[list[int]] = []
        index: list[int] = []
        for ids, i in zip(tokenizer.encode_batch(batch.column("text").to_pylist()), batch.column("index").to_pylist()):
            for c, (s, e) in enumerate(chunk_spans([starts[t] for t in ids], max_len)):
                src.append(ids[s:e])
                index.append(i * CHUNKS_PER_PASSAGE + c % CHUNKS_PER_PASSAGE)
        column, lengths = _list_column(src)
        return pa.table({"src": column, "index": pa.array(index, pa.int64()), "n_pieces": pa.array(lengths)})

    n = default_num_proc(len(raw)) if num_proc is None else num_proc
    ds = _map_cached(raw.with_format("arrow"), fn, cache_file, key, TEXT_FEATURES, ["text", "index"], n)
    return ds.with_format(None)


def tokenize_tagging(
    sentences: Sequence[TaggedSentence],
    tags: Sequence[Sequence[str]],
    tokenizer: SubwordTokenizer,
    tag_vocab: Sequence[str],
    cache_dir: str | os.PathLike,
    name: str,
    source_hashes: Sequence[str],
    aux_tags: Sequence[Sequence[str]] | None = None,
    aux_vocab: Sequence[str] | None = None,
) -> datasets.Dataset:
    """Dataset with ``src`` (pieces), ``word_ids`` (word of each piece), ``tags`` (tag id
    per word), ``index``, ``n_pieces``, and with ``aux_tags``/``aux_vocab`` an ``aux_tags``
    column (a second tag id per word); cached like :func:`tokenize_translation`. A tag
    ``None`` (a word without that annotation) becomes ``IGNORE_INDEX``: no loss, no score."""
    if (aux_tags is None) != (aux_vocab is None):
        raise ValueError("aux_tags and aux_vocab go together")
    aux = list(aux_vocab) if aux_vocab is not None else None
    key = cache_key("tagging", list(source_hashes), len(sentences), tokenizer.content_hash, list(tag_vocab),
                    *([aux] if aux is not None else []))
    cache_file = inside(Path(cache_dir) / "arrow", f"{name}-{key[:16]}.arrow")
    tag_to_id = {None: IGNORE_INDEX, **{t: i for i, t in enumerate(tag_vocab)}}
    aux_to_id = {None: IGNORE_INDEX, **{t: i for i, t in enumerate(aux or [])}}
    columns = {"words": [s.words for s in sentences], "tag_names": [list(t) for t in tags],
               "index": list(range(len(sentences)))}
    if aux_tags is not None:
        columns["aux_names"] = [list(t) for t in aux_tags]

    def fn(batch: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {"src": [], "word_ids": [], "tags": [], "index": batch["index"], "n_pieces": []}
        for words, names in zip(batch["words"], batch["tag_names"]):
            ids, word_ids = tokenizer.encode_words(words)
            out["src"].append(ids)
            out["word_ids"].append(word_ids)
            out["tags"].append([tag_to_id[t] for t in names])
            out["n_pieces"].append(len(ids))
        if "aux_names" in batch:
            out["aux_tags"] = [[aux_to_id[t] for t in names] for names in batch["aux_names"]]
        return out

    features = TAGGING_AUX_FEATURES if aux_tags is not None else TAGGING_FEATURES
    remove = [c for c in columns if c != "index"]
    return _map_cached(datasets.Dataset.from_dict(columns), fn, cache_file, key, features, remove)


# ----------------------------------------------------------------------------- reading the tables
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


class ArrowPairs(Sequence):
    """A raw pairs table (:func:`raw_pairs_dataset`) seen as a sequence of ``(src, tgt)``
    tuples, read from disk on access: ``len``, indexing (an int or 0-d tensor) and iteration
    in batches, without a list of the corpus in memory."""

    def __init__(self, ds: datasets.Dataset):
        self.dataset = ds

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row = self.dataset[int(i)]
        return row["src_text"], row["tgt_text"]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        texts = iter_text_batches(self.dataset, ["src_text", "tgt_text"])
        for src in texts:
            yield from zip(src, next(texts))
