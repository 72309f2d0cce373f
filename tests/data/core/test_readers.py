"""The readers, one per format, on the real mirrored files (read through the presets that name
them), and the errors malformed inputs must give: one naming the file and line each."""

from __future__ import annotations

import gzip
import zipfile

import pytest

from transformer.data.core.readers import (DataFormatError, TaggedSentence, infer_format, iter_line_pairs, iter_lines,
                                           iter_rows, read_columns, read_conllu)
from transformer.data.parallel.corpus import multi30k, read_pairs
from transformer.data.tagged.corpus import PRESETS, UposFromXpos, read_tagged_file


def read_preset(name: str, split: str, data_dir, mirror_root) -> list[TaggedSentence]:
    """One file of a tagged preset, read by the reader of its format."""
    preset = PRESETS[name]
    return read_tagged_file(preset["files"][split], preset["format"], data_dir, mirror_root)


def read_lines(path) -> list[str]:
    return [line for _, line in iter_lines(path)]


# ---------------------------------------------------------------- real data


@pytest.mark.parametrize("split,n", [("train", 29000), ("val", 1014), ("test_2016_flickr", 1000),
                                     ("test_2017_flickr", 1000), ("test_2017_mscoco", 461)])
def test_multi30k_counts(data_cache, mirror_root, split, n):
    pairs = read_pairs(multi30k("de", "en"), split, data_cache, mirror_root)
    assert len(pairs) == n
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in pairs)


def test_multi30k_pairs_are_aligned(data_cache, mirror_root):
    de_en = read_pairs(multi30k("de", "en"), "train", data_cache, mirror_root)
    assert de_en[0] == ("Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
                        "Two young, White males are outside near many bushes.")
    en_fr = read_pairs(multi30k("en", "fr"), "val", data_cache, mirror_root)
    fr_cs = read_pairs(multi30k("fr", "cs"), "val", data_cache, mirror_root)
    assert [p[1] for p in en_fr] == [p[0] for p in fr_cs]


def test_multi30k_czech_2017_is_a_clear_error(data_cache, mirror_root):
    with pytest.raises(ValueError, match="no test_2017_mscoco split for language 'cs'"):
        read_pairs(multi30k("en", "cs"), "test_2017_mscoco", data_cache, mirror_root)


def test_gum_train_counts(data_cache, mirror_root):
    sents = read_preset("gum", "train", data_cache, mirror_root)
    assert len(sents) == 3753
    assert sum(len(s.words) for s in sents) == 69760
    s = sents[0]
    assert s.sent_id == "GUM_academic_art-1"
    assert s.words[:2] == ["Aesthetic", "Appreciation"]
    assert s.upos[:2] == ["ADJ", "NOUN"] and s.xpos[:2] == ["JJ", "NN"]
    assert all(len(x.words) == len(x.upos) == len(x.xpos) for x in sents)
    assert [len(read_preset("gum", sp, data_cache, mirror_root)) for sp in ("dev", "test")] == [784, 890]


def test_conll2000_counts(data_cache, mirror_root):
    train = read_preset("conll2000", "train", data_cache, mirror_root)
    assert len(train) == 8936 and sum(len(s.words) for s in train) == 211727
    assert train[0].words[:3] == ["Confidence", "in", "the"]
    assert train[0].xpos[:3] == ["NN", "IN", "DT"] and train[0].chunk[:3] == ["B-NP", "B-PP", "B-NP"]
    assert train[0].upos is None
    test = read_preset("conll2000", "test", data_cache, mirror_root)
    assert len(test) == 2012 and sum(len(s.words) for s in test) == 47377


# ---------------------------------------------------------------- CoNLL-U

GOOD = (
    "# sent_id = s1\n"
    "# text = I don't know\n"
    "1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_\n"
    "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "2\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_\n"
    "3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_\n"
    "3.1\tknow\tknow\tVERB\tVB\t_\t_\t_\t0:root\t_\n"
    "4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\t_\n"
    "\n"
    "# sent_id = s2\n"
    "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n"
)


def test_conllu_skips_ranges_and_empty_nodes(tmp_path):
    p = tmp_path / "a.conllu"
    p.write_text(GOOD)
    s1, s2 = read_conllu(p)
    assert s1.sent_id == "s1" and s1.words == ["I", "do", "n't", "know"]
    assert s1.upos == ["PRON", "AUX", "PART", "VERB"] and s1.xpos == ["PRP", "VBP", "RB", "VB"]
    assert s2.sent_id == "s2" and s2.words == ["Hi"]


def _bad(tmp_path, text: str, line: int, match: str, name="bad.conllu"):
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    with pytest.raises(DataFormatError, match=match) as e:
        read_conllu(p)
    assert e.value.path == str(p) and e.value.line_no == line
    assert str(e.value).startswith(f"{p}:{line}:")


def test_conllu_wrong_column_count(tmp_path):
    _bad(tmp_path, GOOD.replace("2\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_", "2\tdo\tdo\tAUX\tVBP\t_\t3\taux"), 5,
         "expected 10 tab-separated columns, found 8")


def test_conllu_missing_field(tmp_path):
    _bad(tmp_path, GOOD.replace("1\tHi\thi\tINTJ", "1\tHi\thi\t"), 11, "missing UPOS")
    _bad(tmp_path, GOOD.replace("1\tHi\thi\tINTJ", "1\tHi\thi\t_"), 11, "missing UPOS")
    _bad(tmp_path, GOOD.replace("4\tknow\tknow", "4\t\tknow"), 8, "missing FORM")


def test_conllu_bad_ids(tmp_path):
    _bad(tmp_path, GOOD.replace("4\tknow\tknow", "5\tknow\tknow"), 8, "out of sequence")
    _bad(tmp_path, GOOD.replace("4\tknow\tknow", "x\tknow\tknow"), 8, "not an integer")


def test_conllu_not_utf8(tmp_path):
    data = GOOD.encode("utf-8").replace(b"Hi\thi", b"H\xe9\thi")
    _bad(tmp_path, data, 11, "not valid UTF-8")


def test_conllu_empty_file(tmp_path):
    _bad(tmp_path, b"", 0, "empty file")


# ---------------------------------------------------------------- parallel text


def test_parallel_length_mismatch(tmp_path):
    a, b = tmp_path / "a.de", tmp_path / "b.en"
    a.write_text("eins\nzwei\ndrei\n")
    b.write_text("one\ntwo\n")
    with pytest.raises(DataFormatError, match="differ in length") as e:
        list(iter_line_pairs(a, b))
    assert e.value.path == str(a) and e.value.line_no == 3


def test_parallel_empty_file(tmp_path):
    a, b = tmp_path / "a.de", tmp_path / "b.en"
    a.write_text("eins\n")
    b.write_text("")
    with pytest.raises(DataFormatError, match="empty file") as e:
        list(iter_line_pairs(a, b))
    assert e.value.path == str(b) and e.value.line_no == 0


def test_parallel_not_utf8_gzip(tmp_path):
    p = tmp_path / "x.gz"
    p.write_bytes(gzip.compress("gut\n".encode() + "schön\n".encode("latin-1")))
    with pytest.raises(DataFormatError, match="not valid UTF-8") as e:
        read_lines(p)
    assert e.value.line_no == 2 and e.value.path == str(p)


def test_lines_kept_exactly(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b" lead\ttab  double \r\nlast")
    assert read_lines(p) == [" lead\ttab  double ", "last"]


# ---------------------------------------------------------------- word-per-line columns (CoNLL-2000)


def test_columns_malformed_line(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("He PRP B-NP\nran VBD\n\n")
    with pytest.raises(DataFormatError, match="WORD POS CHUNK") as e:
        read_columns(p)
    assert e.value.line_no == 2


def test_columns_zip_member(tmp_path):
    z = tmp_path / "c.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("conll2000/train.txt", "He PRP B-NP\nran VBD B-VP\n\nOk UH O\n")
    a, b = read_columns(z, member="conll2000/train.txt")
    assert a.words == ["He", "ran"] and a.xpos == ["PRP", "VBD"] and b.chunk == ["O"]
    assert a.upos is None and (a.sent_id, b.sent_id) == ("train.txt:1", "train.txt:4")
    with pytest.raises(DataFormatError, match="no member 'conll2000/test.txt'") as e:
        read_columns(z, member="conll2000/test.txt")
    assert (e.value.path, e.value.line_no) == (f"{z}!conll2000/test.txt", 0)


# ---------------------------------------------------------------- UPOS from Penn Treebank tags


def test_upos_from_xpos_uses_the_word_then_the_tag_and_never_guesses():
    def sent(*pairs):
        words, upos, xpos = zip(*(p.split("/") for p in pairs))
        return TaggedSentence("s", list(words), list(upos), list(xpos))

    table = UposFromXpos([
        sent("The/DET/DT", "dog/NOUN/NN", "that/PRON/WDT", "is/AUX/VBZ", "here/ADV/RB", "runs/VERB/VBZ"),
        sent("That/DET/DT", "cat/NOUN/NN", "is/AUX/VBZ", "not/PART/RB", "in/ADP/IN", "that/SCONJ/IN"),
        sent("Not/PART/RB", "all/DET/DT", "is/AUX/VBZ", "well/ADV/RB", "as/ADP/IN", "as/SCONJ/IN"),
    ], word_purity=0.8, tag_purity=0.9)
    # (word, tag) seen: its UPOS, case-insensitively, whatever the tag's majority says
    assert table(["IS", "not", "In"], ["VBZ", "RB", "IN"]) == ["AUX", "PART", "ADP"]
    # an unseen word: the tag's UPOS when one UPOS dominates it (NN: 2/2), else None
    # (VBZ: AUX 3 of 4 < 0.9; RB: ADV 2 of 4)
    assert table(["house", "walks", "quickly"], ["NN", "VBZ", "RB"]) == ["NOUN", None, None]
    # a (word, tag) pair split between UPOS tags is undecided too, and so is an unknown tag
    assert table(["as", "42"], ["IN", "CD"]) == [None, None]
    with pytest.raises(ValueError):
        table(["a", "b"], ["DT"])
    with pytest.raises(ValueError, match="s2.*UPOS"):
        UposFromXpos([TaggedSentence("s2", ["a"], None, ["DT"])])


# ---------------------------------------------------------------- tables: TSV, CSV, JSON lines


def _write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_tsv_columns_keep_every_line_and_ignore_extra_columns(tmp_path):
    p = _write(tmp_path / "cmn.txt", "Hi.\t嗨。\tCC-BY\n\t\t\nRun.\t跑。\tCC-BY\n")
    rows = list(iter_rows(p, [1, 0], fmt="tsv"))
    assert rows == [(1, ("嗨。", "Hi.")), (2, ("", "")), (3, ("跑。", "Run."))]


def test_csv_header_names_and_quoted_commas(tmp_path):
    p = _write(tmp_path / "d.csv", 'text,label\n"good, really",pos\n\nbad,neg\n')
    assert list(iter_rows(p, ["text", "label"], header=True)) == [(2, ("good, really", "pos")), (4, ("bad", "neg"))]


def test_jsonl_nested_keys_and_gzip(tmp_path):
    p = tmp_path / "d.jsonl.gz"
    p.write_bytes(gzip.compress(b'{"translation": {"en": "a", "zh": "\xe4\xbd\xa0"}}\n'))
    assert infer_format(p) == "jsonl"
    assert list(iter_rows(p, ["translation.en", "translation.zh"])) == [(1, ("a", "你"))]


@pytest.mark.parametrize(
    "name, content, fmt, columns, line, message",
    [
        ("a.tsv", "x\ty\nonly\n", "tsv", [0, 1], 2, "expected at least 2 columns, found 1"),
        ("a.txt", b"ok\n\xff\n", "text", [0], 2, "not valid UTF-8"),
        ("a.jsonl", '{"translation": {"en": "a"}}\n', "jsonl", ["translation.en", "translation.zh"], 1,
         "key 'translation.zh' missing"),
        ("b.jsonl", '{"en": "a"}\n{"en": \n', "jsonl", ["en"], 2, "not a JSON object"),
        ("a.csv", "text\nx\n", "csv", ["label"], 1, "no column 'label'"),
        ("e.tsv", "", "tsv", [0], 0, "empty file"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, name, content, fmt, columns, line, message):
    p = _write(tmp_path / name, content)
    with pytest.raises(DataFormatError, match=message) as e:
        list(iter_rows(p, columns, fmt=fmt, header=(fmt == "csv")))
    assert (e.value.path, e.value.line_no) == (str(p), line)


@pytest.mark.parametrize("name, content, fmt", [("a.tsv", "x\ty\n\nz\tw\n\n", "tsv"),
                                                ("a.jsonl", '{"a": "x"}\n\n{"a": "z"}\n\n', "jsonl"),
                                                ("a.csv", "x,y\n\nz,w\n\n", "csv")])
def test_empty_lines_of_a_table_are_counted_in_a_warning(tmp_path, caplog, name, content, fmt):
    p = _write(tmp_path / name, content)
    rows = list(iter_rows(p, ["a"] if fmt == "jsonl" else [0], fmt=fmt))
    assert [line for line, _ in rows] == [1, 3]
    assert f"{p}: 2 empty line(s) skipped (line 2, 4)" in caplog.text
