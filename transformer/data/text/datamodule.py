"""The LightningDataModule of unlabelled text (masked-LM pretraining): passages from any of a
user's files (see :mod:`transformer.data.text.corpus`), batched under a token budget (see
:mod:`transformer.data.core.datamodule` for what every data module does on ``setup()``).

The passages go into a raw Arrow table as they are read, the tokenizer is trained on the
training table (byte-level, ``prefix_space``: a word reads alike at the start of a sentence and
inside one, and alike in a sentence and alone, as a tagger gives it) unless one is given, and
each passage is tokenized into one row, or several of at most ``max_len`` pieces when it is
longer (:func:`tokenize_text`, cut between words by :func:`chunk_spans`). Both tables are cached
(:mod:`transformer.data.core.cache`): :func:`raw_text_dataset`, then :func:`tokenize_text`.

A batch is ``src (B, T)`` piece ids (right-padded, no special tokens; a pretrained family's
tokenizer frames each row as the family does, ``[CLS] … [SEP]``), ``index (B,)``, and two
numbers counted on the host: ``key``, the smallest row index of the batch (batches of an epoch
share no row, so it names the batch: the masking is drawn from it, see
:func:`transformer.tasks.mlm.masking_seed`), and ``n_tokens``, its real pieces.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Iterator

import datasets
import numpy as np
import pyarrow as pa
import torch
from datasets.arrow_writer import ArrowWriter

from transformer.data.core.batching import pad_ids
from transformer.data.core.cache import (ID_LIST, TOKENIZER_TRAIN_ROWS, WRITE_ROWS, cache_key, check_cache,
                                         column_array, default_num_proc, ids_column, iter_text_batches, map_cached,
                                         publish_cache)
from transformer.data.core.datamodule import TokenBudgetDataModule, load_or_train_tokenizer
from transformer.data.core.readers import DataFormatError
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.text.corpus import TextCorpus, check_text, describe, make_sources
from transformer.files import inside
from transformer.ranges import Range

log = logging.getLogger(__name__)

RAW_TEXT_FEATURES = datasets.Features({"text": datasets.Value("string"), "index": datasets.Value("int64")})
TEXT_FEATURES = datasets.Features(
    {"src": ID_LIST, "index": datasets.Value("int64"), "n_pieces": datasets.Value("int32")}
)


def raw_text_dataset(texts_fn: Callable[[], Iterable[str]], cache_dir: str | os.PathLike, name: str,
                     key: Any) -> datasets.Dataset:
    """A split's passages as a memory-mapped Arrow table with columns ``text`` and ``index``
    (position in the table), cached under ``cache_dir/arrow/{name}-raw-{hash}.arrow``:
    ``texts_fn()`` streams them, only when the cache has no valid table for ``key`` (which must
    identify the text), and they are written as they come, so memory does not grow with the
    corpus."""
    path = inside(Path(cache_dir) / "arrow", f"{name}-raw-{cache_key('text', key)[:16]}.arrow")
    if not check_cache(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with ArrowWriter(features=RAW_TEXT_FEATURES, path=str(tmp), writer_batch_size=WRITE_ROWS) as writer:
                n = 0
                for chunk in _batched(texts_fn(), WRITE_ROWS):
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
    """Dataset with columns ``src`` (piece ids, no specials but a family tokenizer's framing), ``index`` (``passage index *
    CHUNKS_PER_PASSAGE + chunk number``) and ``n_pieces``, cached under
    ``cache_dir/arrow/{name}-{hash}.arrow`` (one file per worker with ``num_proc=n``; None:
    :func:`~transformer.data.core.cache.default_num_proc`). A passage of more than ``max_len``
    pieces becomes several rows (:func:`chunk_spans`, cut between words where it can), never
    dropped."""
    framed = ["framed"] if any(tokenizer.framing) else []
    key = cache_key("text", key, len(raw), tokenizer.content_hash, max_len, *framed)
    cache_file = inside(Path(cache_dir) / "arrow", f"{name}-{key[:16]}.arrow")
    starts = tokenizer.word_starts()
    # A pretrained family's rows are framed as it was pretrained ([CLS] ... [SEP], <s> ... </s>),
    # the frame counted in max_len; a tokenizer trained here frames nothing.
    room = max(1, max_len - sum(len(part) for part in tokenizer.framing))

    def fn(batch: pa.Table) -> pa.Table:
        src: list[list[int]] = []
        index: list[int] = []
        for ids, i in zip(tokenizer.encode_batch(batch.column("text").to_pylist()), batch.column("index").to_pylist()):
            for c, (s, e) in enumerate(chunk_spans([starts[t] for t in ids], room)):
                src.append(tokenizer.frame(ids[s:e]))
                index.append(i * CHUNKS_PER_PASSAGE + c % CHUNKS_PER_PASSAGE)
        column, lengths = ids_column(src)
        return pa.table({"src": column, "index": pa.array(index, pa.int64()), "n_pieces": pa.array(lengths)})

    n = default_num_proc(len(raw)) if num_proc is None else num_proc
    ds = map_cached(raw.with_format("arrow"), fn, cache_file, key, TEXT_FEATURES, ["text", "index"], n)
    return ds.with_format(None)


class TextCollator:
    """Examples ``{"src": ids, "index": int}`` → ``{"src" (B, T), "index" (B,), "key": int,
    "n_tokens": int}`` (see the module docstring)."""

    def __init__(self, pad_id: int, pad_to_multiple: int = 1):
        self.pad_id, self.multiple = pad_id, pad_to_multiple

    def __call__(self, examples: Sequence[dict]) -> dict[str, Any]:
        index = [int(e["index"]) for e in examples]
        return {
            "src": pad_ids([e["src"] for e in examples], self.pad_id, self.multiple),  # (B, T)
            "index": torch.as_tensor(index, dtype=torch.long),  # (B,)
            "key": min(index),
            "n_tokens": sum(len(e["src"]) for e in examples),
        }


class TextDataModule(TokenBudgetDataModule):
    """Passages of unlabelled text, tokenized and batched by token budget.

    Args:
        files: the training sources (:func:`transformer.data.text.corpus.make_source`: paths, or
            mappings with ``path, format, column, header``, or hub splits).
        valid: validation sources; None: a held-out share of the training passages.
        format, column, header: how a bare path is read (None: from its extension; a table's
            column; whether its first row names the columns).
        valid_fraction, valid_seed: the held-out share without ``valid`` (seeded, every copy of
            a passage on one side).
        name: names the cache files.
        vocab_size, tokenizer_model: the tokenizer trained on the training passages (a sample of
            ``TOKENIZER_TRAIN_ROWS`` of a large corpus); tokenizer_path: use this one instead.
        max_len: the most pieces a row holds; longer passages are cut into several rows.
        max_positions: the most pieces the model reads (a learned position table: training sets
            it from the model config); rows are cut at it where it is below ``max_len``, with a
            warning.
        max_tokens, pad_to_multiple: the batches' padded-token budget and width rounding.
        train_subset: use only the first N training passages.

    After ``setup()``: ``tokenizer``; ``settings()`` is what a checkpoint records.
    """

    val_split = "valid"
    check_config = staticmethod(check_text)  # its config's checks, before any file is read

    def __init__(
        self,
        files: Any = None,
        valid: Any = None,
        name: str = "text",
        format: str | None = None,
        column: int | str = 0,
        header: bool = False,
        valid_fraction: float = 0.01,
        valid_seed: int = 0,
        data_dir: str | os.PathLike = "data/cache",
        mirror_root: str | os.PathLike | None = None,
        vocab_size: Annotated[int, Range(1, 2**24)] = 8000,
        tokenizer_model: str = "bpe",
        max_tokens: Annotated[int, Range(1, 2**31)] = 4096,
        max_len: Annotated[int, Range(1, 2**20)] = 128,
        pad_to_multiple: Annotated[int, Range(1, 2**16)] = 1,
        num_workers: Annotated[int, Range(0, 1024)] = 0,
        seed: int = 0,
        tokenizer_path: str | os.PathLike | None = None,
        train_subset: Annotated[int | None, Range(1, 2**40)] = None,
        max_positions: Annotated[int | None, Range(1, 2**20)] = None,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        self.max_positions = max_positions
        self.pad_to_multiple = pad_to_multiple
        self.train_sources = make_sources(files, format, column, header, "data.files")
        self.valid_sources = make_sources(valid, format, column, header, "data.valid")
        self.name, self.valid_fraction, self.valid_seed = name, valid_fraction, valid_seed
        self.data_dir, self.mirror_root = Path(data_dir), mirror_root
        self.vocab_size, self.tokenizer_model, self.tokenizer_path = vocab_size, tokenizer_model, tokenizer_path
        self.max_len, self.train_subset = max_len, train_subset
        self.row_len = min(max_len, max_positions or max_len)  # the pieces a row holds
        self.test_splits: list[str] = []
        self.tokenizer: SubwordTokenizer | None = None
        self._raw: dict[str, Any] = {}

    def settings(self) -> dict:
        """What a checkpoint records of its text: the sources and how validation was made."""
        return {"name": self.name, "files": self.train_sources, "valid": self.valid_sources or None,
                "valid_fraction": self.valid_fraction, "valid_seed": self.valid_seed, "max_len": self.row_len}

    def _corpus(self) -> TextCorpus:
        return TextCorpus(self.train_sources, self.valid_sources, self.valid_fraction, self.valid_seed,
                          self.data_dir, self.mirror_root)

    def _raw_table(self, corpus: TextCorpus, split: str):
        key = corpus.fingerprint(split)
        stream = lambda: corpus.stream(split)  # noqa: E731
        if split == "train" and self.train_subset is not None:
            key = [*key, f"subset={self.train_subset}"]
            stream = lambda: itertools.islice(corpus.stream(split), self.train_subset)  # noqa: E731
        table = raw_text_dataset(stream, self.data_dir, f"{self.name}-{split}", key)
        if not len(table):
            where = ", ".join(describe(s) for s in (self.valid_sources if split == "valid" and self.valid_sources
                                                    else self.train_sources))
            hint = (f" (data.valid_fraction={self.valid_fraction} held none out: raise it, or give data.valid=<file>)"
                    if split == "valid" and not self.valid_sources else "")
            raise DataFormatError(where, 0, f"no {split} passage{hint}")
        return table, key

    def _load_tokenizer(self, key) -> SubwordTokenizer:
        if self.tokenizer_path is not None:
            return SubwordTokenizer.load(self.tokenizer_path)
        train = self._raw["train"]
        key = cache_key("texttok", key, len(train), self.tokenizer_model, self.vocab_size, "prefix_space")[:16]
        path = inside(self.data_dir / "tokenizers", f"{self.name}-{self.tokenizer_model}{self.vocab_size}-{key}.json")
        return load_or_train_tokenizer(path, lambda: iter_text_batches(train, ["text"], max_rows=TOKENIZER_TRAIN_ROWS),
                                       self.vocab_size, self.tokenizer_model, prefix_space=True)

    def _build(self) -> None:
        corpus = self._corpus()
        keys = {}
        for split in ("train", "valid"):
            self._raw[split], keys[split] = self._raw_table(corpus, split)
        self.tokenizer = self._load_tokenizer(keys["train"])
        self._record_vocab_size(self.tokenizer)
        if self.row_len < self.max_len:
            log.warning("%s: rows of at most %d pieces, the model's learned position table, not data.max_len=%d",
                        self.name, self.row_len, self.max_len)
        for split, raw in self._raw.items():
            name = f"{self.name}-{split}"
            ds = tokenize_text(raw, self.tokenizer, self.data_dir, name, keys[split], self.row_len)
            lengths = self._lengths_of(ds)
            self._add_split(split, ds, lengths, lengths, name)
        log.info("text: %d training rows from %d passages, %d validation rows", len(self._datasets["train"]),
                 len(self._raw["train"]), len(self._datasets["valid"]))

    def _lengths_of(self, ds):
        return column_array(ds, "n_pieces").astype("int64")

    def _collator(self) -> TextCollator:
        return TextCollator(pad_id=self.tokenizer.pad_id, pad_to_multiple=self.pad_to_multiple)


__all__ = ["CHUNKS_PER_PASSAGE", "RAW_TEXT_FEATURES", "TEXT_FEATURES", "TextCollator", "TextDataModule", "chunk_spans",
           "raw_text_dataset", "tokenize_text"]
