"""`transformer-tag`: part-of-speech tag pre-tokenized text or CoNLL-U with a tagging
checkpoint (model, tokenizer and tag set all come from the checkpoint).

    echo "The cat sat ." | transformer-tag ckpt_path=best.ckpt                 # -> The_DET cat_NOUN ...
    transformer-tag ckpt_path=best.ckpt input=in.conllu output=out.conllu      # CoNLL-U in and out
    transformer-tag ckpt_path=best.ckpt input=words.txt format=conllu          # text in, CoNLL-U out
    transformer-tag ckpt_path=[a.ckpt,b.ckpt,c.ckpt] input=words.txt            # an ensemble

Several checkpoints of the same tag inventory tag as an ensemble: each word gets the tag with
the highest mean probability over the models (``TaggingTask.ensemble``). The tagging itself is
``TaggingTask.tagger()`` (:class:`~transformer.inference.tagger.WordTagger`); this module reads
and writes the formats.

Input (``input_format``: ``auto`` | ``text`` | ``conllu``; ``auto`` reads CoNLL-U when
any line has 10 tab-separated fields with a CoNLL-U ID, text otherwise; lines are split
on ``\n`` only):

* text: one sentence per line, tokens separated by runs of spaces **and tabs** (a tab is a
  token separator, never part of a token; use CoNLL-U for tokens containing spaces).
  An empty line, or one with only spaces/tabs, is an empty sentence.
* CoNLL-U: word lines (integer ID) are tagged; comment lines, multi-word token ranges
  (``3-4``) and empty nodes (``5.1``) pass through unchanged. A line that is neither
  blank, comment nor 10 tab-separated fields is an error naming the line (nothing is
  dropped silently).

Output (``format``: ``auto`` | ``conllu`` | ``word_tag`` | ``text``; ``auto`` = ``conllu``
for CoNLL-U input, ``word_tag`` for text input):

* ``conllu``: from CoNLL-U input, every input line is written back in place (same line
  count) with the UPOS (column 4) or XPOS (column 5) field replaced, depending on the
  checkpoint's tag set (chunk tags go to MISC as ``Chunk=...``); a checkpoint trained with
  an auxiliary tag set (``data.aux_tagset``) fills that column too. The part-of-speech column
  the model does not predict is written ``_`` (the input's tags there are not the model's);
  every other column is kept. From text input, one block per input line (``# sent_id = <line number>``,
  ``# text = ...``, word lines, blank line); an empty input line gives a block with the
  two comments only, so the block count equals the input line count.
* ``word_tag``: one line per sentence, ``word_TAG`` items separated by one space (split
  an item on its last ``_``); an empty sentence gives an empty line.
* ``text``: one line per sentence with the tags only, aligned with the input tokens.

``word_tag`` and ``text`` carry the checkpoint's main tags only.

For text input the output has exactly one line (or block) per input line; for CoNLL-U
input with ``word_tag``/``text`` output, one line per sentence block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from omegaconf import DictConfig

from transformer import kinds
from transformer.cli.common import hydra_entry, load_for_inference
from transformer.cli.lines import read_lines, write_lines
from transformer.inference.tagger import split_tokens

INPUT_FORMATS = ("auto", "text", "conllu")
OUTPUT_FORMATS = ("auto", "conllu", "word_tag", "text")
# CoNLL-U column index of each tag set (0-based: ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC).
TAG_COLUMN = {"upos": 3, "xpos": 4, "chunk": 9}
_WORD_ID = re.compile(r"^[1-9][0-9]*$")
_RANGE_ID = re.compile(r"^[1-9][0-9]*-[1-9][0-9]*$")
_EMPTY_ID = re.compile(r"^[0-9]+\.[1-9][0-9]*$")


@dataclass
class ConlluBlock:
    """One sentence block of a CoNLL-U file: its line numbers (0-based, into the file's
    lines) and, among them, those of the word lines to tag."""

    lines: list[int] = field(default_factory=list)
    word_lines: list[int] = field(default_factory=list)


def parse_conllu(lines: list[str], name: str = "<input>") -> list[ConlluBlock]:
    """Group CoNLL-U lines into sentence blocks; validate every non-comment line.

    Raises ``ValueError`` naming ``name`` and the 1-based line for a line with the wrong
    column count or an ID that is neither a word, a range nor an empty node.
    """
    blocks: list[ConlluBlock] = []
    current = ConlluBlock()
    for i, line in enumerate(lines):
        if not line.strip():
            if current.lines:
                blocks.append(current)
                current = ConlluBlock()
            continue
        current.lines.append(i)
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise ValueError(f"{name}:{i + 1}: expected 10 tab-separated CoNLL-U columns, found {len(cols)}")
        if _WORD_ID.match(cols[0]):
            current.word_lines.append(i)
        elif not (_RANGE_ID.match(cols[0]) or _EMPTY_ID.match(cols[0])):
            raise ValueError(f"{name}:{i + 1}: CoNLL-U ID {cols[0]!r} is not a word, range or empty node")
    if current.lines:
        blocks.append(current)
    return blocks


def looks_like_conllu(lines: list[str]) -> bool:
    """True when some line is a 10-column line with a CoNLL-U ID (a word, range or empty
    node). Plain text never has nine tabs after a number; a CoNLL-U file with one malformed
    line is still CoNLL-U, and its parser then names that line rather than the whole file
    being read as text."""
    for line in lines:
        cols = line.split("\t")
        if len(cols) == 10 and (_WORD_ID.match(cols[0]) or _RANGE_ID.match(cols[0]) or _EMPTY_ID.match(cols[0])):
            return True
    return False


def _set_tag(cols: list[str], tagset: str, tag: str) -> list[str]:
    cols = list(cols)
    col = TAG_COLUMN[tagset]
    if tagset == "chunk":
        misc = [m for m in cols[col].split("|") if m and m != "_" and not m.startswith("Chunk=")]
        cols[col] = "|".join(misc + [f"Chunk={tag}"])
    else:
        cols[col] = tag
    return cols


def _set_tags(cols: list[str], fields: dict[str, list[list[str]]], sent: int, word: int) -> list[str]:
    """``cols`` with word ``word`` of sentence ``sent``'s tag of every field set, and ``_`` in
    the part-of-speech column the model does not predict: a gold tag passed through would be
    scored as the model's (a UPOS tagger's output would score 100 % XPOS)."""
    for tagset in ("upos", "xpos"):
        if tagset not in fields and len(cols) > TAG_COLUMN[tagset]:
            cols[TAG_COLUMN[tagset]] = "_"
    for tagset, tags in fields.items():
        cols = _set_tag(cols, tagset, tags[sent][word])
    return cols


def _word_tag_line(words: list[str], tags: list[str]) -> str:
    return " ".join(f"{w}_{t}" for w, t in zip(words, tags))


def _tag(tagger, sentences: list[list[str]], out_format: str) -> tuple[dict[str, list[list[str]]], list[str] | None]:
    """``(fields, lines)``: every head's tags, and the output lines of the formats that carry
    the main tags only (``word_tag``, ``text``; ``None`` for ``conllu``)."""
    fields = tagger.tag_fields(sentences)
    tags = fields[tagger.tagset]
    if out_format == "word_tag":
        return fields, [_word_tag_line(w, t) for w, t in zip(sentences, tags)]
    if out_format == "text":
        return fields, [" ".join(t) for t in tags]
    return fields, None


def tag_text(tagger, lines: list[str], out_format: str) -> list[str]:
    """Tag text-format input lines with ``tagger`` (``tag_fields`` and ``tagset``, as a
    ``WordTagger`` has); returns output lines (see module docstring)."""
    sentences = [split_tokens(line) for line in lines]
    fields, plain = _tag(tagger, sentences, out_format)
    if plain is not None:
        return plain
    out: list[str] = []
    for n, words in enumerate(sentences, 1):
        out += [f"# sent_id = {n}", f"# text = {' '.join(words)}"]
        for i, w in enumerate(words, 1):
            out.append("\t".join(_set_tags([str(i), w] + ["_"] * 8, fields, n - 1, i - 1)))
        out.append("")
    return out


def tag_conllu(tagger, lines: list[str], out_format: str, name: str = "<input>") -> list[str]:
    """Tag CoNLL-U input lines with ``tagger`` (see :func:`tag_text`); returns output lines
    (see module docstring)."""
    blocks = parse_conllu(lines, name)
    sentences = [[lines[i].split("\t")[1] for i in b.word_lines] for b in blocks]
    fields, plain = _tag(tagger, sentences, out_format)
    if plain is not None:
        return plain
    out = list(lines)
    for s, block in enumerate(blocks):
        for w, i in enumerate(block.word_lines):
            out[i] = "\t".join(_set_tags(lines[i].split("\t"), fields, s, w))
    return out


def tag_lines(tagger, lines: list[str], input_format: str = "auto", out_format: str = "auto",
              name: str = "<input>") -> list[str]:
    """Detect/validate the formats and tag ``lines``; returns the output lines."""
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}")
    if out_format not in OUTPUT_FORMATS:
        raise ValueError(f"format must be one of {OUTPUT_FORMATS}, got {out_format!r}")
    if lines and lines[0].startswith("\ufeff"):  # a byte-order mark (Windows editors) is not text
        lines = [lines[0][1:], *lines[1:]]
    if input_format == "auto":
        input_format = "conllu" if looks_like_conllu(lines) else "text"
    if out_format == "auto":
        out_format = "conllu" if input_format == "conllu" else "word_tag"
    if input_format == "conllu":
        return tag_conllu(tagger, lines, out_format, name)
    return tag_text(tagger, lines, out_format)


def run(cfg: DictConfig) -> list[str]:
    task, device = load_for_inference(cfg.ckpt_path, cfg.device, cfg.get("accel", "none"))
    kinds.require(task, "tag", str(cfg.ckpt_path))
    lines, name = read_lines(cfg.input)
    out = tag_lines(task.tagger(int(cfg.max_tokens), device), lines, cfg.input_format, cfg.format, name)
    write_lines(out, cfg.output)
    return out


main = hydra_entry("tag")(run)

if __name__ == "__main__":
    main()
