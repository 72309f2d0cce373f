"""Tagging metrics on a crafted prediction/gold pair, every number worked out by hand."""

from __future__ import annotations

import pytest

from transformer.evaluation.tagging import format_report
from transformer.evaluation.tag_metrics import MostFrequentTagBaseline, tagging_metrics

WORDS = [["the", "cat", "sat"], ["a", "dog", "barked", "loudly"], ["run"]]
GOLD = [["DET", "NOUN", "VERB"], ["DET", "NOUN", "VERB", "ADV"], ["VERB"]]
PRED = [["DET", "NOUN", "VERB"], ["DET", "VERB", "VERB", "ADJ"], ["NOUN"]]
TRAIN_WORDS = {"the", "cat", "sat", "a", "run"}  # unseen: dog, barked, loudly


def test_accuracies_by_hand():
    m = tagging_metrics(GOLD, PRED, WORDS, TRAIN_WORDS)
    # 8 words, wrong: dog (NOUN->VERB), loudly (ADV->ADJ), run (VERB->NOUN)
    assert (m["tokens"], m["correct"]) == (8, 5)
    assert m["acc"] == pytest.approx(5 / 8)
    # unseen: dog (wrong), barked (right), loudly (wrong)
    assert m["unseen_tokens"] == 3
    assert m["unseen_acc"] == pytest.approx(1 / 3)
    assert m["seen_acc"] == pytest.approx(4 / 5)
    # only sentence 0 is all right
    assert (m["sentences"], m["sentence_acc"]) == (3, pytest.approx(1 / 3))


def test_per_tag_precision_recall_f1():
    t = tagging_metrics(GOLD, PRED, WORDS, TRAIN_WORDS)["per_tag"]
    assert t["DET"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2, "predicted": 2}
    # NOUN: gold 2 (cat, dog), predicted 2 (cat, run), 1 right
    assert (t["NOUN"]["precision"], t["NOUN"]["recall"], t["NOUN"]["f1"]) == (0.5, 0.5, 0.5)
    # VERB: gold 3 (sat, barked, run), predicted 3 (sat, dog, barked), 2 right
    assert t["VERB"]["precision"] == pytest.approx(2 / 3)
    assert t["VERB"]["recall"] == pytest.approx(2 / 3)
    assert t["VERB"]["f1"] == pytest.approx(2 / 3)
    # ADV gold once, never predicted: precision undefined, recall 0, F1 0
    assert t["ADV"] == {"precision": None, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 0}
    # ADJ predicted once, never gold
    assert t["ADJ"] == {"precision": 0.0, "recall": None, "f1": 0.0, "support": 0, "predicted": 1}
    m = tagging_metrics(GOLD, PRED)
    # macro F1 over the tags with gold support: DET 1, NOUN .5, VERB 2/3, ADV 0
    assert m["macro_f1"] == pytest.approx((1 + 0.5 + 2 / 3 + 0) / 4)


def test_confusions_sorted_by_count_then_name():
    gold = [["A", "A", "A", "B", "B", "C"]]
    pred = [["B", "B", "C", "A", "A", "C"]]
    conf = tagging_metrics(gold, pred)["confusions"]
    assert conf == [
        {"gold": "A", "pred": "B", "count": 2},
        {"gold": "B", "pred": "A", "count": 2},
        {"gold": "A", "pred": "C", "count": 1},
    ]
    assert len(tagging_metrics(gold, pred, top_confusions=1)["confusions"]) == 1


def test_without_training_vocabulary_unseen_is_unknown():
    m = tagging_metrics(GOLD, PRED)
    assert m["unseen_acc"] is None and m["unseen_tokens"] is None
    assert "n/a" in format_report(m)


def test_empty_sentence_counts_as_right_and_misalignment_is_an_error():
    m = tagging_metrics([["X"], []], [["X"], []])
    assert m["sentence_acc"] == 1.0 and m["tokens"] == 1
    with pytest.raises(ValueError, match="sentence 0"):
        tagging_metrics([["X", "Y"]], [["X"]])
    with pytest.raises(ValueError, match="gold sentences"):
        tagging_metrics([["X"]], [])


def test_report_lists_every_tag_and_the_confusions():
    text = format_report(tagging_metrics(GOLD, PRED, WORDS, TRAIN_WORDS), "demo")
    assert "62.50 % (5/8)" in text and "33.33 % of 3 unseen words" in text
    for tag in ("DET", "NOUN", "VERB", "ADV", "ADJ"):
        assert f"\n{tag} " in text
    assert "NOUN -> VERB: 1" in text


def test_most_frequent_tag_baseline():
    words = [["the", "run", "run", "run"], ["a", "run"]]
    tags = [["DET", "NOUN", "VERB", "VERB"], ["DET", "NOUN"]]
    base = MostFrequentTagBaseline().fit(words, tags)
    # run: NOUN 2, VERB 2 -> tie goes to the tag seen first (NOUN); unseen -> overall
    # most frequent (NOUN 2 = VERB 2 = DET 2 -> DET, seen first).
    assert base.predict([["run", "the", "zebra"]]) == [["NOUN", "DET", "DET"]]
