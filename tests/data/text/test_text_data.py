"""Text to pretrain on: every format a task's own files come in is read as passages (plain
lines, .gz, a table's column, CoNLL-U words, word-per-line columns in a zip), several files at
once; the held-out validation share is seeded and leak-free; a long passage becomes several rows,
never dropped; the tokenizer reads a word alike in a sentence and alone."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import pytest

from transformer.data.core.readers import DataFormatError
from transformer.data.text.corpus import TextCorpus, held_out, iter_source, make_source, make_sources, source_format
from transformer.data.text.datamodule import chunk_spans
from transformer.data.text.datamodule import TextDataModule

CONLLU = """# sent_id = a-1
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_
2\tca\tcan\tAUX\tMD\t_\t0\troot\t_\t_
3\tn't\tnot\tPART\tRB\t_\t2\tadvmod\t_\t_

1\tGo\tgo\t_\tVB\t_\t0\troot\t_\t_
2\t.\t.\t_\t.\t_\t1\tpunct\t_\t_

"""


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def passages(entry, **defaults) -> list[str]:
    return list(iter_source(make_source(entry, **defaults)))


def test_each_format_is_read_as_passages(tmp_path):
    assert passages(write(tmp_path / "a.txt", "one line\n  two  \n\nthree\n")) == ["one line", "two", "", "three"]
    with gzip.open(tmp_path / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write("zipped line\n")
    assert passages(str(tmp_path / "b.txt.gz")) == ["zipped line"]
    # a labelled file's text column, by header name; one side of a parallel table by index
    write(tmp_path / "glue.tsv", "label\tsentence\r\n1\ta fine film\r\n0\ta dull one\r\n")
    assert passages({"path": str(tmp_path / "glue.tsv"), "column": "sentence", "header": True}) == ["a fine film",
                                                                                                 "a dull one"]
    write(tmp_path / "pairs.txt", "Hi.\t你好。\tCC-BY\nRun!\t跑！\tCC-BY\n")
    assert passages(str(tmp_path / "pairs.txt"), format="tsv", column=0) == ["Hi.", "Run!"]
    write(tmp_path / "rows.jsonl", '{"translation": {"en": "a dog", "de": "ein Hund"}}\n')
    assert passages(str(tmp_path / "rows.jsonl"), column="translation.de") == ["ein Hund"]
    # CoNLL-U: the words (FORM) of each sentence, multi-word tokens skipped, no UPOS needed
    assert passages(write(tmp_path / "t.conllu", CONLLU)) == ["The ca n't", "Go ."]
    with zipfile.ZipFile(tmp_path / "c.zip", "w") as z:
        z.writestr("c/train.txt", "Confidence NN B-NP\nin IN B-PP\n\nIt PRP B-NP\n")
    assert passages({"path": f"{tmp_path / 'c.zip'}!c/train.txt", "format": "conll2000"}) == ["Confidence in", "It"]


def test_formats_come_from_the_extension_and_bad_settings_are_refused(tmp_path):
    assert [source_format(p) for p in ("a.conllu", "a.tsv.gz", "b.csv", "c.jsonl", "d.txt", "z.zip!x.conllu")] == \
        ["conllu", "tsv", "csv", "jsonl", "text", "conllu"]
    assert make_source("registry:ud-english-gum/r2.5/en_gum-ud-train.conllu")["path"].startswith("registry:")
    assert Path(make_source("rel/a.txt")["path"]).is_absolute()
    with pytest.raises(ValueError, match="format 'xml' unknown"):
        make_source("a.xml", format="xml")
    with pytest.raises(ValueError, match=r"data.files\[1\].*unknown key 'colum'"):
        make_sources(["a.txt", {"path": "b.tsv", "colum": 1}])
    with pytest.raises(ValueError, match="column=-1"):
        make_source("a.tsv", column=-1)
    assert make_sources({"hub": "wikitext", "config": "wikitext-2-raw-v1"})[0] == {
        "hub": "wikitext", "config": "wikitext-2-raw-v1", "split": "train", "column": "text"}


def test_the_held_out_share_is_seeded_and_leak_free(tmp_path):
    lines = [f"passage number {i % 700}" for i in range(2000)]  # every text about three times
    path = write(tmp_path / "corpus.txt", "\n".join(lines) + "\n")
    corpus = TextCorpus(make_sources([path]), valid_fraction=0.1, valid_seed=3)
    train, valid = list(corpus.stream("train")), list(corpus.stream("valid"))
    assert len(train) + len(valid) == 2000 and not set(train) & set(valid)
    assert 0.06 < len(valid) / 2000 < 0.14
    assert valid == [t for t in lines if held_out(t, 0.1, 3)]  # file order kept
    other = TextCorpus(make_sources([path]), valid_fraction=0.1, valid_seed=4)
    assert list(other.stream("valid")) != valid  # another seed, another share
    given = TextCorpus(make_sources([path]), valid=make_sources([path]))
    assert len(list(given.stream("train"))) == 2000


def test_a_long_passage_is_cut_between_words_and_nothing_is_lost():
    starts = [True, False, False, True, False, True, False, False, False, True]
    # rows end before a word's first piece; (5, 9): a word of 4 pieces fills a row
    assert chunk_spans(starts, 4) == [(0, 3), (3, 5), (5, 9), (9, 10)]
    assert chunk_spans([True] + [False] * 9, 4) == [(0, 4), (4, 8), (8, 10)]  # a word longer than a row is cut
    assert chunk_spans([], 4) == []


@pytest.fixture(scope="module")
def several_files(tmp_path_factory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("text")
    long_line = " ".join(f"word{i}" for i in range(300))
    files = [write(root / "a.txt", "\n".join(["the cat sat on the mat ."] * 30 + [long_line]) + "\n"),
             write(root / "b.conllu", CONLLU * 10),
             {"path": write(root / "c.tsv", "label\tsentence\n" + "1\ta fine film\n" * 20), "column": "sentence",
              "header": True}]
    return root, files


def test_several_files_at_once_are_one_corpus(several_files):
    root, files = several_files
    dm = TextDataModule(files=files, valid=[str(root / "a.txt")], data_dir=root / "cache", vocab_size=300, max_len=16)
    dm.setup()
    tok = dm.tokenizer
    texts = [tok.decode(row["src"]) for row in dm.dataset("train")]
    assert {"the cat sat on the mat .", "The ca n't", "Go .", "a fine film"} <= set(texts)
    rows = [row for row in dm.dataset("train") if row["index"] // (1 << 20) == 30]  # the long line's rows
    assert len(rows) > 1 and all(len(r["src"]) <= 16 for r in rows)
    assert sum((r["src"] for r in sorted(rows, key=lambda r: r["index"])), []) == tok.encode(
        " ".join(f"word{i}" for i in range(300)))
    # a word reads alike in a sentence and alone (as a tagger gives it), and decodes without the added space
    assert tok.prefix_space and tok.encode_words(["the", "cat"])[0] == tok.encode("the cat")
    batch = next(iter(dm.train_dataloader()))
    assert batch["key"] == int(batch["index"].min()) and batch["src"].dtype.is_floating_point is False


def test_a_corpus_without_a_validation_passage_says_what_to_do(tmp_path):
    path = write(tmp_path / "tiny.txt", "one passage only\n")
    dm = TextDataModule(files=[path], valid_fraction=0.01, data_dir=tmp_path / "cache", vocab_size=300)
    with pytest.raises(DataFormatError, match="no valid passage.*valid_fraction=0.01"):
        dm.setup()
    with pytest.raises(ValueError, match="data.files: required"):
        TextDataModule(files=[], data_dir=tmp_path / "cache").setup()


def test_the_sst2_glue_text_column_and_a_treebank(mirror_root, data_cache):
    files = [{"path": str(mirror_root / "sst2-glue" / "train.tsv"), "column": "sentence", "header": True},
             "registry:ud-english-gum/r2.5/en_gum-ud-train.conllu"]
    corpus = TextCorpus(make_sources(files), valid_fraction=0.01, data_dir=data_cache, mirror_root=mirror_root)
    first = next(corpus.stream("train"))
    assert first == "hide new secretions from the parental units"  # the header row is not text, CRLF gone
    assert sum(1 for _ in iter_source(make_source(files[1]), data_cache, mirror_root)) == 3753
