"""The target-language tag (Johnson et al. 2017): parsing directions, what a checkpoint records,
the checks of tgt_lang/src_lang, and the source ids a tag puts in front."""

from __future__ import annotations

import pytest

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel.languages import (add_tags, check_direction, check_target_language,
                                                 directions_of, parse_direction, parse_pairs, source_languages,
                                                 tag, tag_ids, tagged_source_ids, target_languages)

MULTI_HP = {"src_lang": "en", "tgt_lang": "mul", "data": {"directions": ["en-de", "en-fr"]}}
BILINGUAL_HP = {"src_lang": "de", "tgt_lang": "en", "data": {"name": "multi30k"}}


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["A dog runs in the park.", "Ein Hund rennt im Park.", "Un chien court dans le parc."] * 20
    return add_tags(SubwordTokenizer.train(texts, vocab_size=300), ["de", "fr"])


def test_tag_and_directions():
    assert tag("fr") == "<2fr>"
    assert parse_direction("en-de") == ("en", "de")
    assert parse_pairs(["en-de", "en-fr"]) == [("en", "de"), ("en", "fr")]
    assert parse_pairs("en-de,de-en") == [("en", "de"), ("de", "en")]
    assert parse_pairs("all", ["en", "de", "fr"]) == [("en", "de"), ("en", "fr"), ("de", "en"), ("de", "fr"),
                                                      ("fr", "en"), ("fr", "de")]


@pytest.mark.parametrize("value, words", [
    ([], "empty"),
    (["en-en"], "into itself"),
    (["ende"], "not a direction"),
    (["en-de-fr"], "not a direction"),
    ([3], "not a direction"),
    (["en-de", "en-de"], "twice"),
    (["en-xx"], "unknown language 'xx'"),
    ({"en": "de"}, "expected a list"),
])
def test_bad_pairs_are_one_error_naming_the_key(value, words):
    with pytest.raises(ValueError, match="data.pairs") as err:
        parse_pairs(value, ["en", "de", "fr", "cs"])
    assert words in str(err.value)


def test_a_checkpoint_s_languages():
    assert directions_of(MULTI_HP) == [("en", "de"), ("en", "fr")]
    assert directions_of(BILINGUAL_HP) is None
    assert source_languages(MULTI_HP) == ["en"] and target_languages(MULTI_HP) == ["de", "fr"]
    assert source_languages(BILINGUAL_HP) == ["de"] and target_languages(BILINGUAL_HP) == ["en"]


def test_check_target_language():
    assert check_target_language(MULTI_HP, "fr") == "fr"
    with pytest.raises(ValueError) as err:
        check_target_language(MULTI_HP, "cs")
    assert str(err.value) == "tgt_lang=cs: this model translates into de, fr (its directions: en-de, en-fr)"
    with pytest.raises(ValueError, match="tgt_lang: required.*de, fr"):
        check_target_language(MULTI_HP, None)
    one_target = {"src_lang": "mul", "tgt_lang": "en", "data": {"directions": ["de-en", "fr-en"]}}
    assert check_target_language(one_target, None) == "en"
    # a bilingual model: untagged; its own target accepted, another refused
    assert check_target_language(BILINGUAL_HP, None) is None
    assert check_target_language(BILINGUAL_HP, "en") is None
    with pytest.raises(ValueError, match="tgt_lang=fr: this model translates into en .its directions: de-en"):
        check_target_language(BILINGUAL_HP, "fr")


def test_check_direction():
    assert check_direction(MULTI_HP, None, "de") == ("en", "de")
    assert check_direction(BILINGUAL_HP, None, None) == ("de", "en")
    with pytest.raises(ValueError, match="src_lang=fr: this model translates from en"):
        check_direction(MULTI_HP, "fr", "de")
    many = {"src_lang": "mul", "tgt_lang": "mul", "data": {"directions": ["de-en", "fr-en", "en-de"]}}
    with pytest.raises(ValueError, match="src_lang: required.*de, fr"):
        check_direction(many, None, "en")
    with pytest.raises(ValueError, match="de-de|not trained on that direction"):
        check_direction(many, "de", "de")


def test_tagged_source_ids(tokenizer):
    text = "A dog runs."
    plain = tokenizer.encode(text)
    de, fr = tagged_source_ids(tokenizer, text, "de"), tagged_source_ids(tokenizer, text, "fr")
    assert de[1:] == fr[1:] == plain and de[0] != fr[0]
    assert tokenizer.id_to_token(de[0]) == "<2de>" and tokenizer.id_to_token(fr[0]) == "<2fr>"
    assert tagged_source_ids(tokenizer, text, None) == plain
    assert tag_ids(tokenizer, plain, "fr") == fr
    # a tag is one special token: never split, never produced by a sentence that spells it, skipped on decode
    assert tokenizer.encode("<2fr>") != [fr[0]]
    assert tokenizer.decode(fr) == text
    with pytest.raises(ValueError, match="no <2cs> token"):
        tagged_source_ids(tokenizer, text, "cs")
    # adding the tags again keeps their ids
    assert add_tags(tokenizer, ["de", "fr"]).to_str() == tokenizer.to_str()


def test_temperature_sampling():
    from transformer.data.parallel.multilingual import sample_counts, sample_indices, temperature_shares

    sizes = [9000, 1000]
    assert temperature_shares(sizes, 1.0).tolist() == pytest.approx([0.9, 0.1])
    flat = temperature_shares(sizes, 5.0)
    assert 0.1 < flat[1] < 0.5 and temperature_shares(sizes, 1e6).tolist() == pytest.approx([0.5, 0.5], abs=1e-3)
    assert sample_counts(sizes, 1.0) == sizes
    counts = sample_counts(sizes, 5.0)
    assert counts[1] > 1000 and abs(sum(counts) - 10000) <= 1
    import numpy as np

    idx = sample_indices(1000, counts[1], np.random.default_rng(0))
    assert len(idx) == counts[1] and set(idx.tolist()) == set(range(1000))  # every row, some twice
    down = sample_indices(9000, counts[0], np.random.default_rng(0))
    assert len(set(down.tolist())) == counts[0]  # drawn without repeats
