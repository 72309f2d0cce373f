"""Labelled sentences from a user's files: column choice in TSV, CSV (with a header) and JSON
lines; the label set from the training file; bad rows and unknown labels are errors naming
the file and line; the data module batches sentences with their labels."""

from __future__ import annotations

import json

import pytest

from transformer.data.classification_datamodule import ClassificationDataModule
from transformer.data.labelled import label_ids, label_vocab, read_labelled
from transformer.data.readers import DataFormatError


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
