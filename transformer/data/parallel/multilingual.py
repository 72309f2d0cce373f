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

import glob
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from transformer.data.core.readers import infer_format, iter_lines
from transformer.data.core.sources import DATASETS
from transformer.data.parallel.corpus import REGISTRY, config_sources
from transformer.data.parallel.languages import Direction, direction_name, parse_pairs, tag_id


def direction_corpus(corpus: Mapping[str, Any], direction: Direction) -> dict[str, Any]:
    """The bilingual corpus of one direction of a multilingual corpus dictionary."""
    src, tgt = direction
    return {**corpus, "src_lang": src, "tgt_lang": tgt, "directions": None}


def _lang_pattern(path: str) -> tuple[str, re.Pattern]:
    """A glob and a regex capturing ``{lang}`` of a path holding ``{lang}``."""
    head, tail = path.split("{lang}", 1)
    return head + "*" + tail, re.compile(re.escape(head) + r"([A-Za-z][A-Za-z0-9_]*)" + re.escape(tail) + "$")


def languages_held(source: Any, columns: Mapping | None = None, fmt: str | None = None) -> list[str] | None:
    """The languages a training source holds, sorted: the ``{lang}`` values its files take
    (registry, local files, or a fairseq prefix), the language keys of ``columns`` for a table,
    or a JSON-lines file's first ``translation`` row; None where that cannot be known (a hub
    split, a table without a column map)."""
    if columns:
        langs = [str(k) for k in columns if k not in ("src", "tgt")]
        return sorted(langs) or None
    if not isinstance(source, str):
        return None
    if source.startswith(REGISTRY):
        if "{lang}" not in source:
            return None
        _, regex = _lang_pattern(source[len(REGISTRY):])
        return sorted({m.group(1) for rel in DATASETS if (m := regex.match(rel))})
    if "{lang}" in source:
        pattern, regex = _lang_pattern(source)
        return sorted({m.group(1) for p in glob.glob(pattern) if (m := regex.match(p))})
    path = Path(source)
    if path.is_file():
        if (fmt or infer_format(path)) == "jsonl":
            for _, line in iter_lines(path):
                row = json.loads(line)
                return sorted(row.get("translation", {})) if isinstance(row, dict) else None
        return None
    found = set()
    for ext in ("", ".gz"):  # fairseq's prefix: corpus/train -> corpus/train.<lang>
        pattern, regex = _lang_pattern(f"{source}.{{lang}}{ext}")
        found |= {m.group(1) for p in glob.glob(pattern) if (m := regex.match(p))}
    return sorted(found)


def check_pairs(d: Mapping[str, Any], where: str = "data") -> list[Direction]:
    """The directions of a data config with ``pairs``, checked before any file is read: a
    well-formed, non-empty list of two-language directions (or ``all``) whose languages the
    training files hold, and settings a multilingual corpus can take (``Languages.of_config``
    checks ``tag_side``). One ``ValueError`` naming the key."""
    if d.get("joint_vocab") is False:
        raise ValueError(f"{where}.joint_vocab=false: a multilingual model ({where}.pairs) needs one joint "
                         f"vocabulary (every language's pieces, and the target tags, in one tokenizer)")
    if d.get("train_files"):
        raise ValueError(f"{where}.train_files: not available with {where}.pairs (a single-pair setting; "
                         f"{where}.train=corpus/train reads corpus/train.<lang>)")
    temperature = d.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"{where}.temperature={temperature!r}: expected a number > 0 (1: proportional to each "
                         f"direction's size; larger: closer to uniform)")
    sources, _ = config_sources(d.get("corpus_name", "multi30k"), d.get("train"), d.get("valid"), d.get("test"),
                                d.get("tests"), d.get("valid_name") or "valid", d.get("hub"), None)
    train_key = "train"
    if d.get("distill_dir"):
        sources["train"], train_key = distill_train(d["distill_dir"]), "distill_dir"
    if "train" not in sources:
        raise ValueError(f"{where}.train: required with {where}.pairs (e.g. {where}.train=corpus/train for "
                         f"corpus/train.<lang>, one file per language)")
    langs = None if d.get("hub") else languages_held(sources["train"], d.get("columns"), d.get("format"))
    if d.get("pairs") == "all" and not langs:
        raise ValueError(f"{where}.pairs=all: cannot tell which languages {sources['train']} holds; list the "
                         f"directions ({where}.pairs=[en-de,en-fr]) or name each language's column "
                         f"({where}.columns={{en: 0, de: 1, fr: 2}})")
    if langs is not None and not langs:
        expected = f"{sources['train']}.en, transformer-distill's output" if train_key == "distill_dir" else \
            "corpus/train.en, corpus/train.de"
        raise ValueError(f"{where}.{train_key}={d.get(train_key)}: no file per language found (expected e.g. "
                         f"{expected})")
    try:
        directions = parse_pairs(d.get("pairs"), langs, f"{where}.pairs")
    except ValueError as e:
        if langs and "unknown language" in str(e):
            raise ValueError(f"{e} (no {where}.{train_key} file for it: {sources['train']}.<lang>)") from None
        raise
    if langs is not None:
        _check_split_files(d, sources, {lang for direction in directions for lang in direction}, where)
    return directions


def distill_train(distill_dir: str) -> str:
    """The training source of a multilingual student: a multilingual teacher's
    ``transformer-distill`` output, ``<distill_dir>/train.<lang>`` for each language."""
    return f"{distill_dir}/train"


def _check_split_files(d: Mapping[str, Any], sources: Mapping[str, Any], languages: set[str], where: str) -> None:
    """Every local split given as one file per language has a file for each language of the
    directions (a registry split a language lacks, as Multi30k's 2017 tests in Czech, is left
    out of that language's directions instead)."""
    keys = {"valid": None, "test": None, **{name: None for name in d.get("tests") or {}}}
    for split, source in sources.items():
        if split == "train" or not isinstance(source, str) or source.startswith(REGISTRY) or Path(source).is_file():
            continue
        held = languages_held(source)
        missing = sorted(languages - set(held or []))
        if missing:
            key = "valid" if split == (d.get("valid_name") or "valid") else \
                ("test" if split == "test" else f"tests.{split}" if split in keys else split)
            raise ValueError(f"{where}.{key}={source}: no file for {', '.join(missing)} (expected "
                             f"{source if '{lang}' in source else source + '.{lang}'} for each language of "
                             f"{where}.pairs)")


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


__all__ = ["TaggedSource", "check_pairs", "describe_mix", "direction_corpus", "distill_train", "languages_held",
           "sample_counts", "sample_indices", "temperature_shares"]
