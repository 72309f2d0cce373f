"""BLEU follows the target language: sacreBLEU's zh tokenizer for Chinese, ja-mecab or char for
Japanese, 13a otherwise; a config can override it; the signature says which."""

from __future__ import annotations

import importlib.util

from sacrebleu.metrics import BLEU

from transformer.evaluation import CorpusBLEU, score_translations
from transformer.evaluation.translation import bleu_tokenizer

REFS = ["我们今天去公园散步。", "他喜欢喝茶。"]
HYPS = ["我们今天去公园。", "他喜欢喝咖啡。"]


def test_tokenizer_follows_the_target_language():
    assert bleu_tokenizer("zh") == bleu_tokenizer("zh-Hant") == bleu_tokenizer("zh_CN") == "zh"
    mecab = all(importlib.util.find_spec(m) is not None for m in ("MeCab", "ipadic"))
    assert bleu_tokenizer("ja") == ("ja-mecab" if mecab else "char")
    assert bleu_tokenizer("en") == bleu_tokenizer("de") == bleu_tokenizer(None) == "13a"
    assert bleu_tokenizer("zh", "char") == "char"


def test_chinese_scores_use_the_zh_tokenizer_and_say_so():
    metrics = score_translations(HYPS, REFS, bleu_tokenizer("zh"))
    assert "tok:zh" in metrics["bleu_signature"] and "tok:zh" in metrics["bleu_lowercase_signature"]
    assert metrics["bleu"] == round(BLEU(tokenize="zh").corpus_score(HYPS, [REFS]).score, 2)
    # 13a sees each unspaced sentence as one word: no credit for the shared characters
    assert score_translations(HYPS, REFS)["bleu"] < metrics["bleu"]
    assert metrics["chrf"] > 0 and "nc:6" in metrics["chrf_signature"]


def test_validation_accumulator_uses_the_same_tokenizer():
    acc = CorpusBLEU("zh")
    acc.update(HYPS[:1], REFS[:1])
    acc.update(HYPS[1:], REFS[1:])
    assert abs(CorpusBLEU.score(acc.stats) - BLEU(tokenize="zh").corpus_score(HYPS, [REFS]).score) < 1e-9
