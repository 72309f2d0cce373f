"""SubwordTokenizer: specials, save/load identity, exact round trip, word alignment."""

from __future__ import annotations

import random

import pytest

from transformer.data.core.tokenizer import SPECIAL_TOKENS, SubwordTokenizer, roundtrip_exactness
from transformer.data.parallel.corpus import multi30k, read_pairs

TRICKY = [
    "Two young, White males are outside near many bushes.",
    "  leading spaces, double  spaces and trailing ",
    "a\ttab and ümlauts: Größe, Straße, Ærø",
    "unseen scripts: Ωμέγα 漢字 😀 — “quotes” ﬁ ligature",
    "NFKC would change this: ① ｆｕｌｌｗｉｄｔｈ",
    "",
]


@pytest.fixture(scope="module")
def sample(data_cache, mirror_root) -> list[str]:
    pairs = read_pairs(multi30k("de", "en"), "train", data_cache, mirror_root)
    rng = random.Random(0)
    picked = rng.sample(pairs, 1500)
    return [s for s, _ in picked] + [t for _, t in picked]


@pytest.fixture(scope="module")
def bpe(sample) -> SubwordTokenizer:
    return SubwordTokenizer.train(sample, vocab_size=1000)


def test_special_ids(bpe):
    assert (bpe.pad_id, bpe.bos_id, bpe.eos_id, bpe.unk_id, bpe.mask_id) == (0, 1, 2, 3, 4)
    assert [bpe.id_to_token(i) for i in range(5)] == SPECIAL_TOKENS
    assert bpe.vocab_size == 1000


def test_specials_in_text_are_plain_text(bpe):
    # The literal string "<pad>" in a sentence must not become id 0 (it would vanish on decode).
    text = "a <pad> and <mask> here </s>"
    ids = bpe.encode(text)
    assert not set(ids) & {0, 1, 2, 3, 4}
    assert bpe.decode(ids) == text
    assert SubwordTokenizer.from_str(bpe.to_str()).encode(text) == ids


def test_roundtrip_exact_on_sample(bpe, sample):
    frac, bad = roundtrip_exactness(bpe, sample + TRICKY)
    assert bad == [] and frac == 1.0


def test_decode_skips_specials(bpe):
    ids = bpe.encode("A dog runs.")
    assert bpe.decode([bpe.bos_id, *ids, bpe.eos_id, bpe.pad_id, bpe.pad_id]) == "A dog runs."


def test_save_load_identity(bpe, sample, tmp_path):
    path = bpe.save(tmp_path / "tok")
    assert path.name == "tokenizer.json"
    again = SubwordTokenizer.load(path)
    from_str = SubwordTokenizer.from_str(bpe.to_str())
    texts = sample[:200] + TRICKY
    assert again.encode_batch(texts) == bpe.encode_batch(texts) == from_str.encode_batch(texts)
    assert again.to_str() == bpe.to_str() and again.content_hash == bpe.content_hash
    assert again == bpe


@pytest.mark.parametrize("model", ["unigram", "word"])
def test_other_models(sample, model, tmp_path):
    texts = sample[:600]
    tok = SubwordTokenizer.train(texts if model != "word" else [w for t in texts for w in t.split()], 600, model=model)
    assert tok.id_to_token(0) == "<pad>" and tok.mask_id == 4
    again = SubwordTokenizer.load(tok.save(tmp_path))
    assert again.encode_batch(texts) == tok.encode_batch(texts)
    if model == "unigram":
        assert roundtrip_exactness(tok, texts + TRICKY)[0] == 1.0
    else:
        assert tok.encode("zzzunseen")[0] == tok.unk_id


def test_different_training_gives_different_hash(sample):
    a = SubwordTokenizer.train(sample[:500], 400)
    b = SubwordTokenizer.train(sample[:500], 450)
    assert a.content_hash != b.content_hash


def test_encode_words_alignment(sample):
    words_text = [w for t in sample[:1000] for w in t.split()]
    tok = SubwordTokenizer.train(words_text, 500)
    words = ["The", "unbelievably", "Straßenbahnhaltestelle", "xyzzy", "😀", "."]
    ids, word_ids = tok.encode_words(words)
    assert len(ids) == len(word_ids) > len(words)  # rare words split into several pieces
    assert sorted(set(word_ids)) == list(range(len(words)))
    assert word_ids == sorted(word_ids)  # each word's pieces contiguous, in order
    assert tok.unk_id not in ids  # unseen words still encode (byte-level pieces)
    for w, word in enumerate(words):
        assert tok.decode([i for i, k in zip(ids, word_ids) if k == w]) == word
    assert tok.encode_words([]) == ([], [])


def test_word_level_alignment():
    tok = SubwordTokenizer.train(["the", "cat", "the"], 50, model="word")
    ids, word_ids = tok.encode_words(["the", "dog", " "])
    assert word_ids == [0, 1, 2]
    assert ids[0] == tok.token_to_id("the") and ids[1] == tok.unk_id and ids[2] == tok.unk_id
