"""``scripts/multi30k_words.py``: raw English split into words the way UD English-GUM splits them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.script_module import load_script
from transformer.data.core.readers import iter_lines


def _load():
    return load_script("multi30k_words")


_script = _load()
split_words, write_caption_words = _script.split_words, _script.write_caption_words


@pytest.fixture
def data_cache(mirror_root, tmp_path) -> Path:
    """A download cache filled from the mirror."""
    return tmp_path / "data-cache"


@pytest.mark.parametrize("text, words", [
    ("Two young, White males are outside near many bushes.",
     ["Two", "young", ",", "White", "males", "are", "outside", "near", "many", "bushes", "."]),
    ("He doesn't see the dogs' ball; they can't.",
     ["He", "does", "n't", "see", "the", "dogs", "'", "ball", ";", "they", "ca", "n't", "."]),
    ("A T-shirt costs 3.5 dollars in the U.S. (1,000 of them)!",
     ["A", "T-shirt", "costs", "3.5", "dollars", "in", "the", "U.S.", "(", "1,000", "of", "them", ")", "!"]),
    ("It's what we'd say, I'm sure", ["It", "'s", "what", "we", "'d", "say", ",", "I", "'m", "sure"]),
    ("", []),
])
def test_crafted_sentences(text, words):
    assert split_words(text) == words


def test_reproduces_gums_own_word_splitting(mirror_root, data_cache):
    """GUM's dev sentences keep their raw text in ``# text``: splitting it should give the
    annotated words (e-mail addresses and URLs, which GUM keeps whole, are the known misses)."""
    from transformer.data.core.sources import fetch, gum_relpath

    text, words, total, same = None, [], 0, 0
    for line in [line for _, line in iter_lines(fetch(gum_relpath("dev"), data_cache, mirror_root))] + [""]:
        if line.startswith("# text ="):
            text = line.split("=", 1)[1].strip()
        elif not line.strip():
            if text is not None:
                total += 1
                same += split_words(text) == words
            text, words = None, []
        elif not line.startswith("#"):
            cols = line.split("\t")
            if cols[0].isdigit():
                words.append(cols[1])
    assert total == 784 and same / total > 0.9


def test_writes_one_line_per_caption(mirror_root, data_cache, tmp_path):
    out = tmp_path / "silver" / "words.txt"
    written = write_caption_words("val", out, first=50, data_dir=str(data_cache), mirror_root=str(mirror_root))
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 51 and lines[-1] == "" and all(lines[:50]) and lines[:50] == written
    assert lines[0] == "A group of men are loading cotton onto a truck"  # val's first caption
    assert sum(line.endswith(" .") for line in lines[:50]) > 25  # a final full stop is a word of its own
