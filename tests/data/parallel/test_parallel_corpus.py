"""Parallel corpora in every layout a user brings, the hub path on a local dataset, held-out
splits, the errors that name file and line, and Chinese through the tokenizer."""

from __future__ import annotations

import csv
import gzip
import json

import pytest

from transformer.data.core.readers import DataFormatError
from transformer.data.core.tokenizer import SubwordTokenizer, roundtrip_exactness
from transformer.data.parallel.corpus import ParallelCorpus, make_corpus

PAIRS = [("Hi.", "嗨。"), ("Run!", "跑！"), ("I won, \"really\".", "我赢了，真的。"), ("Wait", "等等"), ("Hi.", "你好。")]


def _read(corpus: dict, split: str = "train") -> list[tuple[str, str]]:
    return list(ParallelCorpus(corpus).stream(split))


def _write_text(folder, stem, pairs, gz=False):
    for side, lang in ((0, "en"), (1, "zh")):
        data = "".join(p[side] + "\n" for p in pairs).encode("utf-8")
        path = folder / f"{stem}.{lang}{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(data) if gz else data)
    return str(folder / f"{stem}.{{lang}}{'.gz' if gz else ''}")


def test_three_layouts_read_the_same_pairs(tmp_path):
    per_lang = _write_text(tmp_path, "train", PAIRS, gz=True)
    tsv = tmp_path / "cmn.txt"  # Tatoeba's layout: en, zh, attribution; a BOM and a blank last line
    tsv.write_text("\ufeff" + "".join(f"{en}\t{zh}\tCC-BY #{i}\n" for i, (en, zh) in enumerate(PAIRS)) + "\n",
                   encoding="utf-8")
    with open(tmp_path / "c.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "chinese", "english"])
        w.writerows([i, zh, en] for i, (en, zh) in enumerate(PAIRS))
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps({"translation": {"en": en, "zh": zh}}, ensure_ascii=False) + "\n"
                             for en, zh in PAIRS), encoding="utf-8")
    layouts = [
        make_corpus("en", "zh", {"train": per_lang}),
        make_corpus("en", "zh", {"train": {"src": per_lang.format(lang="en"), "tgt": per_lang.format(lang="zh")}}),
        make_corpus("en", "zh", {"train": str(tsv)}, format="tsv", columns={"en": 0, "zh": 1}),
        make_corpus("en", "zh", {"train": str(tmp_path / "c.csv")}, header=True,
                    columns={"en": "english", "zh": "chinese"}),
        make_corpus("en", "zh", {"train": str(jsonl)}),
    ]
    for corpus in layouts:
        assert _read(corpus) == PAIRS
    # the other direction from the same files: columns follow the language codes
    assert _read(make_corpus("zh", "en", {"train": str(jsonl)})) == [(zh, en) for en, zh in PAIRS]
    assert _read(make_corpus("zh", "en", {"train": str(tsv)}, format="tsv", columns={"en": 0, "zh": 1}))[0] == ("嗨。", "Hi.")


def test_held_out_splits_partition_the_file_without_leaks(tmp_path):
    pairs = [(f"sentence {i % 120}", f"句子 {i}") for i in range(300)]  # each source 2-3 times
    path = tmp_path / "all.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    corpus = make_corpus("en", "zh", {"train": str(path)}, holdout={"test": 30, "valid": 20}, holdout_seed=7)
    reader = ParallelCorpus(corpus)
    assert reader.splits == ["train", "test", "valid"]
    splits = {s: _read(corpus, s) for s in reader.splits}
    sizes = {s: len(p) for s, p in splits.items()}
    assert sizes == ParallelCorpus(corpus).key_split().counts
    # whole groups of 2-3 copies: a split can fall short of its size by less than a group
    assert 28 <= sizes["test"] <= 30 and 18 <= sizes["valid"] <= 20
    assert sorted(p for ps in splits.values() for p in ps) == sorted(pairs)
    sources = {s: {src for src, _ in p} for s, p in splits.items()}
    assert not (sources["train"] & sources["test"]) and not (sources["train"] & sources["valid"])
    assert not (sources["test"] & sources["valid"])
    assert splits == {s: _read(corpus, s) for s in reader.splits}  # the same split every time
    # the fingerprint (cache key) follows the settings
    other = ParallelCorpus(make_corpus("en", "zh", {"train": str(path)}, holdout={"test": 30, "valid": 20}))
    assert reader.fingerprint("test") != other.fingerprint("test")


@pytest.mark.parametrize(("layout", "content", "where", "message"), [
    ("lengths", None, "train.zh:3", "parallel files differ in length"),
    ("tsv", "a\tb\nc\n", "bad.tsv:2", "expected at least 2 columns, found 1"),
    ("utf8", b"ok\tfine\n\xff\xfe\tx\n", "bad.tsv:2", "not valid UTF-8"),
    ("empty", b"", "bad.tsv:0", "empty file"),
    ("json", '{"translation": {"en": "a", "zh": "b"}}\n{"translation": {"en": "c", "fr": "d"}}\n',
     "bad.jsonl:2", "key 'translation.zh' missing"),
])
def test_bad_input_names_file_and_line(tmp_path, layout, content, where, message):
    if layout == "lengths":
        (tmp_path / "train.en").write_text("a\nb\n", encoding="utf-8")
        (tmp_path / "train.zh").write_text("甲\n乙\n丙\n", encoding="utf-8")
        corpus = make_corpus("en", "zh", {"train": str(tmp_path / "train.{lang}")})
    else:
        path = tmp_path / ("bad.jsonl" if layout == "json" else "bad.tsv")
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        corpus = make_corpus("en", "zh", {"train": str(path)})
    with pytest.raises(DataFormatError, match=message) as err:
        _read(corpus)
    assert where in str(err.value) and "\n" not in str(err.value)


def test_an_empty_split_and_a_single_text_file_are_refused(tmp_path):
    path = tmp_path / "all.tsv"
    path.write_text("a\tb\n", encoding="utf-8")
    corpus = make_corpus("en", "zh", {"train": str(path)}, holdout={"test": 0})
    with pytest.raises(DataFormatError, match=r"all.tsv:0: split 'test' is empty"):
        _read(corpus, "test")
    (tmp_path / "one.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(ValueError, match="one text file holds one language"):
        _read(make_corpus("en", "zh", {"train": str(tmp_path / "one.txt")}))
    with pytest.raises(ValueError, match="data.train: required"):
        _read(make_corpus("en", "zh", {}))


def test_hub_path_reads_a_local_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"translation": [{"en": en, "zh": zh} for en, zh in PAIRS]}
    folder = tmp_path / "hub"
    folder.mkdir()
    datasets.Dataset.from_dict(rows).to_parquet(str(folder / "train.parquet"))
    datasets.Dataset.from_dict(rows).select(range(2)).to_parquet(str(folder / "validation.parquet"))
    corpus = make_corpus("en", "zh", {"train": "train", "valid": "validation"}, hub={"name": str(folder)})
    assert _read(corpus) == PAIRS and _read(corpus, "valid") == PAIRS[:2]
    saved = tmp_path / "saved"
    flat = {"english": [p[0] for p in PAIRS], "chinese": [p[1] for p in PAIRS]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(flat)}).save_to_disk(str(saved))
    corpus = make_corpus("zh", "en", {"train": "train"}, hub={"name": str(saved)},
                         columns={"en": "english", "zh": "chinese"})
    assert _read(corpus) == [(zh, en) for en, zh in PAIRS]
    with pytest.raises(ValueError, match="no column 'translation'"):
        _read(make_corpus("zh", "en", {"train": "train"}, hub={"name": str(saved)}))


def test_chinese_round_trips_through_a_tokenizer_trained_on_it():
    train = ["我们今天去公园散步。", "他喜欢喝茶，不喜欢喝咖啡。", "这本书很有意思！", "你叫什么名字？"] * 30
    tok = SubwordTokenizer.train(train, vocab_size=400)
    unseen = ["今天天气很好。", "鑫龘 unseen 字 and  two  spaces\t", "東京に行きます。", " 前后空格 "]
    assert roundtrip_exactness(tok, unseen) == (1.0, [])
    # text without spaces still gets multi-character pieces (merges inside the sentence)
    pieces = tok.backend.encode("我们今天去公园散步。", add_special_tokens=False).tokens
    assert len(pieces) < len("我们今天去公园散步。")
