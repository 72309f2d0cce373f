"""Rows of a user's text files, streamed: plain lines, TSV, CSV and JSON lines.

Every reader of a user's data (parallel corpora, labelled sentences) goes through
:func:`iter_rows`, so every format problem is the same one-line
:class:`~transformer.data.readers.DataFormatError` naming the file and the 1-based line:
invalid UTF-8, a row with too few columns, a JSON line that does not parse or lacks a key.
Files are read line by line (``.gz`` decompressed on the fly), never whole, so memory does
not grow with the file.

Columns are chosen per format: for ``tsv``/``csv`` a 0-based index, or a header name when
``header=True``; for ``jsonl`` a key, dotted for nested objects (``translation.en`` in the
Hugging Face layout ``{"translation": {"en": ..., "zh": ...}}``); ``text`` has one column, 0.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import os
import zlib
from pathlib import Path
from typing import IO, Iterator, Sequence

from transformer.data.readers import DataFormatError

log = logging.getLogger(__name__)

FORMATS = ("text", "tsv", "csv", "jsonl")


def _report_blank(path: Path, blank: list[int]) -> None:
    """Empty lines of a table are no rows; they are counted, never skipped silently."""
    if blank:
        shown = ", ".join(map(str, blank[:10])) + (" ..." if len(blank) > 10 else "")
        log.warning("%s: %d empty line(s) skipped (line %s)", path, len(blank), shown)


def infer_format(path: str | os.PathLike) -> str:
    """The format a file's extension names (``.tsv``/``.txt`` with tabs are the caller's
    choice): ``.tsv`` → tsv, ``.csv`` → csv, ``.jsonl``/``.json`` → jsonl, else text."""
    name = Path(path).name.lower().removesuffix(".gz")
    for ext, fmt in ((".tsv", "tsv"), (".csv", "csv"), (".jsonl", "jsonl"), (".json", "jsonl")):
        if name.endswith(ext):
            return fmt
    return "text"


def _open_binary(path: Path) -> IO[bytes]:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a folder, not a file")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line, terminator (``\\n``, ``\\r\\n``) removed, UTF-8
    checked, a leading byte-order mark removed; streamed. An empty file is an error (line 0)."""
    path = Path(path)
    with _open_binary(path) as f:
        i = 0
        try:
            for i, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataFormatError(path, i, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
                if i == 1:  # a byte-order mark (Windows editors, Tatoeba's cmn.txt) is not text
                    line = line.removeprefix("\ufeff")
                yield i, line.rstrip("\n").removesuffix("\r")
        except (OSError, EOFError, zlib.error) as e:  # a corrupt or truncated .gz
            raise DataFormatError(path, i + 1, f"cannot be read ({e})") from None
        if i == 0:
            raise DataFormatError(path, 0, "empty file")


def _pick(values: Sequence[str], picks: Sequence[int], path: Path, line_no: int) -> tuple[str, ...]:
    need = max(picks) + 1
    if len(values) < need:
        raise DataFormatError(path, line_no, f"expected at least {need} columns, found {len(values)}")
    return tuple(values[j] for j in picks)


def check_column(key: str, value: object) -> None:
    """A column as a config gives it: a 0-based index, or a header name or (dotted) JSON key;
    anything else (a negative index, a number that is not whole, an empty name) is a
    ``ValueError`` naming ``key``. Python would read a negative index from the row's end."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "" or (
            isinstance(value, int) and value < 0):
        raise ValueError(f"{key}={value!r}: expected a 0-based column index (0, 1, ...), a header name or a JSON key")


def same_column(a: int | str, b: int | str) -> bool:
    """Whether two column settings read one column (``1`` and ``"1"`` are one index)."""
    def norm(c):
        return int(c) if isinstance(c, str) and c.isdigit() else c

    return norm(a) == norm(b)


def _column_indices(columns: Sequence[int | str], names: Sequence[str] | None, path: Path) -> list[int]:
    out = []
    for c in columns:
        if isinstance(c, int) and c < 0:
            raise ValueError(f"{path}: column {c}: a column index is 0-based and not negative")
        if isinstance(c, int) or (isinstance(c, str) and c.isdigit()):
            out.append(int(c))
        elif names is None:
            raise DataFormatError(path, 1, f"column {c!r} is a name, but the file is read without a header "
                                           "(give a 0-based index, or header=true)")
        elif c not in names:
            raise DataFormatError(path, 1, f"no column {c!r} in the header; it has {list(names)}")
        else:
            out.append(list(names).index(c))
    return out


def _json_value(row: dict, key: str, path: Path, line_no: int) -> str:
    value = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise DataFormatError(path, line_no, f"key {key!r} missing")
        value = value[part]
    if not isinstance(value, str):
        raise DataFormatError(path, line_no, f"key {key!r} holds {type(value).__name__}, not a string")
    return value


def _iter_jsonl(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, tuple[str, ...]]]:
    blank: list[int] = []
    for i, line in iter_lines(path):
        if not line.strip():
            blank.append(i)
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFormatError(path, i, f"not a JSON object ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise DataFormatError(path, i, f"not a JSON object ({type(row).__name__})")
        yield i, tuple(_json_value(row, str(c), path, i) for c in columns)
    _report_blank(path, blank)


def _iter_csv(path: Path, columns: Sequence[int | str], header: bool) -> Iterator[tuple[int, tuple[str, ...]]]:
    lines = iter_lines(path)
    reader = csv.reader((text for _, text in lines), strict=True)
    picks = None if header else _column_indices(columns, None, path)
    blank: list[int] = []
    try:
        for values in reader:
            if picks is None:
                picks = _column_indices(columns, values, path)
            elif values:
                yield reader.line_num, _pick(values, picks, path, reader.line_num)
            else:
                blank.append(reader.line_num)
    except csv.Error as e:
        raise DataFormatError(path, reader.line_num, f"not valid CSV ({e})") from None
    _report_blank(path, blank)


def _iter_split(path: Path, columns: Sequence[int | str], header: bool, sep: str | None) -> Iterator[tuple[int, tuple[str, ...]]]:
    picks = None if header else _column_indices(columns, None, path)
    blank: list[int] = []
    for i, line in iter_lines(path):
        if sep is not None and line == "":  # a blank row of a table (one at the end, often)
            blank.append(i)
            continue
        values = line.split(sep) if sep is not None else [line]
        if picks is None:
            picks = _column_indices(columns, values, path)
            continue
        yield i, _pick(values, picks, path, i)
    _report_blank(path, blank)


def iter_rows(
    path: str | os.PathLike,
    columns: Sequence[int | str] = (0,),
    fmt: str | None = None,
    header: bool = False,
) -> Iterator[tuple[int, tuple[str, ...]]]:
    """``(line number, (value per chosen column))`` for every row of a file, streamed.

    ``fmt`` is one of :data:`FORMATS` (None: from the extension, :func:`infer_format`).
    Text rows keep every line, empty ones included (line ``i`` of one file pairs with line
    ``i`` of another); TSV, CSV and JSON lines skip empty lines, counted in a warning naming
them. Extra columns are ignored.
    """
    path = Path(path)
    fmt = fmt or infer_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown file format {fmt!r}; choose from {FORMATS}")
    if fmt == "jsonl":
        return _iter_jsonl(path, [str(c) for c in columns])
    if fmt == "csv":
        return _iter_csv(path, columns, header)
    return _iter_split(path, columns, header, "\t" if fmt == "tsv" else None)


def first_row(path: str | os.PathLike, columns: Sequence[int | str] = (0,), fmt: str | None = None,
              header: bool = False) -> tuple[int, tuple[str, ...]] | None:
    """The first row of :func:`iter_rows` (None for a file of blank lines), the rest of the
    file left unread: a check before training that the columns exist, naming the file and
    line when they do not."""
    rows = iter_rows(path, columns, fmt, header)
    try:
        return next(rows, None)
    finally:
        rows.close()


__all__ = ["FORMATS", "check_column", "first_row", "infer_format", "iter_lines", "iter_rows", "same_column"]
