"""Labelled sentences from a user's files: column choice in TSV, CSV (with a header) and JSON
lines; the label set from the training file; bad rows and unknown labels are errors naming
the file and line; the data module batches sentences with their labels."""

from __future__ import annotations

import json

import pytest

from transformer.data.core.readers import DataFormatError
from transformer.data.labelled.corpus import label_ids, label_vocab, read_labelled
from transformer.data.labelled.datamodule import ClassificationDataModule


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_tsv_columns_by_index(tmp_path):
    f = write(tmp_path / "a.tsv", "pos\tgreat film\nneg\tdull , slow\n")
    rows = read_labelled(f, text_column=1, label_column=0)
    assert rows.texts == ["great film", "dull , slow"] and rows.labels == ["pos", "neg"] and rows.lines == [1, 2]


def test_csv_with_header_names_and_quoted_commas(tmp_path):
    f = write(tmp_path / "a.csv", 'id,sentence,label\n1,"good, really good",pos\n2,bad,neg\n')
    rows = read_labelled(f, text_column="sentence", label_column="label", header=True)
    assert rows.texts == ["good, really good", "bad"] and rows.labels == ["pos", "neg"] and rows.lines == [2, 3]


def test_jsonl_keys(tmp_path):
    lines = [json.dumps({"text": "fine", "meta": {"y": "pos"}}), "", json.dumps({"text": "meh", "meta": {"y": "neg"}})]
    f = write(tmp_path / "a.jsonl", "\n".join(lines) + "\n")
    rows = read_labelled(f, text_column="text", label_column="meta.y")
    assert rows.labels == ["pos", "neg"] and rows.lines == [1, 3]


def test_label_set_comes_from_the_training_file_sorted(tmp_path):
    train = read_labelled(write(tmp_path / "t.tsv", "x\tb\ny\ta\nz\tb\n"))
    assert label_vocab(train) == ["a", "b"]
    assert label_ids(train, ["a", "b"]) == [1, 0, 1]


def test_unknown_label_names_file_and_line(tmp_path):
    dev = read_labelled(write(tmp_path / "dev.tsv", "x\ta\ny\tc\n"))
    with pytest.raises(DataFormatError, match=r"dev\.tsv:2: label 'c' is not one of the training file's labels"):
        label_ids(dev, ["a", "b"])


@pytest.mark.parametrize(("text", "message"), [
    ("good\tpos\nbad\n", r":2: expected at least 2 columns, found 1"),
    ("good\tpos\nbad\t \n", r":2: empty label"),
    ("good\tpos\n\tneg\n", r":2: empty text"),
    ("good\tpos\nbad\tneg\n\xff\tneg\n", r":3: not valid UTF-8"),
])
def test_bad_rows_name_file_and_line(tmp_path, text, message):
    f = tmp_path / "bad.tsv"
    f.write_bytes(text.encode("utf-8").replace(b"\xc3\xbf", b"\xff"))
    with pytest.raises(DataFormatError, match=message):
        read_labelled(f)


def test_one_label_only_is_refused(tmp_path):
    with pytest.raises(DataFormatError, match="at least two"):
        label_vocab(read_labelled(write(tmp_path / "t.tsv", "x\ta\ny\ta\n")))


def test_datamodule_batches_sentences_with_their_labels(tmp_path):
    train = write(tmp_path / "train.tsv", "".join(f"good film {i}\tpos\nbad film {i}\tneg\n" for i in range(20)))
    dev = write(tmp_path / "dev.tsv", "good\tpos\nbad bad bad\tneg\n")
    dm = ClassificationDataModule(train=str(train), dev=str(dev), data_dir=str(tmp_path / "cache"), vocab_size=300,
                                  tokenizer_model="word", max_tokens=64)
    dm.setup()
    assert dm.labels == ["neg", "pos"] and dm.splits == ["train", "dev"] and dm.test_splits == []
    batches = list(dm.dataloader("dev"))
    got = {}
    for b in batches:
        for row, label, src in zip(b["index"].tolist(), b["labels"].tolist(), b["src"]):
            got[row] = (dm.labels[label], dm.tokenizer.decode([t for t in src.tolist() if t != dm.tokenizer.pad_id]))
    assert got == {0: ("pos", "good"), 1: ("neg", "bad bad bad")}
    assert dm.settings()["paths"]["dev"] == str(dev.resolve())


def test_datamodule_refuses_an_unknown_dev_label_and_missing_files(tmp_path):
    train = write(tmp_path / "train.tsv", "a\tpos\nb\tneg\n")
    dev = write(tmp_path / "dev.tsv", "a\tpos\nc\tmaybe\n")
    dm = ClassificationDataModule(train=str(train), dev=str(dev), data_dir=str(tmp_path / "cache"),
                                  tokenizer_model="word", vocab_size=100)
    with pytest.raises(DataFormatError, match=r"dev\.tsv:2: label 'maybe'"):
        dm.setup()
    with pytest.raises(ValueError, match="data.dev is required"):
        ClassificationDataModule(train=str(train), data_dir=str(tmp_path / "cache")).setup()


def test_held_out_splits_are_seeded_leak_free_and_read_back_by_name(tmp_path):
    from transformer.data.labelled.corpus import read_split

    texts = [f"sentence {i % 70}" for i in range(100)]  # 30 texts appear twice
    f = write(tmp_path / "all.tsv", "".join(f"{t}\t{'ab'[i % 2]}\n" for i, t in enumerate(texts)))
    dm = ClassificationDataModule(train=str(f), holdout={"dev": 0.2, "test": 10}, holdout_seed=3,
                                  data_dir=tmp_path / "cache", tokenizer_model="word", vocab_size=100)
    dm.setup()
    parts = {s: dm.raw(s) for s in ("train", "dev", "test")}
    assert sum(len(p) for p in parts.values()) == 100  # nothing lost
    assert 19 <= len(parts["dev"]) <= 20 and 9 <= len(parts["test"]) <= 10  # short by less than one group
    seen = [set(p.texts) for p in parts.values()]
    assert not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])  # every copy in one split
    assert dm.test_splits == ["test"]
    for split, part in parts.items():  # what evaluation reads from a checkpoint's settings is the same split
        again = read_split(dm.settings(), split)
        assert (again.texts, again.lines) == (part.texts, part.lines)
    other = ClassificationDataModule(train=str(f), holdout={"dev": 0.2, "test": 10}, holdout_seed=4)
    assert read_split(other.settings(), "test").texts != parts["test"].texts  # the seed decides


def test_a_split_is_a_file_or_carved_not_both(tmp_path):
    f = write(tmp_path / "a.tsv", "x\ta\ny\tb\n")
    with pytest.raises(ValueError, match=r"data\.holdout\.dev: a split is either a file or carved"):
        ClassificationDataModule(train=str(f), dev=str(f), holdout={"dev": 0.5})
