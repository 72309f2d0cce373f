"""The target-language tag (Johnson et al. 2017): parsing directions, a model's ``Languages`` (what
a checkpoint records, the checks of tgt_lang/src_lang/pivot), and the source ids a tag puts in front."""

from __future__ import annotations

import pytest

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel.languages import MULTI as MULTI_CODE
from transformer.data.parallel.languages import (Languages, add_tags, parse_direction, parse_pairs, tag, tag_ids,
                                                 tagged_source_ids)

MULTI_HP = {"src_lang": "en", "tgt_lang": "mul", "data": {"directions": ["en-de", "en-fr"]}}
BILINGUAL_HP = {"src_lang": "de", "tgt_lang": "en", "data": {"name": "multi30k"}}
MULTI = Languages.of_checkpoint(MULTI_HP)
BILINGUAL = Languages.of_checkpoint(BILINGUAL_HP)


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
    assert MULTI.directions == (("en", "de"), ("en", "fr")) and MULTI.multilingual
    assert BILINGUAL.directions is None and not BILINGUAL.multilingual
    assert MULTI.sources == ["en"] and MULTI.targets == ["de", "fr"]
    assert BILINGUAL.sources == ["de"] and BILINGUAL.targets == ["en"]
    # a checkpoint that records no tag side reads its tag in the source
    assert MULTI.tag_side == "source" and not MULTI.tag_to_decoder
    decoder = Languages.of_checkpoint({**MULTI_HP, "data": {**MULTI_HP["data"], "tag_side": "decoder"}})
    assert decoder.tag_to_decoder and decoder.split_tag([7, 1, 2]) == ([1, 2], 7)
    assert MULTI.split_tag([7, 1, 2]) == ([7, 1, 2], None)


def test_what_a_checkpoint_records_reads_back_equal():
    for languages in (MULTI, BILINGUAL, Languages.of_directions([("de", "en"), ("fr", "en")], "decoder")):
        assert Languages.of_checkpoint(languages.record()) == languages


def test_a_multilingual_model_records_one_language_per_side_or_mul():
    assert Languages.of_directions([("en", "de"), ("en", "fr")]).record()["src_lang"] == "en"
    many = Languages.of_directions([("de", "en"), ("en", "de")])
    assert (many.src_lang, many.tgt_lang) == (MULTI_CODE, MULTI_CODE)


def test_a_data_config_s_languages(tmp_path):
    assert Languages.of_config({"src_lang": "de", "tgt_lang": "en"}) == Languages("de", "en")
    for lang in ("de", "en"):
        (tmp_path / f"train.{lang}").write_text("a\n", encoding="utf-8")
    data = {"pairs": "all", "train": str(tmp_path / "train"), "tag_side": "decoder"}
    assert Languages.of_config(data) == Languages(MULTI_CODE, MULTI_CODE, (("de", "en"), ("en", "de")), "decoder")
    with pytest.raises(ValueError, match="data.pairs: 'en-en' translates en into itself"):
        Languages.of_config({**data, "pairs": ["en-en"]})


def test_check_target_language():
    assert MULTI.check_target("fr") == "fr"
    with pytest.raises(ValueError) as err:
        MULTI.check_target("cs")
    assert str(err.value) == "tgt_lang=cs: this model translates into de, fr (its directions: en-de, en-fr)"
    with pytest.raises(ValueError, match="tgt_lang: required.*de, fr"):
        MULTI.check_target(None)
    one_target = Languages.of_checkpoint({"src_lang": "mul", "tgt_lang": "en",
                                          "data": {"directions": ["de-en", "fr-en"]}})
    assert one_target.check_target(None) == "en"
    # a bilingual model: untagged; its own target accepted, another refused
    assert BILINGUAL.check_target(None) is None
    assert BILINGUAL.check_target("en") is None
    with pytest.raises(ValueError, match="tgt_lang=fr: this model translates into en .its directions: de-en"):
        BILINGUAL.check_target("fr")


def test_check_direction():
    assert MULTI.check_direction(None, "de") == ("en", "de")
    assert BILINGUAL.check_direction(None, None) == ("de", "en")
    with pytest.raises(ValueError, match="src_lang=fr: this model translates from en"):
        MULTI.check_direction("fr", "de")
    many = Languages.of_checkpoint({"src_lang": "mul", "tgt_lang": "mul",
                                    "data": {"directions": ["de-en", "fr-en", "en-de"]}})
    with pytest.raises(ValueError, match="src_lang: required.*de, fr"):
        many.check_direction(None, "en")
    with pytest.raises(ValueError, match="de-de|not trained on that direction"):
        many.check_direction("de", "de")
    assert many.check_direction("fr", "de", zero_shot=True) == ("fr", "de")


def test_check_pivot():
    languages = Languages.of_directions([("de", "en"), ("en", "de"), ("en", "fr"), ("fr", "en")])
    assert languages.check_pivot("de", "en", "fr") == ("de", "fr")
    with pytest.raises(ValueError, match="^decode.pivot=en: the checkpoint translates de-en only"):
        BILINGUAL.check_pivot("de", "en", "fr")
    with pytest.raises(ValueError, match="^pivot=fr: the second leg fr-de"):
        languages.check_pivot("en", "fr", "de", key="pivot")


def test_a_pretrained_family_translates_between_any_two_of_its_languages(tokenizer):
    hp = {"src_lang": "en", "tgt_lang": "fr", "bos_id": 2,
          "data": {"tag_side": "codes", "languages": ["en", "de", "fr"],
                   "language_codes": {"en": "<2de>", "de": "<2de>", "fr": "<2fr>"}}}
    family = Languages.of_checkpoint(hp)
    assert family.coded and family.multilingual and not family.tag_to_decoder
    assert family.sources == family.targets == ["en", "de", "fr"] and len(family.directions) == 6
    assert Languages.of_checkpoint(family.record()) == family
    assert family.record()["data"]["languages"] == ["en", "de", "fr"]
    assert family.check_direction("de", "fr") == ("de", "fr")  # trained on no listed direction: any two
    with pytest.raises(ValueError, match=r"^fr-fr: source and target are the same language"):
        family.check_direction("fr", "fr")
    with pytest.raises(ValueError, match=r"^tgt_lang=es: this model translates into en, de, fr \(any two of its "):
        family.check_direction("en", "es")
    assert family.coded_framing(tokenizer, "en", "fr") == [tokenizer.token_to_id("<2fr>"), tokenizer.token_to_id("<2de>")]
    with pytest.raises(ValueError, match=r"^src_lang: required, this model reads the source's language code"):
        family.coded_framing(tokenizer, None, "fr")


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
