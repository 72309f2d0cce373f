"""Text and CoNLL-U lines in, tagged lines out: the formats of ``transformer-tag`` (docs/cli.md).

CoNLL-U word lines (integer ID) are tagged; comments, multi-word ranges (``3-4``) and empty
nodes (``5.1``) pass through; any other line that is not 10 tab-separated fields is an error
naming it. Text is one sentence a line, tokens split on runs of spaces and tabs.
"""

from __future__ import annotations

import re

from transformer.inference.tagger import split_tokens

INPUT_FORMATS = ("auto", "text", "conllu")
OUTPUT_FORMATS = ("auto", "conllu", "word_tag", "text")
# CoNLL-U column index of each tag set (0-based: ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC).
TAG_COLUMN = {"upos": 3, "xpos": 4, "chunk": 9}
_WORD_ID = re.compile(r"^[1-9][0-9]*$")
_OTHER_ID = re.compile(r"^([1-9][0-9]*-[1-9][0-9]*|[0-9]+\.[1-9][0-9]*)$")  # a range or an empty node


def parse_conllu(lines: list[str], name: str = "<input>") -> list[list[int]]:
    """The word lines (0-based indices into ``lines``) of each sentence block; a line with the
    wrong column count or an ID that is neither a word, a range nor an empty node is a
    ``ValueError`` naming ``name`` and the line."""
    blocks: list[list[int]] = []
    current: list[int] | None = None
    for i, line in enumerate(lines):
        if not line.strip():
            current = None
            continue
        if current is None:
            current = []
            blocks.append(current)
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise ValueError(f"{name}:{i + 1}: expected 10 tab-separated CoNLL-U columns, found {len(cols)}")
        if _WORD_ID.match(cols[0]):
            current.append(i)
        elif not _OTHER_ID.match(cols[0]):
            raise ValueError(f"{name}:{i + 1}: CoNLL-U ID {cols[0]!r} is not a word, range or empty node")
    return blocks


def looks_like_conllu(lines: list[str]) -> bool:
    """True when some line is 10 tab-separated fields with a CoNLL-U ID: a CoNLL-U file with one
    malformed line is still CoNLL-U, so its parser names that line."""
    return any(len(cols) == 10 and (_WORD_ID.match(cols[0]) or _OTHER_ID.match(cols[0]))
               for cols in (line.split("\t") for line in lines))


def _set_tags(cols: list[str], fields: dict[str, list[list[str]]], sent: int, word: int) -> list[str]:
    """``cols`` with this word's tag of every field set, and ``_`` in the part-of-speech column the
    model does not predict: a gold tag passed through would be scored as the model's."""
    cols = list(cols)
    for tagset in ("upos", "xpos"):
        if tagset not in fields:
            cols[TAG_COLUMN[tagset]] = "_"
    for tagset, tags in fields.items():
        tag, col = tags[sent][word], TAG_COLUMN[tagset]
        if tagset == "chunk":
            misc = [m for m in cols[col].split("|") if m and m != "_" and not m.startswith("Chunk=")]
            tag = "|".join(misc + [f"Chunk={tag}"])
        cols[col] = tag
    return cols


def tag_lines(tagger, lines: list[str], input_format: str = "auto", out_format: str = "auto",
              name: str = "<input>") -> list[str]:
    """``lines`` tagged by ``tagger`` (``tag_fields`` and ``tagset``, as a ``WordTagger`` has):
    one output line (or CoNLL-U block) per text line, CoNLL-U input written back line for line."""
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}")
    if out_format not in OUTPUT_FORMATS:
        raise ValueError(f"format must be one of {OUTPUT_FORMATS}, got {out_format!r}")
    if lines and lines[0].startswith("\ufeff"):  # a byte-order mark (Windows editors) is not text
        lines = [lines[0][1:], *lines[1:]]
    conllu = input_format == "conllu" or (input_format == "auto" and looks_like_conllu(lines))
    out_format = ("conllu" if conllu else "word_tag") if out_format == "auto" else out_format
    blocks = parse_conllu(lines, name) if conllu else None
    sentences = ([[lines[i].split("\t")[1] for i in block] for block in blocks] if conllu
                 else [split_tokens(line) for line in lines])
    fields = tagger.tag_fields(sentences)
    if out_format == "word_tag":
        return [" ".join(f"{w}_{t}" for w, t in zip(words, tags)) for words, tags in
                zip(sentences, fields[tagger.tagset])]
    if out_format == "text":
        return [" ".join(tags) for tags in fields[tagger.tagset]]
    if conllu:
        out = list(lines)
        for s, block in enumerate(blocks):
            for w, i in enumerate(block):
                out[i] = "\t".join(_set_tags(lines[i].split("\t"), fields, s, w))
        return out
    out = []
    for n, words in enumerate(sentences, 1):
        out += [f"# sent_id = {n}", f"# text = {' '.join(words)}"]
        out += ["\t".join(_set_tags([str(i), w] + ["_"] * 8, fields, n - 1, i - 1)) for i, w in enumerate(words, 1)]
        out.append("")
    return out
