"""Raw English split into words the way UD English-GUM splits them, and Multi30k's English
captions written as such words: unlabelled text for self-training a tagger.

Splitting (GUM 2.5's conventions, checked on its training split): punctuation is its own word;
the clitics ``n't 's 're 've 'll 'd 'm`` are split off (``don't`` -> ``do n't``, ``can't`` ->
``ca n't``); a possessive apostrophe after a plural (``dogs'``) is its own word; hyphenated
words (``T-shirt``), numbers with points or commas (``3.5``) and dotted abbreviations
(``U.S.``) stay whole.
"""

from __future__ import annotations

import re
from pathlib import Path

from transformer.data.corpora import multi30k, read_pairs
from transformer.files import write_text

# A word: letters/digits joined by -, ', ., & or , between word characters (T-shirt, 3.5,
# 1,000, AT&T, don't); a dotted abbreviation with its final point (U.S.); else one
# non-space character (punctuation).
_WORD = re.compile(r"(?:[A-Za-z]\.){2,}|\w+(?:[-'’.&,]\w+)*|\S")
_CLITIC = re.compile(r"^(.+?)(n['’]t|['’](?:s|re|ve|ll|d|m))$", re.IGNORECASE)


def split_words(text: str) -> list[str]:
    """GUM-style words of one line of raw English text."""
    words: list[str] = []
    for token in _WORD.findall(text):
        m = _CLITIC.match(token)
        if m and m.group(1) and m.group(1)[-1].isalnum():
            words += [m.group(1), m.group(2)]
        else:
            words.append(token)
    return words


def write_caption_words(split: str, output: str | Path, first: int | None = None,
                        data_dir: str = "data/cache", mirror_root: str | None = None) -> list[str]:
    """Write the English captions of a Multi30k split (the ``first`` ones, if given) one per
    line as space-separated words; a blank caption gives a blank line, so line ``n`` is caption
    ``n``. Returns the lines written."""
    pairs = read_pairs(multi30k("en", "de"), split, data_dir, mirror_root)
    lines = [" ".join(split_words(en)) for en, _ in pairs[:first]]
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, "".join(line + "\n" for line in lines))
    return lines
