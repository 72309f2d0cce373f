#!/usr/bin/env python3
"""Write Multi30k's English captions as pre-tokenized text (one sentence per line, words
separated by spaces, split the way UD English-GUM splits words): unlabelled English for
self-training a tagger.

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/multi30k_words.py \
        --split train --first 10000 --output runs/silver/m30k.words
    transformer-tag ckpt_path=[a.ckpt,b.ckpt,c.ckpt] input=runs/silver/m30k.words \
        format=conllu output=runs/silver/m30k.conllu      # silver tags from an ensemble
    transformer-train experiment=gum_upos_adv data.extra_train=[runs/silver/m30k.conllu]

Splitting (GUM 2.5's conventions, checked on its training split): punctuation is its own word;
the clitics ``n't 's 're 've 'll 'd 'm`` are split off (``don't`` -> ``do n't``, ``can't`` ->
``ca n't``); a possessive apostrophe after a plural (``dogs'``) is its own word; hyphenated
words (``T-shirt``), numbers with points or commas (``3.5``) and dotted abbreviations
(``U.S.``) stay whole.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from transformer.data.parallel.corpus import multi30k, read_pairs
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--split", default="train", help="Multi30k split (train, val, test_2016_flickr, ...)")
    p.add_argument("--first", type=int, default=None, help="only the first N captions")
    p.add_argument("--output", required=True, help="the words file to write")
    p.add_argument("--data-dir", default="data/cache")
    p.add_argument("--mirror-root", default=None)
    args = p.parse_args(argv)
    lines = write_caption_words(args.split, args.output, args.first, args.data_dir, args.mirror_root)
    print(f"{args.output}: {len(lines)} lines, {sum(len(line.split()) for line in lines)} words", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
