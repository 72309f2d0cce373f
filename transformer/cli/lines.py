"""Text in and out of the line-oriented commands (decode, tag, classify): lines counted as
``wc -l`` counts them, so output line i always answers input line i."""

from __future__ import annotations

import sys
from pathlib import Path

from transformer.cli.validate import input_file
from transformer.files import write_text


def read_lines(path: str) -> tuple[list[str], str]:
    """The lines of ``path`` (``-`` = stdin), split on ``\\n`` only as ``wc -l`` counts them, and a name for
    messages."""
    if path == "-":
        raw, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        input_file("input", str(path))  # a regular file, /dev/stdin or a named pipe
        raw, name = Path(path).read_bytes(), str(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{name}, line {line}: not UTF-8 text (byte {exc.start})") from None
    return split_lines(text.removeprefix("\ufeff")), name  # a byte-order mark is not text


def split_lines(text: str) -> list[str]:
    """Lines as ``wc -l`` counts them: split on ``\n`` only (a trailing ``\r`` is removed);
    a final line without ``\n`` still counts."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def write_lines(lines: list[str], output: str) -> None:
    """One item per line to a file, or to stdout for ``-`` (UTF-8, newline-terminated)."""
    text = "".join(line + "\n" for line in lines)
    if output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text(output, text)
