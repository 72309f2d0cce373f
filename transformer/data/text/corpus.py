"""Unlabelled text to pretrain on: any file a user has, read by the readers every task uses
(:mod:`transformer.data.core.readers`), as a stream of passages (one a row).

A *source* is one file or one split of a hub dataset; a config gives a list of them
(``data.files``), each either a path or a mapping:

- ``path``: a local file, or ``registry:<relpath>`` for a file of the data registry (cache,
  mirror or download); ``<zip>!<member>`` reads a member of a zip file;
- ``format``: how the file is read (None: from its extension, :func:`source_format`):

  ``text``      one passage a line (``.gz`` too): a corpus, or one side of a parallel corpus;
  ``tsv``, ``csv``, ``jsonl``  a ``column`` of a table (an index, a header name with
                ``header: true``, a dotted JSON key): the text column of a labelled file,
                one side of a parallel table;
  ``conllu``    each sentence's words (FORM), joined by spaces: a treebank's text;
  ``conll2000`` each sentence's words from word-per-line columns (``WORD POS CHUNK``);

- ``{hub: <name or folder>, config: ..., split: train, column: text}``: a Hugging Face dataset.

Blank passages are skipped (counted in the log). Without a validation source, validation is a
held-out share of the training passages (``valid_fraction``): a passage goes there when a
seeded hash of its text falls below that share (:func:`transformer.data.core.holdout.key_digest`), so
every copy of a text lands in the same split, the choice does not depend on file order, and it
needs no memory beyond the passage at hand. Long passages are cut later, when they are
tokenized (:func:`transformer.data.text.datamodule.tokenize_text`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from transformer.data.core.holdout import key_digest
from transformer.data.core.readers import (FORMATS, WORD_POS_CHUNK, check_hub, first_row, hub_fingerprint, infer_format,
                                           iter_columns, iter_conllu, iter_hub_rows, iter_lines, iter_rows)
from transformer.data.core.sources import DATASETS, fetch
from transformer.files import sha256_file

log = logging.getLogger(__name__)

REGISTRY = "registry:"
#: Every way a source can be read.
TEXT_FORMATS = (*FORMATS, "conllu", "conll2000")
_SOURCE_KEYS = {"path", "format", "column", "header"}
_HUB_KEYS = {"hub", "config", "split", "column"}


def source_format(path: str) -> str:
    """The format a path's extension names: ``.conllu`` → conllu, else as tables are named
    (:func:`~transformer.data.core.readers.infer_format`: ``.tsv``, ``.csv``, ``.jsonl``, else text);
    a zip member by the member's name."""
    name = str(path).rsplit("!", 1)[-1].lower().removesuffix(".gz")
    return "conllu" if name.endswith(".conllu") else infer_format(name)


def make_source(entry: Any, format: str | None = None, column: int | str = 0, header: bool = False,
                where: str = "data.files") -> dict:
    """One source as a plain mapping, every setting filled in (``format``, ``column``,
    ``header`` are the defaults for a bare path), local paths made absolute; a ``ValueError``
    names ``where`` for what cannot be read."""
    if isinstance(entry, Mapping) and "hub" in entry:
        unknown = sorted(set(entry) - _HUB_KEYS)
        if unknown or not isinstance(entry["hub"], str) or not entry["hub"]:
            raise ValueError(f"{where}={dict(entry)!r}: a hub source is {{hub: <name or folder>, config: ..., "
                             f"split: train, column: text}}")
        return {"hub": entry["hub"], "config": entry.get("config"), "split": str(entry.get("split") or "train"),
                "column": str(entry.get("column") if entry.get("column") is not None else "text")}
    if isinstance(entry, Mapping):
        unknown = sorted(set(entry) - _SOURCE_KEYS)
        if unknown or "path" not in entry:
            raise ValueError(f"{where}={dict(entry)!r}: a file is a path or {{path: ..., format: ..., column: ..., "
                             f"header: ...}}" + (f" (unknown key {unknown[0]!r})" if unknown else ""))
        path, fmt = entry["path"], entry.get("format", format)
        column, header = entry.get("column", column), entry.get("header", header)
    else:
        path, fmt = entry, format
    if not isinstance(path, str) or not path:
        raise ValueError(f"{where}={path!r}: expected a file path")
    fmt = fmt or source_format(path)
    if fmt not in TEXT_FORMATS:
        raise ValueError(f"{where}: format {fmt!r} unknown for {path}; choose from {', '.join(TEXT_FORMATS)}")
    if isinstance(column, bool) or not isinstance(column, (int, str)) or column == "" or (
            isinstance(column, int) and column < 0):
        raise ValueError(f"{where}: column={column!r} for {path}: expected a 0-based index, a header name or a JSON key")
    if not path.startswith(REGISTRY):
        base, sep, member = path.partition("!")
        path = str(Path(base).expanduser().absolute()) + sep + member
    return {"path": path, "format": fmt, "column": column, "header": bool(header)}


def make_sources(entries: Any, format: str | None = None, column: int | str = 0, header: bool = False,
                 where: str = "data.files") -> list[dict]:
    """A list of sources (:func:`make_source`); one entry alone is a list of one."""
    if entries is None:
        return []
    if isinstance(entries, (str, Mapping)):
        entries = [entries]
    return [make_source(e, format, column, header, f"{where}[{i}]") for i, e in enumerate(entries)]


def describe(source: dict) -> str:
    """How messages name a source: its path, or the hub dataset and split."""
    if "hub" in source:
        return f"{source['hub']}{'/' + source['config'] if source.get('config') else ''} split {source['split']}"
    return source["path"]


def local_file(ref: str, data_dir: str | os.PathLike = "data/cache",
               mirror_root: str | os.PathLike | None = None) -> tuple[Path, str | None]:
    """The local path of a file reference (a registry file fetched) and its zip member."""
    base, _, member = ref.partition("!")
    if base.startswith(REGISTRY):
        rel = base[len(REGISTRY):]
        if rel not in DATASETS:
            raise ValueError(f"{base}: the data registry has no such file (see transformer/data/core/sources.py)")
        return fetch(rel, data_dir, mirror_root), member or None
    path = Path(base)
    if not path.is_file():
        raise FileNotFoundError(f"{base}: no such file" if not path.is_dir() else f"{base}: a folder, not a file")
    return path, member or None


def probe(source: dict) -> None:
    """Check what can be checked before any work: a local file exists and, for a table, its
    first row has the column (a ``DataFormatError`` naming the file and line)."""
    if "hub" in source:
        return
    if source["path"].startswith(REGISTRY):  # fetched when read; the registry knows it or not
        base = source["path"].partition("!")[0][len(REGISTRY):]
        if base not in DATASETS:
            raise ValueError(f"{source['path']}: the data registry has no such file (see transformer/data/core/sources.py)")
        return
    path, _ = local_file(source["path"])
    if source["format"] in ("tsv", "csv", "jsonl"):
        first_row(path, [source["column"]], source["format"], source["header"])


def iter_source(source: dict, data_dir: str | os.PathLike = "data/cache",
                mirror_root: str | os.PathLike | None = None) -> Iterator[str]:
    """Every passage of one source, in file order, surrounding whitespace stripped (blank ones
    included: :class:`TextCorpus` skips them)."""
    if "hub" in source:
        hub = {"name": source["hub"], "config": source.get("config")}
        for _, (text,) in iter_hub_rows(hub, source["split"], [source["column"]]):
            yield text.strip()
        return
    path, member = local_file(source["path"], data_dir, mirror_root)
    fmt = source["format"]
    if fmt == "conllu":
        sentences = iter_conllu(path, missing_upos=True, member=member)
    elif fmt == "conll2000":
        sentences = iter_columns(path, WORD_POS_CHUNK, member=member)
    elif fmt == "text":
        for _, line in iter_lines(path, member):
            yield line.strip()
        return
    else:
        if member is not None:
            raise ValueError(f"{source['path']}: a {fmt} table is read from a file, not from a zip member")
        for _, (text,) in iter_rows(path, [source["column"]], fmt, source["header"]):
            yield text.strip()
        return
    for sentence in sentences:
        yield " ".join(sentence.words)


def source_fingerprint(source: dict) -> list[str]:
    """What identifies a source's passages in cache keys: its settings and its content (the
    registry's sha256, the local file's, or the hub dataset's fingerprint)."""
    settings = [repr(sorted(source.items()))]
    if "hub" in source:
        return settings + [hub_fingerprint({"name": source["hub"], "config": source.get("config")}, source["split"])]
    base, _, member = source["path"].partition("!")
    if base.startswith(REGISTRY):
        return settings + [DATASETS[base[len(REGISTRY):]].sha256, member]
    return settings + [sha256_file(base), member]


def held_out(text: str, fraction: float, seed: int) -> bool:
    """Whether a passage belongs to the held-out validation share: its seeded digest falls in
    the lowest ``fraction`` of the 64-bit range (every copy of a text goes the same way)."""
    return key_digest(text, seed) < fraction * 2**64


class TextCorpus:
    """The training and validation passages of a list of sources, as streams.

    Args:
        train: the training sources; valid: validation sources (None: a held-out share of the
            training passages, ``valid_fraction`` of them, seeded by ``valid_seed``).
    """

    def __init__(self, train: Sequence[dict], valid: Sequence[dict] | None = None, valid_fraction: float = 0.01,
                 valid_seed: int = 0, data_dir: str | os.PathLike = "data/cache",
                 mirror_root: str | os.PathLike | None = None):
        if not train:
            raise ValueError("data.files: required (the text to pretrain on: one or more files or hub splits)")
        if not valid and not 0 < valid_fraction < 1:
            raise ValueError(f"data.valid_fraction={valid_fraction!r}: expected a share between 0 and 1 (or give "
                             f"data.valid=<file>)")
        self.train, self.valid = list(train), list(valid or [])
        self.valid_fraction, self.valid_seed = float(valid_fraction), int(valid_seed)
        self.data_dir, self.mirror_root = data_dir, mirror_root

    def _passages(self, sources: Sequence[dict]) -> Iterator[str]:
        blank = 0
        for source in sources:
            for text in iter_source(source, self.data_dir, self.mirror_root):
                if text:
                    yield text
                else:
                    blank += 1
        if blank:
            log.info("%s: %d blank passage(s) skipped", ", ".join(describe(s) for s in sources), blank)

    def stream(self, split: str) -> Iterator[str]:
        """The passages of ``train`` or ``valid``, in source and file order."""
        if split not in ("train", "valid"):
            raise ValueError(f"split {split!r} unknown; text to pretrain on has train and valid")
        if split == "valid" and self.valid:
            return self._passages(self.valid)
        passages = self._passages(self.train)
        if self.valid:
            return passages
        keep = split == "valid"
        return (t for t in passages if held_out(t, self.valid_fraction, self.valid_seed) == keep)

    def fingerprint(self, split: str) -> list:
        """What identifies a split's passages in cache keys."""
        if split == "valid" and self.valid:
            return ["valid", *[source_fingerprint(s) for s in self.valid]]
        carve = [] if self.valid else [self.valid_fraction, self.valid_seed]
        return [split, *carve, *[source_fingerprint(s) for s in self.train]]


# ----------------------------------------------------------------------------- checking the config
# The checks of an unlabelled-text config (transformer.data.text.datamodule.TextDataModule),
# run by transformer.data.core.datamodule.check_data_config before any file is read: every
# source a format can read, its local file there, a table's first row holding the column, a hub
# dataset that can be loaded, and a held-out share when no validation source is given.


def check_text(d: dict, where: str, complete: bool = False) -> None:
    """An unlabelled-text config (:class:`~transformer.data.text.datamodule.TextDataModule`);
    ``complete``: a run's, which needs its training text."""
    settings = (d.get("format"), d.get("column", 0), bool(d.get("header", False)))
    train = make_sources(d.get("files"), *settings, f"{where}.files")
    if complete and not train:
        raise ValueError(f"{where}.files: required (the text to pretrain on: one or more files or hub splits, "
                         f"e.g. {where}.files=[corpus.txt])")
    valid = make_sources(d.get("valid"), *settings, f"{where}.valid")
    fraction = d.get("valid_fraction")
    if train and not valid and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                or not 0 < fraction < 1):
        raise ValueError(f"{where}.valid_fraction={fraction!r}: expected a share between 0 and 1 of the training "
                         f"passages to validate on (or give {where}.valid=<file>)")
    for key, sources in (("files", train), ("valid", valid)):
        for i, source in enumerate(sources):
            if "hub" in source:
                check_hub({"name": source["hub"], "config": source.get("config")}, f"{where}.{key}[{i}].hub")
                continue
            try:
                probe(source)
            except (FileNotFoundError, IsADirectoryError) as exc:
                raise type(exc)(f"{where}.{key}[{i}]: {exc}") from None


__all__ = ["TEXT_FORMATS", "TextCorpus", "check_text", "describe", "held_out", "iter_source", "local_file",
           "make_source", "make_sources", "probe", "source_fingerprint", "source_format"]
