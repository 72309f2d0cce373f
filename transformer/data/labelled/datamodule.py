"""The sentence classification LightningDataModule: labelled text from a user's files (see
:mod:`transformer.data.labelled.corpus`), one label per sentence, batched under a token budget (see
:mod:`transformer.data.core.datamodule` for what every data module does on ``setup()``).

The splits are named files (``train``, ``dev``, optionally ``test``) in one format with the
same columns. A batch is ``src (B, T)`` piece ids (right-padded), ``labels (B,)`` and
``index (B,)`` (the row's position in its split).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Sequence

import datasets
import torch

from transformer.data.core.batching import cut_row, pad_ids
from transformer.data.core.cache import ID_LIST, cache_key, int_column, map_cached
from transformer.data.core.datamodule import TokenBudgetDataModule, load_or_train_tokenizer
from transformer.files import sha256_file
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.labelled.corpus import (LabelledFile, carve, check_label_names, check_labelled, label_ids,
                                              label_vocab, read_split)
from transformer.files import inside
from transformer.ranges import Range

log = logging.getLogger(__name__)

FEATURES = datasets.Features({
    "src": ID_LIST,
    "label": datasets.Value("int32"),
    "index": datasets.Value("int64"),
    "n_pieces": datasets.Value("int32"),
})


class ClassificationCollator:
    """Examples ``{"src": ids, "label": int, "index": int}`` → ``{"src" (B, T), "labels" (B,),
    "index" (B,)}``; ``"label"`` may be absent (text to classify). With ``max_positions`` a
    longer row is cut to that many pieces, its closing framing ``suffix`` kept (``cut_row``)."""

    def __init__(self, pad_id: int, max_positions: int | None = None, suffix: Sequence[int] = ()):
        self.pad_id = pad_id
        self.max_positions, self.suffix = max_positions, list(suffix)

    def __call__(self, examples: Sequence[dict]) -> dict[str, torch.Tensor]:
        batch = {
            "src": pad_ids([cut_row(e["src"], self.max_positions, self.suffix) for e in examples],
                           self.pad_id),  # (B, T)
            "index": torch.as_tensor([int(e["index"]) for e in examples], dtype=torch.long),  # (B,)
        }
        if "label" in examples[0]:
            batch["labels"] = torch.as_tensor([int(e["label"]) for e in examples], dtype=torch.long)  # (B,)
        return batch


def tokenize_labelled(data: LabelledFile, labels: Sequence[str], tokenizer: SubwordTokenizer,
                      cache_dir: str | os.PathLike, name: str, source_hashes: Sequence) -> datasets.Dataset:
    """Columns ``src`` (pieces), ``label`` (id), ``index``, ``n_pieces``, cached as Arrow under
    ``cache_dir/arrow/`` keyed by the file's hash, the tokenizer and the label list."""
    ids = label_ids(data, labels)  # an unknown label fails here, naming its file and line
    key = cache_key("classification", list(source_hashes), len(data), tokenizer.content_hash, list(labels))
    raw = datasets.Dataset.from_dict({"text": data.texts, "label": ids, "index": list(range(len(data)))})

    def fn(batch: dict[str, list]) -> dict[str, list]:
        # A pretrained family's tokenizer frames each sentence as its model read it ([CLS] … [SEP]).
        src = [tokenizer.frame(ids) for ids in tokenizer.encode_batch(batch["text"])]
        return {"src": src, "label": batch["label"], "index": batch["index"], "n_pieces": [len(s) for s in src]}

    return map_cached(raw, fn, inside(Path(cache_dir) / "arrow", f"{name}-{key[:16]}.arrow"), key, FEATURES, ["text"])


class ClassificationDataModule(TokenBudgetDataModule):
    """Labelled sentences from named files.

    Args:
        train, dev: paths of the training and validation files (required by ``setup``);
            test: optional.
        name: a short name for caches and run folders (``sst2``).
        file_format: ``tsv`` | ``csv`` | ``jsonl``; None = from each file's extension.
        text_column, label_column: 0-based column indices, header names (``header: true``)
            or JSON keys.
        header: the first row of a TSV/CSV file names the columns.
        tokenizer_model, vocab_size: the subword tokenizer trained on the training texts
            (cached under ``data_dir/tokenizers/``); tokenizer_path: use this one instead.
        max_len: training sentences with more pieces are dropped (``filter_report``).
        max_positions: the most pieces the model reads (a learned position table: training sets
            it from the model config); longer rows of every split are cut to it, with a warning.
        train_subset: use only the first N training rows.
        holdout: ``{split: size}`` splits carved from the training file instead of read from
            their own (e.g. ``{dev: 0.1, test: 1000}``: a fraction or a row count each), seeded
            by ``holdout_seed``, every copy of a text in one split.
        label_names: what to call the labels when the data writes ids (``[negative, positive]``
            for SST-2's ``0``/``1``), one per label in sorted order; None: as the data writes them.

    After ``setup()``: ``tokenizer``, ``labels`` (the training file's labels, sorted),
    ``label_names`` (``label_names`` checked against them, or None),
    ``raw(split)`` (a :class:`~transformer.data.labelled.corpus.LabelledFile`).
    """

    val_split = "dev"
    check_config = staticmethod(check_labelled)  # its config's checks, before any file is read

    def __init__(
        self,
        train: str | None = None,
        dev: str | None = None,
        test: str | None = None,
        name: str = "classification",
        file_format: str | None = None,
        text_column: int | str = 0,
        label_column: int | str = 1,
        header: bool = False,
        data_dir: str | os.PathLike = "data/cache",
        vocab_size: Annotated[int, Range(1, 2**24)] = 8000,
        tokenizer_model: str = "bpe",
        max_tokens: Annotated[int, Range(1, 2**31)] = 2048,
        max_len: Annotated[int, Range(1, 2**20)] = 256,
        num_workers: Annotated[int, Range(0, 1024)] = 0,
        seed: int = 0,
        tokenizer_path: str | os.PathLike | None = None,
        train_subset: Annotated[int | None, Range(1, 2**40)] = None,
        holdout: dict[str, float] | None = None,
        holdout_seed: int = 0,
        label_names: Sequence[str] | None = None,
        max_positions: Annotated[int | None, Range(1, 2**20)] = None,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.max_positions = max_positions
        self.save_hyperparameters()
        self.paths = {s: Path(p).resolve() for s, p in (("train", train), ("dev", dev), ("test", test)) if p}
        self.name, self.file_format, self.header = name, file_format, header
        self.text_column, self.label_column = text_column, label_column
        self.data_dir, self.vocab_size, self.tokenizer_model = Path(data_dir), vocab_size, tokenizer_model
        self.tokenizer_path, self.max_len, self.train_subset = tokenizer_path, max_len, train_subset
        self.holdout, self.holdout_seed = dict(holdout or {}), holdout_seed
        both = sorted(set(self.holdout) & set(self.paths))
        if both or "train" in self.holdout:
            raise ValueError(f"data.holdout.{(both or ['train'])[0]}: a split is either a file or carved from "
                             "the training file, not both")
        self.test_splits = ["test"] if "test" in self.paths or "test" in self.holdout else []
        self.tokenizer: SubwordTokenizer | None = None
        self.labels: list[str] = []
        self.label_names = check_label_names(label_names)
        self._raw: dict[str, LabelledFile] = {}

    def settings(self) -> dict:
        """What a checkpoint keeps to read a split again: the files (absolute) and columns."""
        return {"name": self.name, "paths": {s: str(p) for s, p in self.paths.items()},
                "file_format": self.file_format, "text_column": self.text_column,
                "label_column": self.label_column, "header": self.header,
                "holdout": self.holdout, "holdout_seed": self.holdout_seed}

    def _read_all(self) -> dict[str, LabelledFile]:
        """Every split: its own file, or carved from the training file (``holdout``)."""
        if not self.holdout:
            return {split: read_split(self.settings(), split) for split in self.paths}
        whole = read_split({**self.settings(), "holdout": {}}, "train")
        parts = carve(whole, self.holdout, self.holdout_seed)
        return {**parts, **{split: read_split(self.settings(), split) for split in self.paths if split != "train"}}

    def _load_tokenizer(self, hashes: list) -> SubwordTokenizer:
        if self.tokenizer_path is not None:
            return SubwordTokenizer.load(self.tokenizer_path)
        key = cache_key("clstok", hashes, self.tokenizer_model, self.vocab_size)[:16]
        path = inside(self.data_dir / "tokenizers", f"{self.name}-{self.tokenizer_model}{self.vocab_size}-{key}.json")
        texts = self._raw["train"].texts
        return load_or_train_tokenizer(path, lambda: iter(texts), self.vocab_size, self.tokenizer_model)

    def _build(self) -> None:
        missing = [s for s in ("train", "dev") if s not in self.paths and s not in self.holdout]
        if missing:
            raise ValueError(f"data.{missing[0]} is required: set data.train=<file> data.dev=<file> "
                             "(or carve dev from train: data.holdout={dev:0.1})")
        self._raw = self._read_all()
        columns = [self.file_format, self.text_column, self.label_column, self.header]
        carved = [sorted(self.holdout.items()), self.holdout_seed] if self.holdout else []
        hashes = {s: [sha256_file(self.paths.get(s, self.paths["train"])), *columns, s, *carved] for s in self._raw}
        if self.train_subset is not None:
            train = self._raw["train"]
            n = self.train_subset
            self._raw["train"] = LabelledFile(train.path, train.texts[:n], train.labels[:n], train.lines[:n])
            hashes["train"].append(n)
        self.labels = label_vocab(self._raw["train"])
        check_label_names(self.label_names, self.labels)
        self.tokenizer = self._load_tokenizer(hashes["train"])
        self._record_vocab_size(self.tokenizer)
        for split, data in self._raw.items():
            name = f"{self.name}-{split}"
            ds = tokenize_labelled(data, self.labels, self.tokenizer, self.data_dir, name, hashes[split])
            ds = ds.with_format(None)
            lengths = self._lengths_of(ds)
            self._add_split(split, ds, lengths, lengths, name)

    def _lengths_of(self, ds) -> list[int]:
        # An empty sentence still takes a row of the batch.
        return [max(n, 1) for n in int_column(ds, "n_pieces")]

    def _collator(self) -> ClassificationCollator:
        return ClassificationCollator(pad_id=self.tokenizer.pad_id, max_positions=self.max_positions,
                                      suffix=self.tokenizer.framing[1])

    def raw(self, split: str) -> LabelledFile:
        """A split's rows in file order (train: before the length filter)."""
        return self._raw[split]


__all__ = ["ClassificationCollator", "ClassificationDataModule", "tokenize_labelled"]
