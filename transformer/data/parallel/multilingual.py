"""One corpus, many directions: what ``data.pairs`` adds to a parallel corpus.

A multi-way parallel corpus (Multi30k: line ``i`` of ``train.en``, ``train.de``, ``train.fr``
and ``train.cs`` say the same thing) gives a direction per ordered pair of its languages. A
multilingual corpus dictionary is a bilingual one (:func:`~transformer.data.parallel.corpus.make_corpus`)
without a language pair and with ``directions`` (``["en-de", "en-fr"]``); each direction reads
its pairs as the bilingual corpus :func:`direction_corpus` makes, so files, columns, prefixes
and the registry work as for one pair.

Training mixes the directions by temperature (Arivazhagan et al. 2019, "Massively Multilingual
Neural Machine Translation in the Wild"): direction ``i`` of ``n_i`` pairs is drawn with
probability ``p_i ∝ n_i^(1/T)``; ``T=1`` keeps the corpus proportions, a larger ``T``
flattens them toward uniform, so small directions are seen more often (:func:`temperature_shares`).
Each epoch draws its own sample of that mix, seeded by the run's seed and the epoch
(``TranslationDataModule._epoch_draw``): an up-sampled direction repeats a different part of
itself each epoch, a down-sampled one shows a different part.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from transformer.data.parallel.languages import Direction, direction_name, tag_id


def direction_corpus(corpus: Mapping[str, Any], direction: Direction) -> dict[str, Any]:
    """The bilingual corpus of one direction of a multilingual corpus dictionary."""
    src, tgt = direction
    return {**corpus, "src_lang": src, "tgt_lang": tgt, "directions": None}


def temperature_shares(sizes: Sequence[int], temperature: float) -> np.ndarray:
    """Each direction's share of the training draws, ``p_i ∝ n_i^(1/T)`` (sums to 1)."""
    n = np.asarray(sizes, dtype=np.float64)
    weights = np.where(n > 0, n, 0.0) ** (1.0 / float(temperature))
    return weights / weights.sum()


def sample_counts(sizes: Sequence[int], temperature: float) -> list[int]:
    """How many training examples each direction contributes to an epoch of the same total
    size as the corpus: ``round(p_i · Σn)``, at least one for a non-empty direction."""
    total = int(sum(sizes))
    shares = temperature_shares(sizes, temperature)
    return [max(int(round(p * total)), 1 if n else 0) for p, n in zip(shares, sizes)]


def sample_indices(size: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` row indices of a direction of ``size`` rows: every row as often as the count
    allows (up-sampling repeats them), the remainder drawn without replacement; sorted."""
    full, rest = divmod(count, size)
    idx = np.concatenate([np.tile(np.arange(size), full), rng.choice(size, rest, replace=False)])
    return np.sort(idx.astype(np.int64))


class TaggedSource:
    """A tokenizer whose ``encode_batch`` puts the tag of ``tgt_lang`` before every source
    (:func:`~transformer.data.parallel.languages.tag_ids`), for tokenizing one direction's
    source column; its ``content_hash`` tells the tags apart for the cache."""

    def __init__(self, tokenizer, tgt_lang: str):
        self.tokenizer, self.tgt_lang = tokenizer, tgt_lang
        self.tag = tag_id(tokenizer, tgt_lang)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [[self.tag, *ids] for ids in self.tokenizer.encode_batch(texts)]

    @property
    def content_hash(self) -> str:
        return f"{self.tokenizer.content_hash}+<2{self.tgt_lang}>"


def describe_mix(directions: Sequence[Direction], sizes: Sequence[int], counts: Sequence[int]) -> str:
    """A line per direction: its pairs, its share of the training draws, and its examples per epoch."""
    total = max(sum(counts), 1)
    return "; ".join(f"{direction_name(d)}: {n} pairs, share {c / total:.1%} ({c} per epoch)"
                     for d, n, c in zip(directions, sizes, counts))


__all__ = ["TaggedSource", "describe_mix", "direction_corpus", "sample_counts", "sample_indices", "temperature_shares"]
