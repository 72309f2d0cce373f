"""Parallel corpora from a user's files or the Hugging Face hub, read as streams of pairs.

A corpus is a plain dictionary (it travels in checkpoints, so evaluation can read a split by
name): the language pair, one *source* per named split, how to read the files, and optionally
held-out splits carved from the training source. A source is one of

- a path holding ``{lang}``, or a prefix as fairseq takes it: one file per language, line
  ``i`` of each a pair (``data/train.{lang}`` or ``data/train`` → ``data/train.en`` +
  ``data/train.zh``; ``.gz`` read on the fly);
- ``{"src": path, "tgt": path}``: the same, with the two files named;
- a path without ``{lang}``: one table, TSV, CSV or JSON lines (``format``, else the
  extension), with ``columns`` choosing each side (by language code or ``src``/``tgt``; a
  0-based index or header name for TSV/CSV, a dotted key for JSON lines; default: columns 0
  and 1, or ``translation.<lang>`` as in the Hugging Face layout);
- with ``hub`` set (``{"name": "wmt16", "config": "ro-en"}``), the name of a split of that
  dataset, read with ``datasets.load_dataset`` (a local folder written by ``save_to_disk``
  is read with ``load_from_disk``); columns as for JSON lines.

A path starting with ``registry:`` names a file of :data:`transformer.data.core.sources.DATASETS`,
fetched from the cache, the mirror or upstream: the built-in datasets are presets of this
module (:data:`MULTI30K`), not readers of their own.

This module chooses the files and columns; :mod:`transformer.data.core.readers` reads them
(:func:`~transformer.data.core.readers.iter_line_pairs` for one file per language,
:func:`~transformer.data.core.readers.iter_rows` for a table,
:func:`~transformer.data.core.readers.iter_hub_rows` for the hub). Every problem is a
:class:`~transformer.data.core.readers.DataFormatError` naming the file and line, or a
``ValueError`` naming the setting.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from transformer.data.core.holdout import KeySplit, check_holdout
from transformer.data.core.readers import (DataFormatError, check_column, check_hub, first_row, hub_fingerprint,
                                           infer_format, iter_hub_rows, iter_line_pairs, iter_rows, same_column)
from transformer.data.core.sources import DATASETS, fetch
from transformer.files import sha256_file

Pair = tuple[str, str]
PairStream = Callable[[], Iterator[Pair]]

REGISTRY = "registry:"
_M30K = REGISTRY + "multi30k/data/task1/raw/"
#: Multi30k task 1 as a corpus: every split upstream published that the mirror holds.
MULTI30K: dict[str, Any] = {
    "name": "multi30k",
    "sources": {split: f"{_M30K}{split}.{{lang}}.gz"
                for split in ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")},
    "valid_name": "val",
}


def multi30k(src_lang: str, tgt_lang: str) -> dict[str, Any]:
    """The Multi30k preset (:data:`MULTI30K`) as a corpus for one language pair of en/de/fr/cs
    (Czech has no 2017 test sets: reading one is a ``ValueError`` naming the split)."""
    return make_corpus(src_lang, tgt_lang, dict(MULTI30K["sources"]), name=MULTI30K["name"],
                       valid_name=MULTI30K["valid_name"])


def config_sources(corpus_name: str, train: Any, valid: Any, test: Any, tests: dict | None, valid_name: str,
                   hub: dict | None, train_files: dict | None) -> tuple[dict[str, Any], str]:
    """Each split's source as a data config names them, and the validation split's name;
    ``multi30k`` without a training source is the Multi30k preset (:data:`MULTI30K`);
    a hub dataset without sources reads its ``train``, ``validation`` and ``test`` splits;
    ``train_files`` replaces the training source."""
    if corpus_name == MULTI30K["name"] and train is None and hub is None:
        sources, valid_name = dict(MULTI30K["sources"]), MULTI30K["valid_name"]
    elif hub is not None and train is None and valid is None and test is None:
        # a hub dataset with no split named: the usual train, validation and test splits
        sources = {"train": "train", valid_name: "validation", "test": "test", **(tests or {})}
    else:
        sources = {"train": train, valid_name: valid, "test": test, **(tests or {})}
    if train_files:
        sources["train"] = train_files
    return {k: v for k, v in sources.items() if v is not None}, valid_name


def _show_map(columns: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in columns.items()) + "}"


def check_columns(columns: Any, src_lang: str | None, tgt_lang: str | None, where: str = "data.columns") -> None:
    """A column map names each side of the pair once, by language code or ``src``/``tgt``,
    and gives the two sides two different columns; else a ``ValueError`` naming ``where``.
    A map that misses a side (``{en: 0, cn: 1}`` for zh-en) would leave that side its default
    column, and the model would train on one language on both sides. Without both language
    codes only the column values are checked (:func:`check_complete` asks for the codes)."""
    if columns is None:
        return
    if not isinstance(columns, Mapping) or not columns:
        raise ValueError(f"{where}={columns!r}: expected a map from each language of the pair (or src, tgt) "
                         "to its column, e.g. {en: 0, zh: 1}")
    for key, value in columns.items():
        check_column(f"{where}.{key}", value)
    if not src_lang or not tgt_lang:
        return
    side_of = {src_lang: "src", tgt_lang: "tgt", "src": "src", "tgt": "tgt"}
    sides = [side_of.get(key) for key in columns]
    if sorted(map(str, sides)) != ["src", "tgt"]:
        raise ValueError(f"{where}={_show_map(columns)} names {', '.join(map(str, columns))}, but the pair is "
                         f"{src_lang}-{tgt_lang}: name each of {src_lang} and {tgt_lang} (or src and tgt) once")
    read = {}  # the column each key reads, its {lang} filled in
    for key, value in columns.items():
        lang = src_lang if side_of[key] == "src" else tgt_lang
        read[key] = value.replace("{lang}", lang) if isinstance(value, str) else value
    (k1, v1), (k2, v2) = read.items()
    if same_column(v1, v2):
        raise ValueError(f"{where}={_show_map(columns)}: {k1} and {k2} both read column {v1}; "
                         "each language needs its own column")


def make_corpus(src_lang: str | None, tgt_lang: str | None, sources: dict[str, Any], *, name: str = "parallel",
                valid_name: str = "valid", format: str | None = None, columns: dict | None = None,
                header: bool = False, holdout: dict | None = None, holdout_seed: int = 0,
                hub: dict | None = None, bleu_tokenize: str | None = None) -> dict[str, Any]:
    """A corpus dictionary with file paths made absolute (it must still resolve when a
    checkpoint is evaluated from another folder); checks the settings, reads nothing. What a
    corpus must have to be read (languages, a training source) is checked by
    :func:`check_complete`, so a preset with blanks for the user still builds."""
    if src_lang is not None and src_lang == tgt_lang:
        raise ValueError(f"source and target language are both {src_lang!r}")
    check_columns(columns, src_lang, tgt_lang)
    if hub is None:
        sources = {split: _absolute(s) for split, s in sources.items()}
    elif "name" not in hub:
        raise ValueError(f"data.hub={hub!r}: needs a dataset name (data.hub.name=...)")
    if holdout:
        clash = [s for s in holdout if s in sources]
        if clash:
            raise ValueError(f"data.holdout carves {clash} from the training file, but they are also given as files")
    return dict(name=name, src_lang=src_lang, tgt_lang=tgt_lang, sources=dict(sources), valid_name=valid_name,
                format=format, columns=dict(columns) if columns else None, header=bool(header),
                holdout=dict(holdout) if holdout else None, holdout_seed=int(holdout_seed),
                hub=dict(hub) if hub else None, bleu_tokenize=bleu_tokenize)


def check_complete(corpus: dict, split: str | None = None) -> None:
    """A ``ValueError`` naming the setting when the corpus cannot be read: no language codes,
    or no training source (which reading ``split`` alone needs only when it is carved from the
    training file: evaluation may name a test file and nothing else)."""
    if not corpus.get("src_lang") or not corpus.get("tgt_lang"):
        raise ValueError("data.src_lang and data.tgt_lang: required (language codes, e.g. data.src_lang=en "
                         "data.tgt_lang=zh)")
    needs_train = split is None or split == "train" or split in (corpus.get("holdout") or {})
    if needs_train and "train" not in corpus["sources"]:
        raise ValueError("data.train: required (the training file(s): data/train.{lang}, a TSV/CSV/JSON-lines "
                         "file, or a hub split name with data.hub.name=...)")


def _absolute(source: Any) -> Any:
    if isinstance(source, dict):
        if set(source) != {"src", "tgt"}:
            raise ValueError(f"a pair of files is {{src: path, tgt: path}}, got keys {sorted(source)}")
        return {side: _absolute(path) for side, path in source.items()}
    s = str(source)
    return s if s.startswith(REGISTRY) else str(Path(s).expanduser().absolute())


def split_names(corpus: dict) -> list[str]:
    """Every split of the corpus: the named sources, then the held-out ones."""
    return [*corpus["sources"], *(corpus.get("holdout") or {})]


def available(corpus: dict, split: str) -> bool:
    """False only for a split whose registry files do not exist for this language pair
    (Multi30k has no 2017 test sets in Czech)."""
    source = corpus["sources"].get(split)
    if corpus.get("hub") or not isinstance(source, str) or not source.startswith(REGISTRY):
        return True
    return all(_registry_rel(source.format(lang=lang)) in DATASETS for lang in (corpus["src_lang"], corpus["tgt_lang"]))


def _registry_rel(path: str) -> str:
    return path[len(REGISTRY):]


def _registered(path: str) -> str:
    """The registry's relative path of a ``registry:`` path; one it lacks is a ``ValueError``."""
    rel = _registry_rel(path)
    if rel not in DATASETS:
        raise ValueError(f"{path}: the data registry has no such file (language or split not published: "
                         f"see transformer/data/core/sources.py)")
    return rel


def _check_registered(corpus: dict, split: str, sides: tuple[str, str]) -> None:
    """A ``ValueError`` naming the language whose ``registry:`` file does not exist."""
    for path, side in zip(sides, ("src", "tgt")):
        if path.startswith(REGISTRY) and _registry_rel(path) not in DATASETS:
            raise ValueError(f"{corpus['name']} has no {split} split for language {corpus[f'{side}_lang']!r}: "
                             f"the data registry has no file {_registry_rel(path)}")


def _local(path: str, data_dir, mirror_root) -> Path:
    """A registry path fetched (cache, mirror, download), or a user's path as it is."""
    if not path.startswith(REGISTRY):
        return Path(path)
    return fetch(_registered(path), data_dir, mirror_root)


# ---------------------------------------------------------------------------- one source


def _side_paths(corpus: dict, source: Any) -> tuple[str, str] | None:
    """The two per-language paths of a source, or None when it is one table."""
    if isinstance(source, dict):
        return source["src"], source["tgt"]
    if "{lang}" in source:
        return source.format(lang=corpus["src_lang"]), source.format(lang=corpus["tgt_lang"])
    if not source.startswith(REGISTRY) and not Path(source).is_file():
        # fairseq's prefix form: data.train=corpus/train for corpus/train.en + corpus/train.zh
        for ext in ("", ".gz"):
            paths = tuple(f"{source}.{corpus[f'{side}_lang']}{ext}" for side in ("src", "tgt"))
            if all(Path(p).is_file() for p in paths):
                return paths
    return None


def _column(corpus: dict, side: str, default: int | str) -> int | str:
    columns = corpus.get("columns") or {}
    lang = corpus[f"{side}_lang"]
    if lang in columns:
        return columns[lang]
    return columns.get(side, default)


def table_columns(corpus: dict, fmt: str) -> list[int | str]:
    """The source and target column of a one-file source in format ``fmt`` (``jsonl`` for the hub)."""
    default = ("translation.{lang}", "translation.{lang}") if fmt == "jsonl" else (0, 1)
    cols = [_column(corpus, side, d) for side, d in zip(("src", "tgt"), default)]
    return [c.format(lang=corpus[f"{side}_lang"]) if isinstance(c, str) else c for c, side in zip(cols, ("src", "tgt"))]


def _table_pairs(corpus: dict, path: Path) -> Iterator[Pair]:
    fmt = corpus.get("format") or infer_format(path)
    if fmt == "text":
        raise ValueError(f"{path}: one text file holds one language; name one file per language with "
                         f"{{lang}} in the path, or say data.format=tsv|csv|jsonl")
    for _, (s, t) in iter_rows(path, table_columns(corpus, fmt), fmt, corpus.get("header", False)):
        yield s, t


def _source_pairs(corpus: dict, split: str, data_dir, mirror_root) -> Iterator[Pair]:
    if corpus.get("hub"):
        for _, (s, t) in iter_hub_rows(corpus["hub"], corpus["sources"][split], table_columns(corpus, "jsonl")):
            yield s, t
        return
    source = corpus["sources"][split]
    sides = _side_paths(corpus, source)
    if sides is not None:
        _check_registered(corpus, split, sides)
        yield from iter_line_pairs(*(_local(p, data_dir, mirror_root) for p in sides))
    else:
        yield from _table_pairs(corpus, _local(source, data_dir, mirror_root))


def probe_tables(corpus: dict) -> None:
    """Read the first row of every split whose source is one local table (TSV, CSV, JSON
    lines), so that a column its rows lack is a :class:`DataFormatError` naming the file and
    line before any training; other sources, and the rest of each file, are left unread."""
    if corpus.get("hub") or not corpus.get("src_lang") or not corpus.get("tgt_lang"):
        return
    for source in corpus["sources"].values():
        if not isinstance(source, str) or source.startswith(REGISTRY) or not Path(source).is_file():
            continue
        fmt = corpus.get("format") or infer_format(source)
        if _side_paths(corpus, source) is None and fmt != "text":
            first_row(source, table_columns(corpus, fmt), fmt, corpus.get("header", False))


def describe(corpus: dict, split: str) -> str:
    """Where a split comes from, for messages: its file(s), or the hub dataset and split."""
    if corpus.get("hub"):
        hub = corpus["hub"]
        return f"{hub['name']}{'/' + hub['config'] if hub.get('config') else ''} split {corpus['sources'][split]}"
    sources = corpus["sources"]
    source = sources[split] if split in sources else sources["train"]  # a held-out split is the training file's
    sides = _side_paths(corpus, source)
    return " + ".join(sides) if sides else str(source)


# ---------------------------------------------------------------------------- splits


class ParallelCorpus:
    """The splits of a corpus dictionary (:func:`make_corpus`) as streams of ``(src, tgt)``.

    ``stream(split)`` reads the split anew on every call; held-out splits are decided once
    (:class:`~transformer.data.core.holdout.KeySplit` over the training source's source sentences)
    and filtered out of the same stream.
    """

    def __init__(self, corpus: dict, data_dir: str | os.PathLike = "data/cache",
                 mirror_root: str | os.PathLike | None = None):
        self.corpus, self.data_dir, self.mirror_root = corpus, data_dir, mirror_root
        self._key_split: KeySplit | None = None

    @property
    def splits(self) -> list[str]:
        return split_names(self.corpus)

    def _raw(self, split: str) -> Iterator[Pair]:
        return _source_pairs(self.corpus, split, self.data_dir, self.mirror_root)

    def key_split(self) -> KeySplit:
        """The held-out assignment, computed on first use (one pass over the training source)."""
        if self._key_split is None:
            c = self.corpus
            self._key_split = KeySplit((s for s, _ in self._raw("train")), c["holdout"], c.get("holdout_seed", 0))
        return self._key_split

    def stream(self, split: str) -> Iterator[Pair]:
        """The pairs of ``split`` in file order; an unknown or empty split is an error."""
        check_complete(self.corpus, split)
        if split not in self.splits:
            raise ValueError(f"split {split!r} unknown; the corpus has {self.splits}")
        holdout = self.corpus.get("holdout")
        if holdout and (split in holdout or split == "train"):
            assign = self.key_split()
            pairs: Iterator[Pair] = (p for p in self._raw("train") if assign(p[0]) == split)
        else:
            pairs = self._raw(split)
        return _non_empty(pairs, split, describe(self.corpus, split))

    def streams(self) -> dict[str, PairStream]:
        """One stream factory per split."""
        return {split: (lambda s=split: self.stream(s)) for split in self.splits}

    def fingerprint(self, split: str) -> list[str]:
        """What identifies a split's text in cache keys: the settings that select it and the
        sha256 of its files (registry checksums for registered files, the dataset's own
        fingerprint for a hub split)."""
        c = self.corpus
        base = split if split in c["sources"] else "train"
        keys = [split, repr(c["sources"][base]), str(c.get("format")), repr(c.get("columns")), str(c.get("header")),
                repr(c.get("holdout")), str(c.get("holdout_seed")), c["src_lang"], c["tgt_lang"]]
        if c.get("hub"):
            return keys + [hub_fingerprint(c["hub"], c["sources"][base])]
        source = c["sources"][base]
        sides = _side_paths(c, source)
        if sides is not None:
            _check_registered(c, base, sides)
        paths = sides or (source,)
        return keys + [DATASETS[_registered(p)].sha256 if p.startswith(REGISTRY)
                       else sha256_file(_local(p, self.data_dir, self.mirror_root)) for p in paths]


def read_pairs(corpus: dict, split: str, data_dir: str | os.PathLike = "data/cache",
               mirror_root: str | os.PathLike | None = None) -> list[Pair]:
    """Every pair of one split as a list, for scripts and small splits (a data module streams
    them instead: :meth:`ParallelCorpus.stream`)."""
    return list(ParallelCorpus(corpus, data_dir, mirror_root).stream(split))


def _non_empty(pairs: Iterator[Pair], split: str, where: str) -> Iterator[Pair]:
    n = 0
    for n, pair in enumerate(pairs, 1):
        yield pair
    if n == 0:
        raise DataFormatError(where, 0, f"split {split!r} is empty")


# ----------------------------------------------------------------------------- checking the config
# The checks of a parallel corpus's config (transformer.data.parallel.datamodule.TranslationDataModule),
# run by transformer.data.core.datamodule.check_data_config before any file is read:
#
# - the language pair: two different codes; a column map names each of them (or ``src``/``tgt``)
#   once and gives them two columns (transformer.data.parallel.corpus.check_columns);
# - columns are 0-based indexes or names, and a local table's first row has them (a
#   transformer.data.core.readers.DataFormatError naming the file and line);
# - every split has one source: a file or a share held out of the training file, not both, and
#   training has a validation split to validate on;
# - a hub dataset can be loaded (transformer.data.core.readers.check_hub).


def _check_languages(d: dict, where: str) -> None:
    src, tgt = d.get("src_lang"), d.get("tgt_lang")
    for key, lang in (("src_lang", src), ("tgt_lang", tgt)):
        if lang is not None and (not isinstance(lang, str) or not lang.strip()):
            raise ValueError(f"{where}.{key}={lang!r}: expected a language code (en, zh, ...)")
    if src is not None and src == tgt:
        raise ValueError(f"{where}.src_lang={src} and {where}.tgt_lang={tgt}: the same language twice; "
                         f"a pair needs two (e.g. {where}.src_lang=en {where}.tgt_lang=zh)")


def check_parallel(d: dict, where: str, complete: bool = False) -> None:
    """A translation data config (:class:`~transformer.data.parallel.datamodule.TranslationDataModule`);
    ``complete``: a run's, which needs its training source."""
    _check_languages(d, where)
    src, tgt, hub = d.get("src_lang"), d.get("tgt_lang"), d.get("hub")
    if hub is not None:
        check_hub(hub, f"{where}.hub")
    check_columns(d.get("columns"), src, tgt, f"{where}.columns")
    corpus_name, train_files = d.get("corpus_name", "multi30k"), d.get("train_files")
    sources, valid_name = config_sources(corpus_name, d.get("train"), d.get("valid"), d.get("test"), d.get("tests"),
                                         d.get("valid_name") or "valid", hub, train_files)
    if corpus_name == MULTI30K["name"] and d.get("train") is None and hub is None:  # the preset's own files
        keys = {"train": "train_files"} if train_files else {}
    else:
        keys = {"train": "train_files" if train_files else "train", valid_name: "valid", "test": "test",
                **{name: f"tests.{name}" for name in d.get("tests") or {}}}
    files = {split: (keys.get(split), source) for split, source in sources.items()}
    holdout = d.get("holdout")
    if holdout is not None:
        check_holdout(holdout, files, where)
    if "train" not in sources:
        if complete:
            raise ValueError(f"{where}.train: required (the training file(s): {where}.train=corpus/train for "
                             f"corpus/train.<lang>, a TSV/CSV/JSON-lines file, or a hub split with "
                             f"{where}.hub.name=...; with {where}.src_lang and {where}.tgt_lang)")
        return
    if not src or not tgt:
        raise ValueError(f"{where}.src_lang and {where}.tgt_lang: required with {where}.train (language codes, "
                         f"e.g. {where}.src_lang=en {where}.tgt_lang=zh)")
    if valid_name not in sources and valid_name not in (holdout or {}):
        raise ValueError(f"{where}.valid: training needs a validation split; set {where}.valid=<file(s)> (as "
                         f"{where}.train), or carve it from the training file with "
                         f"{where}.holdout={{{valid_name}: 1000}}")
    eval_splits = d.get("eval_splits")
    if isinstance(eval_splits, list) and valid_name not in eval_splits:
        raise ValueError(f"{where}.eval_splits={eval_splits}: leaves out the validation split {valid_name!r}, "
                         f"which training validates on")
    probe_tables(make_corpus(src, tgt, sources, valid_name=valid_name, format=d.get("format"),
                             columns=d.get("columns"), header=d.get("header", False), holdout=holdout, hub=hub))


__all__ = ["MULTI30K", "Pair", "PairStream", "ParallelCorpus", "REGISTRY", "available", "check_columns",
           "check_complete", "check_parallel", "config_sources", "describe", "make_corpus", "multi30k",
           "probe_tables", "read_pairs", "split_names", "table_columns"]
