"""A user's speech data: a TSV manifest of ``audio path<TAB>transcript`` (or label) rows.

This is the form LibriSpeech and Common Voice users already have (and what fairseq's and
ESPnet's recipes write): one row per utterance, the audio path relative to the manifest's folder
(absolute paths are kept as they are), the text after one tab. A first row whose path column
reads ``path``, ``audio``, ``audio_path``, ``file``, ``filename`` or ``wav`` (and names no
existing file) is a header and skipped; ``header=True/False`` says so explicitly.

An optional third column names the row's speaker (``audio path<TAB>text<TAB>speaker``, Kaldi's
``utt2spk`` in the same file): per-speaker feature normalisation (``data.normalize=speaker``)
groups the recordings by it. Every row of a manifest has the same number of columns.

Every problem is one :class:`~transformer.data.core.readers.DataFormatError` line naming the
manifest and the 1-based row: an empty row, a wrong column count, an empty text or speaker, a
missing audio file. Audio errors found later name the row too: each row carries ``where``
(``train.tsv:12``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, NamedTuple

from transformer.data.core.readers import DataFormatError
from transformer.files import write_text

HEADER_NAMES = frozenset({"path", "audio", "audio_path", "file", "filename", "wav"})


class SpeechRow(NamedTuple):
    """One utterance: the audio file, its transcript or label, the manifest row it came from
    (``train.tsv:12``, for error messages; empty for rows made in code), and its speaker (empty
    when the manifest has no speaker column)."""

    path: Path
    text: str
    where: str = ""
    speaker: str = ""


def _is_header(fields: list[str], folder: Path, header: bool | None) -> bool:
    if header is not None:
        return header
    return fields[0].strip().lower() in HEADER_NAMES and not (folder / fields[0]).is_file()


def read_manifest(path: str | os.PathLike, header: bool | None = None) -> list[SpeechRow]:
    """Read a speech manifest: ``audio path<TAB>text`` (or ``audio path<TAB>text<TAB>speaker``) per row.

    Args:
        path: the TSV file (UTF-8).
        header: whether the first row names the columns; ``None`` detects it.

    Returns:
        One :class:`SpeechRow` per utterance, in file order, with absolute audio paths.

    Raises:
        DataFormatError: ``manifest:row: problem`` for an unreadable file, an empty row, a row
            without exactly two tab-separated columns, an empty text, or a missing audio file.
    """
    path = Path(path)
    folder = Path(os.path.abspath(path)).parent
    try:
        raw_lines = path.read_bytes().splitlines()
    except OSError as e:
        raise DataFormatError(path, 0, f"cannot read the manifest ({e.strerror or e})") from None
    while raw_lines and not raw_lines[-1].strip():  # blank lines an editor leaves at the end
        raw_lines.pop()
    rows, n_columns = [], None
    for row_no, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DataFormatError(path, row_no, "not UTF-8 text") from None
        if not line.strip():
            raise DataFormatError(path, row_no, "empty row (expected: audio path<TAB>transcript)")
        fields = line.split("\t")
        if len(fields) not in (2, 3) or len(fields) != (n_columns or len(fields)):
            expected = {2: "2 (audio path<TAB>transcript)", 3: "3 (audio path<TAB>transcript<TAB>speaker)"}
            raise DataFormatError(path, row_no, f"{len(fields)} tab-separated columns, expected "
                                                f"{expected.get(n_columns, '2 or 3 (audio path<TAB>transcript[<TAB>speaker])')}"
                                                + (" as in the first row" if n_columns else ""))
        n_columns = len(fields)
        if row_no == 1 and _is_header(fields, folder, header):
            continue
        audio, text = fields[0].strip(), fields[1].strip()
        speaker = fields[2].strip() if len(fields) == 3 else ""
        if not audio:
            raise DataFormatError(path, row_no, "empty audio path")
        if not text:
            raise DataFormatError(path, row_no, f"{audio}: empty transcript")
        if len(fields) == 3 and not speaker:
            raise DataFormatError(path, row_no, f"{audio}: empty speaker (the third column)")
        audio_path = Path(os.path.normpath(folder / audio))  # an absolute path replaces the folder
        if not audio_path.is_file():
            raise DataFormatError(path, row_no, f"{audio}: no such audio file ({audio_path})")
        rows.append(SpeechRow(audio_path, text, f"{path}:{row_no}", speaker))
    if not rows:
        raise DataFormatError(path, len(raw_lines), "no utterances in the manifest")
    return rows


def write_manifest(path: str | os.PathLike, rows: Iterable[tuple[str | os.PathLike, str] | tuple[str | os.PathLike, str, str]]) -> Path:
    """Write ``(audio path, text)`` or ``(audio path, text, speaker)`` rows (the same kind
    throughout) as a manifest :func:`read_manifest` reads back, audio paths relative to the
    manifest's folder where they can be; written atomically (whole or not at all). Returns ``path``."""
    path = Path(path)
    folder = Path(os.path.abspath(path)).parent
    lines, width = [], None
    for audio, text, *speaker in rows:
        if width is not None and len(speaker) != width:
            raise ValueError(f"{path}: rows with and without a speaker cannot share a manifest")
        width = len(speaker)
        audio = os.path.abspath(audio)
        try:
            shown = os.path.relpath(audio, folder)
        except ValueError:  # another drive (Windows): no relative path exists
            shown = str(audio)
        for field in (shown, text, *speaker):
            if "\t" in field or "\n" in field or "\r" in field:
                raise ValueError(f"{path}: a tab or line break in {field!r} cannot go into a TSV manifest")
        lines.append("\t".join((shown, text, *speaker)) + "\n")
    return write_text(path, "".join(lines))
