"""One message, one line: control characters written as their escapes.

A file name, a config key, a checkpoint entry or a request path is text a user or a caller
chose. Shown raw in an ``error:`` line or a log line, a newline in it starts a line of the
caller's choosing (a forged log entry), and an escape sequence moves the terminal's cursor.
:func:`escape_controls` writes each such character as it is spelled in Python (``\\n``, ``\\x1b``,
``\\u2028``), so the message stays one line and shows what was sent. This module imports nothing
of the project, so every layer (the CLI's error lines, the server's access log) uses it.
"""

from __future__ import annotations

import re

# Characters a terminal acts on or a reader splits lines at: C0 and C1 controls, DEL, and the
# Unicode line and paragraph separators (``str.splitlines`` splits at both).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """``text`` with every control character written as its escape (``\\n``, ``\\t``, ``\\x00``,
    ``\\x1b``, ``\\u2028`` ...): it cannot move the terminal's cursor or colour it, and the
    message stays one line."""
    def escaped(match: re.Match) -> str:
        char = match.group()
        return _ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")

    return CONTROL.sub(escaped, text)


__all__ = ["CONTROL", "escape_controls"]
