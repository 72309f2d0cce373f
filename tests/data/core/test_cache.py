"""Arrow caching of raw and tokenized splits: hits when nothing changed, never stale otherwise;
the streamed path gives the same tables as tokenizing a list of pairs directly."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer.data.core import cache
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel import datamodule
from transformer.data.parallel.datamodule import raw_pairs_dataset

PAIRS = [("ein Hund läuft", "a dog runs"), ("zwei Katzen", "two cats"), ("ein Haus", "a house")] * 20


@pytest.fixture(scope="module")
def toks():
    texts = [s for s, _ in PAIRS] + [t for _, t in PAIRS]
    return SubwordTokenizer.train(texts, 280), SubwordTokenizer.train(texts, 300)


def _arrows(d: Path) -> list[Path]:
    """The tokenized tables (raw-pair tables left out)."""
    return sorted(f for f in (d / "arrow").glob("*.arrow") if "-raw-" not in f.name)


def tokenize_translation(pairs, src_tok, tgt_tok, cache_dir, name, key, **kwargs):
    """The two-step path from a list: pairs streamed into a raw table, then tokenized."""
    raw = raw_pairs_dataset(lambda: iter(pairs), cache_dir, name, key)
    return datamodule.tokenize_translation(raw, src_tok, tgt_tok, cache_dir, name, key, **kwargs)


def test_same_inputs_hit_the_cache(toks, tmp_path):
    a, _ = toks
    ds1 = tokenize_translation(PAIRS, a, a, tmp_path, "toy", ["sha-x"])
    files = _arrows(tmp_path)
    assert [Path(f["filename"]) for f in ds1.cache_files] == files and len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    ds2 = tokenize_translation(PAIRS, a, SubwordTokenizer.from_str(a.to_str()), tmp_path, "toy", ["sha-x"])
    assert _arrows(tmp_path) == files and files[0].stat().st_mtime_ns == mtime
    assert ds2["src"][:] == ds1["src"][:] == a.encode_batch([s for s, _ in PAIRS])
    assert ds2["index"][:] == list(range(len(PAIRS)))


def test_changed_tokenizer_is_not_a_stale_hit(toks, tmp_path):
    a, b = toks
    ds_a = tokenize_translation(PAIRS, a, a, tmp_path, "toy", ["sha-x"])
    ds_b = tokenize_translation(PAIRS, a, b, tmp_path, "toy", ["sha-x"])
    assert len(_arrows(tmp_path)) == 2
    assert ds_b["tgt"][:] == b.encode_batch([t for _, t in PAIRS])
    assert ds_b["tgt"][:] != ds_a["tgt"][:]


def test_changed_source_is_not_a_stale_hit(toks, tmp_path):
    a, _ = toks
    tokenize_translation(PAIRS, a, a, tmp_path, "toy", ["sha-x"])
    changed = [("ein Baum", "a tree")] + PAIRS[1:]
    ds = tokenize_translation(changed, a, a, tmp_path, "toy", ["sha-y"])
    assert len(_arrows(tmp_path)) == 2
    assert ds["tgt"][0] == a.encode("a tree")


def test_a_corrupted_arrow_cache_is_rebuilt_with_a_warning(toks, tmp_path, caplog):
    a, _ = toks
    expected = tokenize_translation(PAIRS, a, a, tmp_path, "toy", ["sha-x"])["src"][:]
    (arrow,) = _arrows(tmp_path)
    data = bytearray(arrow.read_bytes())
    # change token ids in place (ids stay in range: the file still reads, with wrong data)
    start = len(data) // 2
    for i in range(start, start + 64, 4):
        data[i] = (data[i] + 1) % 256
    arrow.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        got = tokenize_translation(PAIRS, a, a, tmp_path, "toy", ["sha-x"])["src"][:]
    assert f"cache file {arrow} has sha256" in caplog.text and "rebuilding it" in caplog.text
    assert got == expected


def test_a_cache_file_is_published_with_its_digest_already_there(tmp_path, monkeypatch):
    """Two runs sharing a cache: one checking the cache while the other publishes must never
    see the file without its sha256, which it would take for a stale file and delete."""
    import os

    built, path = tmp_path / ".x.tmp", tmp_path / "x.arrow"
    built.write_bytes(b"table")
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst) == path:  # the table itself (its digest is written through os.replace too)
            seen.append(path.with_name(path.name + ".sha256").is_file())
        real_replace(src, dst)

    monkeypatch.setattr(cache.os, "replace", replace)
    cache.publish_cache(built, path)
    assert seen == [True] and cache.check_cache(path) and path.read_bytes() == b"table"
