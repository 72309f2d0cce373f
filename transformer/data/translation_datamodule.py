"""The translation LightningDataModule: Multi30k (task 1) between any two of en/de/fr/cs, or a
plain-text parallel corpus as its training split (see :mod:`transformer.data.datamodule_base`
for what every data module does on ``setup()``)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Iterator, Sequence

import datasets
import numpy as np

from transformer.data.arrow_io import TOKENIZER_TRAIN_ROWS, ArrowPairs, column_arrays, iter_text_batches
from transformer.data.batching import TranslationCollator
from transformer.data.datamodule_base import TokenBudgetDataModule, load_or_train_tokenizer
from transformer.data.preprocess import cache_key, raw_pairs_dataset, tokenize_translation
from transformer.data.readers import DataFormatError, read_multi30k
from transformer.data.sources import DATASETS, multi30k_relpath, sha256_file
from transformer.data.tables import iter_lines
from transformer.data.tokenizer import SubwordTokenizer

MULTI30K_EVAL_SPLITS = ("val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")


class TranslationDataModule(TokenBudgetDataModule):
    """Multi30k (task 1) translation between any two of en/de/fr/cs.

    Args:
        src_lang, tgt_lang: language codes.
        data_dir: download / Arrow / tokenizer cache.
        mirror_root: local dataset mirror (else ``$TRANSFORMER_DATA_MIRROR``, else HTTP).
        vocab_size, joint_vocab, tokenizer_model: subword vocabulary ("bpe" | "unigram" |
            "word"), one shared by both sides when ``joint_vocab``; trained on the training
            split only.
        max_tokens: padded-token budget per batch. max_len: training pairs with either side
            longer than this many pieces are dropped (counted in ``filter_report``).
        pad_to_multiple: round batch widths up to multiples of this (8 on GPUs: few shapes for
            a compiled step, aligned matrix sizes; 1 on CPUs, where padding is only cost).
        train_files: ``{"src": path, "tgt": path}`` plain-text parallel corpus replacing the
            Multi30k training split (e.g. distilled targets); also trains the tokenizer
            unless ``tokenizer_path`` is given.
        eval_splits: splits besides train to prepare; None = val and every test split
            upstream has for the pair except test_2018_flickr (not in the mirror; name it
            explicitly to download it).
        tokenizer_path: reuse saved tokenizer(s): one ``tokenizer.json`` (both sides) or
            ``{"src": path, "tgt": path}``.
        train_subset: use only the first N training pairs.

    After ``setup()``: ``src_tokenizer``, ``tgt_tokenizer``, ``raw(split)``, ``test_splits``.
    """

    def __init__(
        self,
        src_lang: str,
        tgt_lang: str,
        data_dir: str | os.PathLike = "data/cache",
        mirror_root: str | os.PathLike | None = None,
        vocab_size: int = 8000,
        joint_vocab: bool = True,
        tokenizer_model: str = "bpe",
        max_tokens: int = 4096,
        max_len: int = 256,
        num_workers: int = 0,
        seed: int = 0,
        train_files: dict[str, str] | None = None,
        eval_splits: Sequence[str] | None = None,
        tokenizer_path: str | os.PathLike | dict[str, str] | None = None,
        train_subset: int | None = None,
        pad_to_multiple: int = 1,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        self.pad_to_multiple = pad_to_multiple
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.data_dir = Path(data_dir)
        self.mirror_root = mirror_root
        self.vocab_size = vocab_size
        self.joint_vocab = joint_vocab
        self.tokenizer_model = tokenizer_model
        self.max_len = max_len
        self.train_files = dict(train_files) if train_files else None
        self.tokenizer_path = tokenizer_path
        self.train_subset = train_subset
        if eval_splits is None:
            eval_splits = [s for s in MULTI30K_EVAL_SPLITS if self._has_split(s)]
        else:
            for s in eval_splits:  # fail early with the registry's clear message
                multi30k_relpath(s, src_lang)
                multi30k_relpath(s, tgt_lang)
        self.eval_splits = [s for s in dict.fromkeys(eval_splits) if s != "train"]
        self.test_splits = [s for s in self.eval_splits if s != self.val_split]
        self.src_tokenizer: SubwordTokenizer | None = None
        self.tgt_tokenizer: SubwordTokenizer | None = None
        self._raw: dict[str, datasets.Dataset] = {}

    def _has_split(self, split: str) -> bool:
        return all(f"multi30k/data/task1/raw/{split}.{lang}.gz" in DATASETS for lang in (self.src_lang, self.tgt_lang))

    def _split_hashes(self, split: str) -> list[str]:
        if split == "train" and self.train_files:
            return [sha256_file(self.train_files["src"]), sha256_file(self.train_files["tgt"])]
        return [DATASETS[multi30k_relpath(split, lang)].sha256 for lang in (self.src_lang, self.tgt_lang)]

    def _pairs(self, split: str) -> Iterator[tuple[str, str]]:
        """A split's pairs in file order, streamed (train: the first ``train_subset``)."""
        if split == "train" and self.train_files:
            pairs = iter_parallel(self.train_files["src"], self.train_files["tgt"])
        else:
            pairs = iter(read_multi30k(split, self.src_lang, self.tgt_lang, self.data_dir, self.mirror_root))
        if split == "train" and self.train_subset is not None:
            pairs = itertools.islice(pairs, self.train_subset)
        return pairs

    def _raw_table(self, split: str) -> datasets.Dataset:
        """A split's raw pairs as a cached Arrow table; training leaves out one-sided pairs."""
        label = None
        if split == "train":
            label = str(self.train_files["tgt"] if self.train_files else f"multi30k {self.src_lang}-{self.tgt_lang} train")
        key = [self._split_hashes(split), self.train_subset if split == "train" else None]
        return raw_pairs_dataset(lambda: self._pairs(split), self.data_dir, self._name(split), key, drop_one_sided=label)

    def _name(self, split: str) -> str:
        if split == "train" and self.train_files:
            return f"parallel-{self.src_lang}-{self.tgt_lang}-train"
        return f"multi30k-{self.src_lang}-{self.tgt_lang}-{split}"

    def _tokenizers(self) -> tuple[SubwordTokenizer, SubwordTokenizer]:
        tp = self.tokenizer_path
        if tp is not None:
            if isinstance(tp, (str, os.PathLike)):
                tok = SubwordTokenizer.load(tp)
                return tok, tok
            return SubwordTokenizer.load(tp["src"]), SubwordTokenizer.load(tp["tgt"])
        train = self._raw["train"]
        key = cache_key("tok", self._split_hashes("train"), len(train), self.tokenizer_model, self.vocab_size,
                        self.joint_vocab, self.src_lang, self.tgt_lang, min(len(train), TOKENIZER_TRAIN_ROWS))[:16]
        folder = self.data_dir / "tokenizers"
        stem = f"{self.src_lang}-{self.tgt_lang}-{self.tokenizer_model}{self.vocab_size}"
        n, model = self.vocab_size, self.tokenizer_model
        # The text is streamed from the Arrow table in batches (a sample of a large corpus).
        def texts(*columns: str):
            return lambda: iter_text_batches(train, columns, max_rows=TOKENIZER_TRAIN_ROWS)

        if self.joint_vocab:
            tok = load_or_train_tokenizer(folder / f"{stem}-joint-{key}.json", texts("src_text", "tgt_text"), n, model)
            return tok, tok
        src = load_or_train_tokenizer(folder / f"{stem}-src-{key}.json", texts("src_text"), n, model)
        tgt = load_or_train_tokenizer(folder / f"{stem}-tgt-{key}.json", texts("tgt_text"), n, model)
        return src, tgt

    def setup(self, stage: str | None = None) -> None:
        if self._ready:
            return
        for split in ["train", *self.eval_splits]:
            self._raw[split] = self._raw_table(split)
        self.src_tokenizer, self.tgt_tokenizer = self._tokenizers()
        self._record_vocab_size(self.src_tokenizer)
        for split, raw in self._raw.items():
            key = [self._split_hashes(split), self.train_subset if split == "train" else None]
            ds = tokenize_translation(raw, self.src_tokenizer, self.tgt_tokenizer, self.data_dir, self._name(split), key)
            sides = np.stack(column_arrays(ds, ["src_len", "tgt_len"]), axis=1)  # (N, 2)
            self._add_split(split, ds, sides.max(axis=1).astype(np.int64) + 1, sides, self._name(split))
        self._ready = True

    def _lengths_of(self, ds) -> np.ndarray:
        """Each pair's padded width (:func:`~transformer.data.batching.translation_length`), as a column."""
        src_len, tgt_len = column_arrays(ds, ["src_len", "tgt_len"])
        return np.maximum(src_len, tgt_len).astype(np.int64) + 1

    def _collator(self) -> TranslationCollator:
        t = self.tgt_tokenizer
        return TranslationCollator(pad_id=t.pad_id, bos_id=t.bos_id, eos_id=t.eos_id,
                                   pad_to_multiple=self.pad_to_multiple)

    def raw(self, split: str) -> ArrowPairs:
        """Untokenized ``(src, tgt)`` pairs of a split in file order (BLEU references), read
        from the split's Arrow table; for train, before the length filter."""
        return ArrowPairs(self._raw[split])


def iter_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """Line-aligned pairs from two text files (``.gz`` too), streamed; files of different
    lengths are a :class:`DataFormatError` at the first line one of them lacks."""
    missing = (0, None)
    for (i, s), (j, t) in itertools.zip_longest(iter_lines(src_path), iter_lines(tgt_path), fillvalue=missing):
        if s is None or t is None:
            long_, n = (tgt_path, j) if s is None else (src_path, i)
            raise DataFormatError(long_, n, f"parallel files differ in length: {src_path if s is None else tgt_path} "
                                            f"ends before this line")
        yield s, t


__all__ = ["MULTI30K_EVAL_SPLITS", "TranslationDataModule"]
