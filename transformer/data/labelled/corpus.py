"""Labelled sentences from a user's files (one text and one label a row), read through
:func:`transformer.data.core.readers.iter_rows`: TSV or CSV (a column index, or a header name with
``header=True``) and JSON lines (a key). Every problem is a one-line
:class:`~transformer.data.core.readers.DataFormatError` naming the file and line.

A corpus without its own dev or test file is split by text (``holdout``, seeded; every copy
of a text in one split, :mod:`transformer.data.core.holdout`). The label set comes from the
training file alone (sorted); a dev or test row whose label the
training file never had is an error naming its file and line, since no model trained on that
file could ever predict it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from transformer.data.core.holdout import KeySplit, check_holdout
from transformer.data.core.readers import DataFormatError, check_column, first_row, infer_format, iter_rows, same_column


@dataclass
class LabelledFile:
    """A file's rows: ``texts[i]`` has label ``labels[i]`` and sits on line ``lines[i]``; a speech
    manifest with a speaker column gives ``speakers[i]`` too (else ``speakers`` is empty)."""

    path: Path
    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)


def read_labelled(path: str | os.PathLike, text_column: int | str = 0, label_column: int | str = 1,
                  file_format: str | None = None, header: bool = False) -> LabelledFile:
    """Every row's text and label (surrounding whitespace stripped), streamed from ``path``.

    ``file_format``: ``tsv``, ``csv`` or ``jsonl`` (None: from the extension). A row with an
    empty text or label, or a file without a single row, is a ``DataFormatError``.
    """
    path = Path(path)
    if file_format == "text":
        raise ValueError(f"{path}: labelled data needs two columns (tsv, csv or jsonl), not plain text")
    out = LabelledFile(path)
    for line, (text, label) in iter_rows(path, (text_column, label_column), file_format, header):
        text, label = text.strip(), label.strip()
        if not label:
            raise DataFormatError(path, line, f"empty label (column {label_column!r})")
        if not text:
            raise DataFormatError(path, line, f"empty text (column {text_column!r})")
        out.texts.append(text)
        out.labels.append(label)
        out.lines.append(line)
    if not out.texts:
        raise DataFormatError(path, 0, "no labelled rows")
    return out


def label_vocab(train: LabelledFile) -> list[str]:
    """The training file's labels, sorted; fewer than two is an error (nothing to learn)."""
    labels = sorted(set(train.labels))
    if len(labels) < 2:
        raise DataFormatError(train.path, 0, f"the training file has only the label(s) {labels}; "
                                             "a classifier needs at least two")
    return labels


def check_label_names(names: Sequence[str] | None, labels: Sequence[str] | None = None,
                      where: str = "data.label_names") -> list[str] | None:
    """``names`` as a list (None: none given), checked: non-empty, distinct strings and, when
    the training file's ``labels`` are known, one name per label; else a ``ValueError``
    naming ``where``."""
    if names is None:
        return None
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ValueError(f"{where}={names!r}: expected a list of names, one per label, e.g. [negative, positive]")
    names = list(names)
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}={names}: {name!r} is not a name (expected non-empty text)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{where}={names}: {repeated[0]!r} names two labels; each label needs its own name")
    if labels is not None and len(names) != len(labels):
        raise ValueError(f"{where}={names}: {len(names)} name(s) for the training file's {len(labels)} labels "
                         f"{list(labels)} (sorted); give one name per label, in that order")
    return names


def label_ids(data: LabelledFile, labels: Sequence[str]) -> list[int]:
    """Each row's label id in ``labels``; a label not there is a ``DataFormatError`` naming
    the row's file and line."""
    index = {label: i for i, label in enumerate(labels)}
    ids = []
    for label, line in zip(data.labels, data.lines):
        if label not in index:
            raise DataFormatError(data.path, line, f"label {label!r} is not one of the training file's "
                                                   f"labels {list(labels)}")
        ids.append(index[label])
    return ids


def carve(whole: LabelledFile, holdout: Mapping[str, float | int], seed: int = 0) -> dict[str, LabelledFile]:
    """``whole`` split by text into ``train`` and the held-out splits of ``holdout`` (a row
    count or a fraction each): seeded, every copy of a text in one split, rows in file order."""
    split_of = KeySplit(whole.texts, holdout, seed)
    parts = {name: LabelledFile(whole.path) for name in split_of.counts}
    for text, label, line in zip(whole.texts, whole.labels, whole.lines):
        part = parts[split_of(text)]
        part.texts.append(text)
        part.labels.append(label)
        part.lines.append(line)
    return parts


def split_path(settings: Mapping[str, Any], split: str) -> Path:
    """The file of a named split (as a data module's ``settings()`` recorded it; a held-out
    split's file is the training file), or ``split`` itself when it is a file."""
    paths = settings.get("paths", {})
    if split in paths:
        return Path(paths[split])
    if settings.get("input") == "patches" and split in ("dev", "test"):  # carved from the training folder
        return Path(paths["train"])
    if settings.get("input") == "patches" and Path(split).is_dir():  # an image folder
        return Path(split)
    if split in (settings.get("holdout") or {}):
        return Path(paths["train"])
    if Path(split).is_file():
        return Path(split)
    named = sorted({*paths, *(settings.get("holdout") or {})})
    raise ValueError(f"split={split!r}: not one of the checkpoint's splits {named} nor a file")


def read_split(settings: Mapping[str, Any], split: str) -> LabelledFile:
    """A split's rows as ``settings`` name them (``paths``, columns, ``holdout``): its own
    file, or carved from the training file when it is held out (then ``train`` is what is
    left), or any file given as ``split``."""
    path = split_path(settings, split)
    if settings.get("input", "text") == "patches":  # image folders: the texts are image paths
        from transformer.data.images.datamodule import split_rows
        from transformer.data.images.folder import read_folder

        rows = split_rows(settings)[split] if split in ("train", "dev", "test") else read_folder(path)
        return LabelledFile(path, [str(r.path) for r in rows], [r.label for r in rows], list(range(1, len(rows) + 1)))
    if settings.get("input", "text") == "frames":  # a speech manifest: the texts are audio paths
        from transformer.data.speech.manifest import read_manifest

        manifest = read_manifest(path)
        return LabelledFile(path, [str(r.path) for r in manifest], [r.text for r in manifest],
                            [int(r.where.rpartition(":")[2]) for r in manifest],
                            [r.speaker for r in manifest] if all(r.speaker for r in manifest) else [])
    rows = read_labelled(path, settings["text_column"], settings["label_column"], settings.get("file_format"),
                         settings.get("header", False))
    holdout = settings.get("holdout") or {}
    if holdout and (split in holdout or split == "train"):
        return carve(rows, holdout, settings.get("holdout_seed", 0))[split]
    return rows


# ----------------------------------------------------------------------------- checking the config
# The checks of a labelled-text config (transformer.data.labelled.datamodule.ClassificationDataModule),
# run by transformer.data.core.datamodule.check_data_config before any file is read: a text
# and a label column, each its own; one source per split and a validation split; each local
# file a table whose first row has both columns.


def check_labelled(d: dict, where: str, complete: bool = False) -> None:
    """A labelled-text config (:class:`~transformer.data.labelled.datamodule.ClassificationDataModule`);
    ``complete``: a run's, which needs its training file."""
    fmt = d.get("file_format")
    if fmt not in (None, "tsv", "csv", "jsonl"):
        raise ValueError(f"{where}.file_format={fmt!r}: expected tsv, csv, jsonl or null (from each file's "
                         "extension); labelled data needs two columns")
    text, label = d.get("text_column", 0), d.get("label_column", 1)
    check_column(f"{where}.text_column", text)
    check_column(f"{where}.label_column", label)
    if same_column(text, label):
        raise ValueError(f"{where}.text_column={text!r} and {where}.label_column={label!r}: one column for both; "
                         "the text and its label need a column each")
    files = {split: (split, d[split]) for split in ("train", "dev", "test") if d.get(split) is not None}
    if d.get("holdout") is not None:
        check_holdout(d["holdout"], files, where)
    if "train" not in files:
        if complete:
            raise ValueError(f"{where}.train: required (a labelled file: {where}.train=<file> {where}.dev=<file>, "
                             f"or carve dev from it with {where}.holdout={{dev: 0.1}})")
        return
    if "dev" not in files and "dev" not in (d.get("holdout") or {}):
        raise ValueError(f"{where}.dev: training needs a validation split; set {where}.dev=<file>, or carve it "
                         f"from the training file with {where}.holdout={{dev: 0.1}}")
    for split, (_, path) in files.items():
        if isinstance(path, str) and Path(path).is_file():
            if (fmt or infer_format(path)) == "text":
                raise ValueError(f"{where}.{split}={path}: read as plain text, one column; labelled data needs "
                                 f"two (a .tsv, .csv or .jsonl file, or set {where}.file_format)")
            first_row(path, (text, label), fmt, bool(d.get("header", False)))
    names = check_label_names(d.get("label_names"), where=f"{where}.label_names")
    train = files["train"][1]
    if names is not None and isinstance(train, str) and Path(train).is_file():
        # One name per label is known only from the training file's labels: read them now, before
        # any folder is made (a carved or cut training split is checked again on setup).
        labels = sorted(set(read_labelled(train, text, label, fmt, bool(d.get("header", False))).labels))
        check_label_names(names, labels, f"{where}.label_names")


__all__ = ["LabelledFile", "carve", "check_label_names", "check_labelled", "label_ids", "label_vocab", "read_labelled",
           "read_split", "split_path"]
