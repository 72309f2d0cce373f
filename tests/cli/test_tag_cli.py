"""`transformer-tag` input handling: empty and blank lines, tabs, CoNLL-U with comments,
multi-word tokens and empty nodes; output line/sentence counts equal the input's."""

from __future__ import annotations

import pytest

from transformer.cli.lines import split_lines
from transformer.inference.tag_lines import looks_like_conllu, parse_conllu, split_tokens, tag_lines
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.tasks.tagging import TaggingTask

TAGS = ["DET", "NOUN", "VERB", "PUNCT"]

CONLLU = """# newdoc id = demo
# sent_id = s1
# text = I can't go.
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_
2\tca\tcan\tAUX\tMD\t_\t3\taux\t_\tSpaceAfter=No
3\tn't\tnot\tPART\tRB\t_\t0\troot\t_\t_
3.1\tgo\tgo\tVERB\tVB\t_\t_\t_\t0:root\t_
4\t.\t.\tX\t.\t_\t3\tpunct\t_\t_

# sent_id = s2
# comment only sentence follows

# sent_id = s3
1\tDogs\tdog\tNOUN\tNNS\t_\t0\troot\t_\t_
"""


class StubTagger:
    """Stands in for a ``WordTagger`` (``TaggingTask.tagger()``): tags word i of every sentence
    with TAGS[i % 4] (and, with ``aux``, that field with ``X<i>``) and records what it was
    asked to tag."""

    def __init__(self, tagset: str = "upos", aux: str | None = None):
        self.tagset, self.aux = tagset, aux
        self.seen: list[list[str]] = []

    def tag_fields(self, sentences):
        self.seen = [list(s) for s in sentences]
        fields = {self.tagset: [[TAGS[i % 4] for i in range(len(s))] for s in sentences]}
        if self.aux:
            fields[self.aux] = [[f"X{i}" for i in range(len(s))] for s in sentences]
        return fields


def test_token_splitting_rules():
    assert split_tokens("The  cat\tsat .") == ["The", "cat", "sat", "."]  # tab = separator
    assert split_tokens("a\t\tb") == ["a", "b"]
    assert split_tokens("") == [] and split_tokens("   ") == [] and split_tokens(" \t ") == []
    assert split_tokens("naïve\u00a0café") == ["naïve\u00a0café"]  # only space and tab split
    assert split_lines("a\r\nb\x0cc\n\nd") == ["a", "b\x0cc", "", "d"]  # \n only, like wc -l


def test_text_input_keeps_one_output_line_per_input_line():
    stub = StubTagger()
    lines = ["The cat sat .", "", "   ", "a\tb c", "\t"]
    out = tag_lines(stub, lines, "text", "word_tag")
    assert out == ["The_DET cat_NOUN sat_VERB ._PUNCT", "", "", "a_DET b_NOUN c_VERB", ""]
    assert stub.seen == [["The", "cat", "sat", "."], [], [], ["a", "b", "c"], []]
    assert tag_lines(stub, lines, "text", "text") == ["DET NOUN VERB PUNCT", "", "", "DET NOUN VERB", ""]
    # auto: this is text, and text defaults to word_tag output
    assert tag_lines(stub, lines) == out


def test_text_to_conllu_gives_one_block_per_input_line():
    out = tag_lines(StubTagger("xpos"), ["The cat", "", "a\tb"], "text", "conllu")
    blocks = "\n".join(out).split("\n\n")
    assert len([b for b in blocks if b.strip()]) == 3
    assert out[:4] == ["# sent_id = 1", "# text = The cat",
                       "1\tThe\t_\t_\tDET\t_\t_\t_\t_\t_", "2\tcat\t_\t_\tNOUN\t_\t_\t_\t_\t_"]
    assert out[5:8] == ["# sent_id = 2", "# text = ", ""]  # the empty line: comments only
    assert out[8:11] == ["# sent_id = 3", "# text = a b", "1\ta\t_\t_\tDET\t_\t_\t_\t_\t_"]  # tab = separator


def test_conllu_passes_comments_ranges_and_empty_nodes_through():
    lines = CONLLU.split("\n")[:-1]
    assert looks_like_conllu(lines)
    stub = StubTagger("upos")
    out = tag_lines(stub, lines)  # auto: CoNLL-U in, CoNLL-U out
    assert len(out) == len(lines)
    assert stub.seen == [["I", "ca", "n't", "."], [], ["Dogs"]]  # syntactic words only
    changed = [i for i, (a, b) in enumerate(zip(lines, out)) if a != b]
    assert changed == [3, 5, 6, 8, 14]  # exactly the five word lines
    assert out[3].split("\t")[3] == "DET" and out[8].split("\t")[3] == "PUNCT"
    # the XPOS column the model does not predict is "_" (the input's XPOS is not the model's),
    # every other column of a word line is kept
    assert lines[5].split("\t")[4] != "_" and out[5].split("\t")[4] == "_"
    assert out[5].split("\t")[:3] + out[5].split("\t")[5:] == lines[5].split("\t")[:3] + lines[5].split("\t")[5:]
    # XPOS checkpoints fill column 5 and blank UPOS
    out_x = tag_lines(StubTagger("xpos"), lines)
    assert lines[3].split("\t")[3] == "PRON" and out_x[3].split("\t")[3:5] == ["_", "DET"]


def test_a_tagger_with_an_auxiliary_head_fills_both_columns():
    lines = CONLLU.split("\n")[:-1]
    out = tag_lines(StubTagger("upos", aux="xpos"), lines)
    assert len(out) == len(lines)
    assert out[3].split("\t")[3:5] == ["DET", "X0"] and out[8].split("\t")[3:5] == ["PUNCT", "X3"]
    assert out[5].split("\t")[5:] == lines[5].split("\t")[5:]  # the rest kept
    text = tag_lines(StubTagger("upos", aux="xpos"), ["The cat"], "text", "conllu")
    assert text[2:4] == ["1\tThe\t_\tDET\tX0\t_\t_\t_\t_\t_", "2\tcat\t_\tNOUN\tX1\t_\t_\t_\t_\t_"]
    # word_tag and text carry the main tags only
    assert tag_lines(StubTagger("upos", aux="xpos"), ["The cat"], "text", "word_tag") == ["The_DET cat_NOUN"]


def test_conllu_to_word_tag_gives_one_line_per_sentence_block():
    lines = CONLLU.split("\n")[:-1]
    out = tag_lines(StubTagger(), lines, "conllu", "word_tag")
    assert out == ["I_DET ca_NOUN n't_VERB ._PUNCT", "", "Dogs_DET"]
    assert len(parse_conllu(lines)) == 3


def test_malformed_conllu_is_an_error_naming_the_line():
    lines = ["# sent_id = 1", "1\tI\tI\tPRON", ""]
    assert not looks_like_conllu(lines)
    with pytest.raises(ValueError, match=r"<input>:2: expected 10"):
        tag_lines(StubTagger(), lines, "conllu")
    with pytest.raises(ValueError, match="not a word, range or empty node"):
        parse_conllu(["x\ta\tb\tc\td\te\tf\tg\th\ti"])
    with pytest.raises(ValueError, match="format must be"):
        tag_lines(StubTagger(), ["a"], "text", "json")


def test_real_task_tags_every_word_of_awkward_input():
    words = "the cat sat on the mat .".split() * 5
    tok = SubwordTokenizer.train(words, vocab_size=280)
    task = TaggingTask(
        model={"_target_": "transformer.models.tagger.Tagger", "d_model": 16, "n_heads": 2, "n_layers": 1,
               "d_ff": 32, "dropout": 0.0, "max_len": 6},
        piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, tags=TAGS,
        data={"name": "gum", "tagset": "upos"}, tokenizer=tok.to_str(),
    )
    lines = ["the cat", "", "  ", "Überraschung\tzzz", "the " * 20]
    out = tag_lines(task.tagger(max_tokens=16), lines, "text", "word_tag")
    assert len(out) == len(lines)
    assert [len(line.split()) for line in out] == [2, 0, 0, 2, 20]
    assert all(item.rsplit("_", 1)[1] in TAGS for line in out for item in line.split())


def test_auto_format_keeps_a_conllu_file_with_one_bad_line_conllu():
    lines = CONLLU.split("\n")[:-1]
    bad = next(i for i, line in enumerate(lines) if line.startswith("4\t"))
    lines[bad] = lines[bad].replace("\t", " ", 2)  # a hand edit broke two tabs
    assert looks_like_conllu(lines)
    with pytest.raises(ValueError, match=rf"<input>:{bad + 1}: expected 10 tab-separated"):
        tag_lines(StubTagger(), lines, "auto")
    assert not looks_like_conllu(["The cat sat .", "1 2 3"])
