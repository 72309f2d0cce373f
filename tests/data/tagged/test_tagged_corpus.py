"""Tagging splits read without Lightning: the data module and checkpoint-only evaluation see
the same sentences (CoNLL-2000's dev cut from its training file), and bad requests are named."""

from __future__ import annotations

import subprocess
import sys

import pytest

from transformer.data.tagged.corpus import PRESETS, read_tagged_file, read_tagged_split, read_tagged_splits


def test_conll2000_dev_is_the_tail_of_train_and_train_the_rest(mirror_root, tmp_path):
    files = PRESETS["conll2000"]["files"]
    full = read_tagged_file(files["train"], "conll2000", tmp_path, mirror_root)
    splits = read_tagged_splits("conll2000", ("train", "dev", "test"), tmp_path, mirror_root, dev_size=300)
    assert list(splits) == ["train", "dev", "test"]
    assert splits["train"] + splits["dev"] == full and len(splits["dev"]) == 300
    assert splits["test"] == read_tagged_file(files["test"], "conll2000", tmp_path, mirror_root)
    data = {"name": "conll2000", "tagset": "pos", "dev_size": 300}
    assert read_tagged_split(data, "val", tmp_path, mirror_root) == splits["dev"]  # "val" means dev
    assert read_tagged_split(data, "train", tmp_path, mirror_root) == splits["train"]


def test_the_data_module_reads_the_same_splits(mirror_root, tmp_path):
    from transformer.data.tagged.datamodule import TaggingDataModule

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
    code = ("import sys, transformer.data.tagged.corpus, transformer.inference.tagger, "
            "transformer.evaluation.tagging; assert 'lightning' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _conllu(*sentences: list[tuple[str, str]]) -> str:
    out = []
    for n, words in enumerate(sentences, 1):
        out.append(f"# sent_id = s{n}")
        out += [f"{i}\t{w}\t_\t{t}\t_\t_\t0\tdep\t_\t_" for i, (w, t) in enumerate(words, 1)]
        out.append("")
    return "\n".join(out) + "\n"


def test_a_treebank_by_paths_keeps_spaced_words_whole_and_counts_unknown_dev_tags(tmp_path):
    from transformer.data.tagged.datamodule import TaggingDataModule

    train = [[("tôi", "PRON"), ("là", "AUX"), ("sinh viên", "NOUN"), (".", "PUNCT")]] * 30
    (tmp_path / "train.conllu").write_text(_conllu(*train), encoding="utf-8")
    (tmp_path / "dev.conllu").write_text(_conllu([("tôi", "PRON"), ("%", "SYM"), ("%", "SYM")]), encoding="utf-8")
    (tmp_path / "pud.conllu").write_text(_conllu([("sinh viên", "NOUN")]), encoding="utf-8")
    dm = TaggingDataModule("vi_toy", "upos", train=tmp_path / "train.conllu", dev=tmp_path / "dev.conllu",
                           tests={"pud": tmp_path / "pud.conllu"}, data_dir=tmp_path / "cache",
                           tokenizer_model="bpe", vocab_size=300)
    assert dm.test_splits == ["pud"]
    dm.setup()
    assert dm.tag_vocab == ["AUX", "NOUN", "PRON", "PUNCT"]  # the training file's tags only
    assert dm.unknown_tags == {"dev": {"SYM": 2}}
    dev = dm.dataset("dev")[0]
    assert dev["tags"][0] == dm.tag_vocab.index("PRON") and dev["tags"][1:] == [4, 4]  # past the classes
    pud = dm.dataset("pud")[0]
    assert dm.raw("pud")[0].words == ["sinh viên"] and set(pud["word_ids"]) == {0}  # one word, its pieces
    assert dm.corpus["files"]["train"] == str((tmp_path / "train.conllu").absolute())
    # the checkpoint's corpus description reads the same splits, from any folder
    assert read_tagged_split(dm.corpus, "pud") == dm.raw("pud")
    assert read_tagged_split(dm.corpus, str(tmp_path / "dev.conllu")) == dm.raw("dev")  # a file as the split


def test_without_a_dev_file_dev_is_the_tail_of_train(tmp_path):
    from transformer.data.tagged.datamodule import TaggingDataModule

    train = [[(f"w{i}", "NOUN"), (".", "PUNCT")] for i in range(10)]
    (tmp_path / "train.conllu").write_text(_conllu(*train), encoding="utf-8")
    dm = TaggingDataModule("toy", "upos", train=tmp_path / "train.conllu", dev_size=3,
                           data_dir=tmp_path / "cache", tokenizer_model="word", vocab_size=50)
    dm.setup()
    assert [s.words[0] for s in dm.raw("dev")] == ["w7", "w8", "w9"] and len(dm.raw("train")) == 7
    assert dm.test_splits == []
    with pytest.raises(ValueError, match=r"toy has splits train, dev \(held out from train\); got 'pud'"):
        read_tagged_split(dm.corpus, "pud")
