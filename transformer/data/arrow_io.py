"""Reading prepared Arrow tables without loading them: a scalar column as one numpy array,
text columns streamed in batches (tokenizer training), a raw pairs table as a sequence of
``(src, tgt)`` tuples. See :mod:`transformer.data.preprocess` for how the tables are made."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Iterator

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


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


__all__ = ["TOKENIZER_TRAIN_ROWS", "ArrowPairs", "column_array", "column_arrays", "iter_text_batches"]
