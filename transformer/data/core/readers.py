"""How a data file is read: one reader per format, shared by every kind of data.

- lines of text: :func:`iter_lines`, under every reader of a file below;
- plain-text pairs, one file per side, line ``i`` of each a pair: :func:`iter_line_pairs`
  (parallel text; Multi30k);
- TSV, CSV and JSON lines, columns chosen: :func:`iter_rows` (parallel text in one file,
  labelled text; SST-2);
- CoNLL-U: :func:`read_conllu` (tagged text; UD treebanks, GUM), streamed by :func:`iter_conllu`
  (also the words alone, as text to pretrain on);
- word-per-line columns, a blank line between sentences: :func:`read_columns` (tagged text;
  CoNLL-2000's ``WORD POS CHUNK`` layout), streamed by :func:`iter_columns`;
- a Hugging Face dataset, by hub name or a local folder: :func:`iter_hub_rows` (parallel text).

The built-in datasets are presets that name files and columns for these readers
(:mod:`transformer.data.parallel.corpus`, :mod:`transformer.data.tagged.corpus`); none has a reader of
its own. A file is read line by line, never whole (``.gz`` decompressed on the fly, a zip
``member`` read from its zip), so memory does not grow with the file. A line keeps its text
exactly (only the terminator and a leading byte-order mark are removed), so references stay
what upstream published.

Every format problem is one :class:`DataFormatError` naming the file and the 1-based line (0
when it concerns the whole file, e.g. an empty one): invalid UTF-8, a row with too few
columns, a JSON line that does not parse or lacks a key, a CoNLL-U word out of sequence.

Columns of a table are chosen per format: for ``tsv``/``csv`` a 0-based index, or a header
name when ``header=True``; for ``jsonl`` and the hub a key, dotted for nested objects
(``translation.en`` in the Hugging Face layout ``{"translation": {"en": ..., "zh": ...}}``);
``text`` has one column, 0.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Sequence

log = logging.getLogger(__name__)

Row = tuple[int, tuple[str, ...]]  # (line or row number, the value of each chosen column)


class DataFormatError(ValueError):
    """A data file does not have the expected format: ``path:line_no: msg``."""

    def __init__(self, path: str | os.PathLike, line_no: int, msg: str):
        super().__init__(f"{path}:{line_no}: {msg}")
        self.path, self.line_no, self.msg = str(path), line_no, msg


@dataclass
class TaggedSentence:
    """One tagged sentence. ``upos`` is None for files without UD tags (CoNLL-2000's layout);
    ``xpos`` holds the language-specific tag (Penn Treebank for both English presets, ``"_"``
    where a CoNLL-U file gives none); ``chunk`` only for files with a chunk column."""

    sent_id: str
    words: list[str]
    upos: list[str] | None
    xpos: list[str]
    chunk: list[str] | None = None

    def tags(self, field: str) -> list[str] | None:
        """The tags of one annotation, named by its field (``tagged.corpus.tag_field``: ``upos``,
        ``xpos`` or ``chunk``); a ``KeyError`` for any other name."""
        return {"upos": self.upos, "xpos": self.xpos, "chunk": self.chunk}[field]


# ---------------------------------------------------------------------------- lines


def _where(path: Path, member: str | None) -> str | Path:
    """How messages name a file: its path, or ``<zip>!<member>``."""
    return f"{path}!{member}" if member is not None else path


def _open_binary(path: Path, member: str | None) -> IO[bytes]:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a folder, not a file")
    if member is not None:
        with zipfile.ZipFile(path) as z:  # the member stays readable after the zip is closed
            if member not in z.namelist():
                raise DataFormatError(_where(path, member), 0, f"no member {member!r} in the zip file")
            return z.open(member)
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_lines(path: str | os.PathLike, member: str | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line of a file (or of the zip ``member`` of ``path``),
    terminator (``\\n``, ``\\r\\n``) removed, UTF-8 checked, a leading byte-order mark removed;
    streamed. An empty file is an error (line 0)."""
    path = Path(path)
    where = _where(path, member)
    with _open_binary(path, member) as f:
        i = 0
        try:
            for i, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataFormatError(where, i, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
                if i == 1:  # a byte-order mark (Windows editors, Tatoeba's cmn.txt) is not text
                    line = line.removeprefix("\ufeff")
                yield i, line.rstrip("\n").removesuffix("\r")
        except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as e:  # a corrupt or truncated .gz or zip
            raise DataFormatError(where, i + 1, f"cannot be read ({e})") from None
        if i == 0:
            raise DataFormatError(where, 0, "empty file")


def iter_line_pairs(src: str | os.PathLike, tgt: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """Plain-text pairs: line ``i`` of ``src`` with line ``i`` of ``tgt``, streamed, empty lines
    kept; files of different lengths are an error naming the longer file at its first line
    without a partner."""
    src_lines, tgt_lines = iter_lines(src), iter_lines(tgt)
    n = 0
    for n, (_, s) in enumerate(src_lines, 1):
        t = next(tgt_lines, None)
        if t is None:
            raise DataFormatError(src, n, f"parallel files differ in length: {tgt} ends at line {n - 1}")
        yield s, t[1]
    extra = next(tgt_lines, None)
    if extra is not None:
        raise DataFormatError(tgt, extra[0], f"parallel files differ in length: {src} ends at line {n}")


# ---------------------------------------------------------------------------- tables

FORMATS = ("text", "tsv", "csv", "jsonl")


def infer_format(path: str | os.PathLike) -> str:
    """The format a file's extension names (``.tsv``/``.txt`` with tabs are the caller's
    choice): ``.tsv`` → tsv, ``.csv`` → csv, ``.jsonl``/``.json`` → jsonl, else text."""
    name = Path(path).name.lower().removesuffix(".gz")
    for ext, fmt in ((".tsv", "tsv"), (".csv", "csv"), (".jsonl", "jsonl"), (".json", "jsonl")):
        if name.endswith(ext):
            return fmt
    return "text"


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


def _report_blank(path: Path, blank: list[int]) -> None:
    """Empty lines of a table are no rows; they are counted, never skipped silently."""
    if blank:
        shown = ", ".join(map(str, blank[:10])) + (" ..." if len(blank) > 10 else "")
        log.warning("%s: %d empty line(s) skipped (line %s)", path, len(blank), shown)


def _pick(values: Sequence[str], picks: Sequence[int], path: Path, line_no: int) -> tuple[str, ...]:
    need = max(picks) + 1
    if len(values) < need:
        raise DataFormatError(path, line_no, f"expected at least {need} columns, found {len(values)}")
    return tuple(values[j] for j in picks)


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


def _dotted(row: Any, key: str) -> Any:
    """``row[a][b]`` for the key ``a.b``; a ``KeyError`` when a part is missing."""
    for part in key.split("."):
        if not isinstance(row, dict) or part not in row:
            raise KeyError(key)
        row = row[part]
    return row


def _text_at(row: dict, key: str, error: Callable[[str], Exception], missing: str, holds: str) -> str:
    """The text at the dotted ``key`` of a JSON or hub row; else ``error`` of the message ``missing``
    or ``holds`` (formatted with ``key`` and the value's ``type``) names what is wrong."""
    try:
        value = _dotted(row, key)
    except KeyError:
        raise error(missing.format(key=key)) from None
    if not isinstance(value, str):
        raise error(holds.format(key=key, type=type(value).__name__))
    return value


def _iter_jsonl(path: Path, columns: Sequence[str]) -> Iterator[Row]:
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
        yield i, tuple(_text_at(row, str(c), lambda m: DataFormatError(path, i, m), "key {key!r} missing",
                                "key {key!r} holds {type}, not a string") for c in columns)
    _report_blank(path, blank)


def _iter_csv(path: Path, columns: Sequence[int | str], header: bool) -> Iterator[Row]:
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


def _iter_split(path: Path, columns: Sequence[int | str], header: bool, sep: str | None) -> Iterator[Row]:
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


def iter_rows(path: str | os.PathLike, columns: Sequence[int | str] = (0,), fmt: str | None = None,
              header: bool = False) -> Iterator[Row]:
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
              header: bool = False) -> Row | None:
    """The first row of :func:`iter_rows` (None for a file of blank lines), the rest of the
    file left unread: a check before training that the columns exist, naming the file and
    line when they do not."""
    rows = iter_rows(path, columns, fmt, header)
    try:
        return next(rows, None)
    finally:
        rows.close()


# ---------------------------------------------------------------------------- CoNLL-U

_CONLLU_COLUMNS = 10


class _Sentence:
    """The sentence being read: its words, tag columns, ``# sent_id`` and first line."""

    def __init__(self, fields: Sequence[str]):
        self.columns: dict[str, list[str]] = {f: [] for f in fields}
        self.sent_id: str | None = None
        self.start = 0

    def done(self, name: str) -> TaggedSentence:
        c = self.columns
        return TaggedSentence(self.sent_id if self.sent_id is not None else f"{name}:{self.start}", c["words"],
                              c.get("upos"), c.get("xpos"), c.get("chunk"))


def _conllu_word(cols: list[str], sent: _Sentence, where, i: int, missing_upos: bool) -> None:
    """Check one word line and add it to ``sent`` (multi-word tokens and empty nodes are skipped)."""
    tok_id, form, _lemma, u, x = cols[:5]
    if "-" in tok_id or "." in tok_id:  # multi-word token range / empty node: not a tagged word
        return
    for name, value in (("ID", tok_id), ("FORM", form), ("UPOS", u), ("XPOS", x)):
        if value == "":
            raise DataFormatError(where, i, f"missing {name} field")
    if not tok_id.isdigit():
        raise DataFormatError(where, i, f"ID {tok_id!r} is not an integer")
    words = sent.columns["words"]
    if int(tok_id) != len(words) + 1:
        raise DataFormatError(where, i, f"word ID {tok_id} out of sequence (expected {len(words) + 1})")
    if u == "_" and not missing_upos:
        raise DataFormatError(where, i, "missing UPOS tag ('_')")
    words.append(form)
    sent.columns["upos"].append(u)
    sent.columns["xpos"].append(x)


def iter_conllu(path: str | os.PathLike, missing_upos: bool = False, member: str | None = None) -> Iterator[TaggedSentence]:
    """Sentences of a CoNLL-U file (or zip ``member``) with words, UPOS and XPOS, streamed;
    ``# sent_id`` kept.

    Multi-word token lines (``3-4``) and empty nodes (``5.1``) are skipped: taggers
    label syntactic words. A sentence without ``# sent_id`` is named ``file:line``.
    A UPOS of ``_`` is an error naming the line, unless ``missing_upos`` (extra training
    files, whose words may carry XPOS only, or text read for its words alone): then it is kept
    as ``"_"``. A file without a sentence is an error once it has been read.
    """
    where = _where(Path(path), member)
    name, fields = Path(where).name, ("words", "upos", "xpos")
    n = 0
    sent = _Sentence(fields)
    for i, line in iter_lines(path, member):
        if not line.strip():
            if sent.columns["words"]:
                n += 1
                yield sent.done(name)
            elif sent.sent_id is not None:
                raise DataFormatError(where, sent.start, f"sentence {sent.sent_id!r} has no words")
            sent = _Sentence(fields)
            continue
        if not sent.columns["words"] and sent.sent_id is None:
            sent.start = i
        if line.startswith("#"):
            key, sep, value = line[1:].partition("=")
            if sep and key.strip() == "sent_id":
                sent.sent_id = value.strip()
            continue
        cols = line.split("\t")
        if len(cols) != _CONLLU_COLUMNS:
            raise DataFormatError(where, i, f"expected {_CONLLU_COLUMNS} tab-separated columns, found {len(cols)}")
        _conllu_word(cols, sent, where, i, missing_upos)
    if sent.columns["words"]:
        n += 1
        yield sent.done(name)
    elif sent.sent_id is not None:
        raise DataFormatError(where, sent.start, f"sentence {sent.sent_id!r} has no words")
    if not n:
        raise DataFormatError(where, 0, "no sentences found")


def read_conllu(path: str | os.PathLike, missing_upos: bool = False, member: str | None = None) -> list[TaggedSentence]:
    """Every sentence of :func:`iter_conllu` as a list."""
    return list(iter_conllu(path, missing_upos, member))


# ---------------------------------------------------------------------------- word-per-line columns

#: CoNLL-2000's column layout: a word, its part-of-speech tag, its chunk tag.
WORD_POS_CHUNK = ("WORD", "POS", "CHUNK")
# The TaggedSentence field each column of a layout fills (POS is the corpus's own tag set).
_COLUMN_FIELDS = {"WORD": "words", "POS": "xpos", "XPOS": "xpos", "UPOS": "upos", "CHUNK": "chunk"}


def iter_columns(path: str | os.PathLike, layout: Sequence[str] = WORD_POS_CHUNK,
                 member: str | None = None) -> Iterator[TaggedSentence]:
    """Sentences of a word-per-line column file (or zip ``member``), streamed: one word a line
    with its tags, separated by single spaces in the order ``layout`` names them (CoNLL-2000's
    ``WORD POS CHUNK`` unless told), a blank line between sentences. A field the layout does
    not have is None; a sentence is named ``file:line`` of its first word."""
    where = _where(Path(path), member)
    name, fields = Path(where).name, [_COLUMN_FIELDS[column] for column in layout]
    n = 0
    sent = _Sentence(fields)
    for i, line in iter_lines(path, member):
        if not line.strip():
            if sent.columns["words"]:
                n += 1
                yield sent.done(name)
                sent = _Sentence(fields)
            continue
        values = line.split(" ")
        if len(values) != len(fields) or not all(values):
            raise DataFormatError(where, i, f"expected '{' '.join(layout)}' ({len(fields)} space-separated fields), "
                                            f"found {line!r}")
        if not sent.columns["words"]:
            sent.start = i
        for field, value in zip(fields, values):
            sent.columns[field].append(value)
    if sent.columns["words"]:
        n += 1
        yield sent.done(name)
    if not n:
        raise DataFormatError(where, 0, "no sentences found")


def read_columns(path: str | os.PathLike, layout: Sequence[str] = WORD_POS_CHUNK,
                 member: str | None = None) -> list[TaggedSentence]:
    """Every sentence of :func:`iter_columns` as a list."""
    return list(iter_columns(path, layout, member))


# ---------------------------------------------------------------------------- the hub

_HUB_BATCH = 1000


def saved_dataset(folder: Path) -> bool:
    """Whether ``folder`` was written by ``Dataset(Dict).save_to_disk``."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
# Files `datasets.load_dataset` reads from a plain folder (its packaged builders), compressed or not.
DATA_FILE_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv", ".tsv", ".txt")


def _has_data_files(folder: Path) -> bool:
    """Whether ``folder`` holds a file ``load_dataset`` can read (the first one found ends the
    walk); like ``datasets``, hidden files and folders (``.x``, ``__x``) do not count."""
    for path in folder.rglob("*"):
        if any(part.startswith((".", "__")) for part in path.relative_to(folder).parts):
            continue
        name = path.name.lower()
        for packed in (".gz", ".zst", ".bz2", ".xz", ".zip"):
            name = name.removesuffix(packed)
        if name.endswith(DATA_FILE_SUFFIXES) and path.is_file():
            return True
    return False


def offline() -> list[str]:
    """The variables that switch the hub off (``HF_HUB_OFFLINE=1`` ...), as set now."""
    return [v for v in OFFLINE_VARIABLES if os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")]


def _cached(name: str) -> bool:
    """Whether a hub dataset has a copy in the local caches (what ``datasets`` reads offline)."""
    import datasets.config
    from huggingface_hub import constants

    return ((Path(datasets.config.HF_DATASETS_CACHE) / name.replace("/", "___")).is_dir()
            or (Path(constants.HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}").is_dir())


def check_hub(hub: Any, where: str = "data.hub") -> None:
    """What can be known of a hub source without loading it, as a ``ValueError`` naming
    ``where``: a dataset name is given; a local folder is a dataset (written by
    ``save_to_disk``, or holding data files); and offline (:func:`offline`), a name that is no
    folder has a cached copy. Without that last check ``datasets`` retries the network before
    it fails, with a traceback."""
    if not isinstance(hub, dict):
        raise ValueError(f"{where}={hub!r}: expected {{name: <dataset>, config: <config or null>}}")
    name, config = hub.get("name"), hub.get("config")
    if not isinstance(name, str) or name in ("", "???"):
        raise ValueError(f"{where}.name: required (a Hugging Face dataset, e.g. {where}.name=wmt16, "
                         "or a local folder)")
    if config is not None and not isinstance(config, str):
        raise ValueError(f"{where}.config={config!r}: expected a config name (e.g. ro-en) or null")
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not saved_dataset(folder) and not _has_data_files(folder):
            raise ValueError(f"{where}.name={name}: a folder, but not a dataset: no dataset_dict.json or "
                             f"state.json (save_to_disk) and no data files ({', '.join(DATA_FILE_SUFFIXES)})")
        return
    switched_off = offline()
    if switched_off and not _cached(name):
        setting = " ".join(f"{v}={os.environ[v]}" for v in switched_off)
        raise ValueError(f"{where}.name={name}: not a local folder, and {setting} keeps the hub offline with no "
                         f"cached copy of it: give a folder written by save_to_disk, or unset "
                         f"{' and '.join(switched_off)} to download it")


def load_hub(hub: dict, split: str):
    """One split of a hub dataset (``{"name", "config"}``) as a ``datasets.Dataset``: a folder
    written by ``save_to_disk`` through ``load_from_disk``, anything else (a hub name, a local
    folder of parquet/JSON files) through ``load_dataset``, which caches the Arrow table and
    memory-maps it. A dataset that cannot be loaded is one ``ValueError`` naming ``data.hub``."""
    import datasets

    name, config = str(hub["name"]), hub.get("config")
    folder = Path(name)
    try:
        if not (folder.is_dir() and saved_dataset(folder)):
            return datasets.load_dataset(name, config, split=split)
        ds = datasets.load_from_disk(str(folder))
    except ValueError as e:  # an unknown split: datasets names the ones there are
        raise ValueError(f"dataset {name}{'/' + config if config else ''}: {e}") from None
    except (OSError, datasets.exceptions.DatasetsError) as e:  # unreachable, unknown, or not a dataset
        cause = e.__cause__ if isinstance(e, datasets.exceptions.DatasetGenerationError) and e.__cause__ else e
        raise ValueError(f"data.hub.name={name}: cannot load it ({type(cause).__name__}: {cause})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"{name}: no split {split!r}; it has {list(ds)}")
        ds = ds[split]
    return ds


def iter_hub_rows(hub: dict, split: str, columns: Sequence[int | str]) -> Iterator[Row]:
    """``(row number, (value per chosen column))`` of one split of a hub dataset
    (:func:`load_hub`), in dataset order, read from the memory-mapped table a batch at a time;
    columns are dotted keys, as for JSON lines."""
    ds = load_hub(hub, split)
    keys = [str(c) for c in columns]
    where = f"{hub['name']} split {split}"
    tops = list(dict.fromkeys(k.split(".")[0] for k in keys))
    missing = [c for c in tops if c not in ds.column_names]
    if missing:
        raise ValueError(f"{where}: no column {missing[0]!r}; it has {ds.column_names} (set data.columns)")
    i = 0
    for batch in ds.select_columns(tops).iter(batch_size=_HUB_BATCH):
        for values in zip(*batch.values()):
            row = dict(zip(batch, values))
            i += 1
            yield i, tuple(_text_at(row, k, lambda m: ValueError(f"{where}, row {i}: {m}"),
                                    "no column {key!r} (set data.columns)", "column {key!r} holds {type}, not text")
                           for k in keys)


def hub_fingerprint(hub: dict, split: str) -> str:
    """The ``datasets`` fingerprint of a split (changes when its data does)."""
    return str(load_hub(hub, split)._fingerprint)


__all__ = ["FORMATS", "WORD_POS_CHUNK", "DataFormatError", "TaggedSentence", "check_column", "check_hub", "first_row",
           "hub_fingerprint", "infer_format", "iter_columns", "iter_conllu", "iter_hub_rows", "iter_line_pairs",
           "iter_lines", "iter_rows", "load_hub", "offline", "read_columns", "read_conllu", "same_column",
           "saved_dataset"]
