"""Tagging splits read without Lightning: the data module and checkpoint-only evaluation see
the same sentences (CoNLL-2000's dev cut from its training file), and bad requests are named."""

from __future__ import annotations

import subprocess
import sys

import pytest

from transformer.data.readers import read_conll2000
from transformer.data.tagged_splits import read_tagged_split, read_tagged_splits


def test_conll2000_dev_is_the_tail_of_train_and_train_the_rest(mirror_root, tmp_path):
    full = read_conll2000("train", tmp_path, mirror_root)
    splits = read_tagged_splits("conll2000", ("train", "dev", "test"), tmp_path, mirror_root, dev_size=300)
    assert list(splits) == ["train", "dev", "test"]
    assert splits["train"] + splits["dev"] == full and len(splits["dev"]) == 300
    assert splits["test"] == read_conll2000("test", tmp_path, mirror_root)
    data = {"name": "conll2000", "tagset": "pos", "dev_size": 300}
    assert read_tagged_split(data, "val", tmp_path, mirror_root) == splits["dev"]  # "val" means dev
    assert read_tagged_split(data, "train", tmp_path, mirror_root) == splits["train"]


def test_the_data_module_reads_the_same_splits(mirror_root, tmp_path):
    from transformer.data.datamodules import TaggingDataModule

    dm = TaggingDataModule("conll2000", "pos", data_dir=tmp_path, mirror_root=mirror_root, dev_size=200,
                           tokenizer_model="word", vocab_size=600)
    dm.setup()
    data = {"name": "conll2000", "tagset": "pos", "dev_size": 200}
    for split in ("train", "dev", "test"):
        assert dm.raw(split) == read_tagged_split(data, split, tmp_path, mirror_root)


def test_bad_requests_are_named(mirror_root, tmp_path):
    with pytest.raises(ValueError, match="GUM has splits train, dev, test; got 'valid'"):
        read_tagged_split({"name": "gum", "tagset": "upos"}, "valid", tmp_path, mirror_root)
    with pytest.raises(ValueError, match="CoNLL-2000 has splits"):
        read_tagged_split({"name": "conll2000", "tagset": "pos"}, "test_2016", tmp_path, mirror_root)
    with pytest.raises(ValueError, match="unknown tagging dataset 'ptb'"):
        read_tagged_split({"name": "ptb", "tagset": "pos"}, "dev", tmp_path, mirror_root)
    with pytest.raises(ValueError, match="dev_size 0 must be in 1.."):
        read_tagged_splits("conll2000", ("dev",), tmp_path, mirror_root, dev_size=0)


def test_reading_splits_needs_no_lightning():
    code = ("import sys, transformer.data.tagged_splits, transformer.inference.tagger, "
            "transformer.evaluation.tagging; assert 'lightning' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
