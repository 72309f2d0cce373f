"""The streamed preparation path: a corpus written to an Arrow table as it is read, tokenized
in batches (and in worker processes), equals tokenizing the list of its pairs."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from transformer.data.core.cache import column_array, iter_text_batches
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel.datamodule import ArrowPairs, raw_pairs_dataset, tokenize_translation


def _corpus(n: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(0)
    words_src = ["Hund", "Katze", "läuft", "schläft", "ein", "zwei", "Haus", "rot", "大", "猫"]
    words_tgt = ["dog", "cat", "runs", "sleeps", "a", "two", "house", "red", "big", "猫"]
    pairs = []
    for _ in range(n):
        idx = rng.integers(0, len(words_src), size=rng.integers(1, 12))
        pairs.append((" ".join(words_src[i] for i in idx), " ".join(words_tgt[i] for i in idx)))
    return pairs


@pytest.fixture(scope="module")
def pairs():
    return _corpus(2500)


@pytest.fixture(scope="module")
def tok(pairs):
    return SubwordTokenizer.train([s for s, _ in pairs] + [t for _, t in pairs], 300)


def test_raw_table_streams_in_chunks_and_reads_back_the_same_pairs(pairs, tmp_path, monkeypatch):
    from transformer.data.parallel import datamodule

    monkeypatch.setattr(datamodule, "WRITE_ROWS", 700)  # several writes, the last one partial
    consumed = []

    def stream():
        for p in pairs:
            consumed.append(1)
            yield p

    raw = raw_pairs_dataset(stream, tmp_path, "toy", ["sha-x"])
    assert raw.column_names == ["src_text", "tgt_text", "index"]
    assert list(ArrowPairs(raw)) == pairs and ArrowPairs(raw)[5] == pairs[5] and len(ArrowPairs(raw)) == len(pairs)
    assert raw["index"][:] == list(range(len(pairs)))
    # a second call is a cache hit: the stream is not read again
    again = raw_pairs_dataset(stream, tmp_path, "toy", ["sha-x"])
    assert len(consumed) == len(pairs) and list(ArrowPairs(again)) == pairs


def test_streamed_tokenization_equals_the_list_path(pairs, tok, tmp_path):
    raw = raw_pairs_dataset(lambda: iter(pairs), tmp_path, "toy", ["sha-x"])
    ds = tokenize_translation(raw, tok, tok, tmp_path, "toy", ["sha-x"], num_proc=1)
    src_ids = tok.encode_batch([s for s, _ in pairs])
    tgt_ids = tok.encode_batch([t for _, t in pairs])
    assert ds["src"][:] == src_ids and ds["tgt"][:] == tgt_ids
    assert ds["index"][:] == list(range(len(pairs)))
    assert column_array(ds, "src_len").tolist() == [len(x) for x in src_ids]
    assert column_array(ds, "tgt_len").tolist() == [len(x) for x in tgt_ids]
    # two worker processes write two shards that read back as the same table, in order
    ds2 = tokenize_translation(raw, tok, tok, tmp_path / "mp", "toy", ["sha-x"], num_proc=2)
    assert len(ds2.cache_files) == 2
    assert ds2["src"][:] == src_ids and ds2["index"][:] == list(range(len(pairs)))
    again = tokenize_translation(raw, tok, tok, tmp_path / "mp", "toy", ["sha-x"], num_proc=2)
    assert [f["filename"] for f in again.cache_files] == [f["filename"] for f in ds2.cache_files]


def test_tokenizer_trains_from_batches_of_the_arrow_column_like_from_a_list(pairs, tmp_path):
    raw = raw_pairs_dataset(lambda: iter(pairs), tmp_path, "toy", ["sha-x"])
    batches = list(iter_text_batches(raw, ["src_text", "tgt_text"]))
    assert all(isinstance(b, list) for b in batches) and len(batches) >= 2
    from_stream = SubwordTokenizer.train(iter_text_batches(raw, ["src_text", "tgt_text"]), 300)
    from_list = SubwordTokenizer.train([s for s, _ in pairs] + [t for _, t in pairs], 300)
    assert from_stream == from_list
    # a table with a selection mapping is read through it
    picked = raw.select([3, 1])
    assert list(iter_text_batches(picked, ["src_text"])) == [[pairs[3][0], pairs[1][0]]]


def test_one_sided_pairs_are_left_out_and_counted_by_line_even_from_the_cache(tmp_path, caplog):
    pairs = [("a", "b"), ("c", ""), ("", ""), ("   ", "d"), ("e", "f")]
    with caplog.at_level(logging.WARNING):
        raw = raw_pairs_dataset(lambda: iter(pairs), tmp_path, "toy", "k", drop_one_sided="toy.tgt")
    assert list(ArrowPairs(raw)) == [("a", "b"), ("", ""), ("e", "f")]
    assert raw["index"][:] == [0, 1, 2]
    assert "toy.tgt: 2 pair(s) with one side empty left out of training (line 2, 4)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        raw_pairs_dataset(lambda: iter(()), tmp_path, "toy", "k", drop_one_sided="toy.tgt")
    assert "2 pair(s) with one side empty" in caplog.text


def test_a_reader_error_leaves_no_cache_behind(tmp_path):
    def broken():
        yield ("a", "b")
        raise ValueError("bad line 2")

    with pytest.raises(ValueError, match="bad line 2"):
        raw_pairs_dataset(broken, tmp_path, "toy", "k")
    assert not list((tmp_path / "arrow").glob("*"))
    assert len(raw_pairs_dataset(lambda: iter([("a", "b")]), tmp_path, "toy", "k")) == 1


def test_a_row_cap_reads_an_even_sample_of_batches(pairs, tmp_path, monkeypatch):
    from transformer.data.parallel import datamodule

    monkeypatch.setattr(datamodule, "WRITE_ROWS", 100)
    raw = raw_pairs_dataset(lambda: iter(pairs), tmp_path, "toy", ["sha-x"])
    sample = list(iter_text_batches(raw, ["src_text"], max_rows=1000))
    got = [s for batch in sample for s in batch]
    assert 900 <= len(got) <= 1300 and got[:100] == [s for s, _ in pairs[:100]]
    assert got[-1] in {s for s, _ in pairs[-500:]}  # spread to the end of the table, not its first rows


def test_length_columns_read_as_a_stream_equal_the_memory_mapped_ones(pairs, tok, tmp_path):
    from transformer.data.core.cache import column_arrays

    raw = raw_pairs_dataset(lambda: iter(pairs), tmp_path, "toy", ["sha-x"])
    ds = tokenize_translation(raw, tok, tok, tmp_path, "toy", ["sha-x"], num_proc=2)
    src_len, tgt_len = column_arrays(ds, ["src_len", "tgt_len"])
    assert src_len.tolist() == ds["src_len"][:] and tgt_len.tolist() == ds["tgt_len"][:]
    for part in (ds.select(range(10, 50)), ds.select([7, 3, 5])):  # a slice, a mapping
        assert column_arrays(part, ["src_len"])[0].tolist() == part["src_len"][:]
