"""Evaluating a split: translate, score against the references, write hypotheses and metrics;
and the Markdown table of several evaluations."""

from __future__ import annotations

import json

import pytest
from sacrebleu.metrics import BLEU

from transformer.data.parallel.corpus import multi30k, read_pairs
from transformer.data.parallel.languages import Languages
from transformer.decoding.settings import DecodeSettings
from transformer.evaluation.translation import evaluate_split, markdown_table


class _EchoTranslator:
    """Translates by looking the source up in a table; counts what it was asked."""

    truncated = 3

    def __init__(self, table: dict[str, str]) -> None:
        self.table, self.asked = table, 0

    def translate(self, sources):
        self.asked += len(sources)
        return [[(self.table.get(s, ""), -1.0)] for s in sources]

    def extra_stats(self) -> dict:
        return {"mean_iterations": 2.5}


class _Task:
    def __init__(self, table: dict[str, str]) -> None:
        self.hparams = {"src_lang": "de", "tgt_lang": "en"}
        self.languages = Languages.of_checkpoint(self.hparams)
        self.translators: list[_EchoTranslator] = []
        self.table = table

    def translator(self, decode_cfg, device="cpu"):
        self.translators.append(_EchoTranslator(self.table))
        return self.translators[-1]


def test_evaluate_split_scores_the_split_and_writes_both_files(mirror_root, tmp_path):
    pairs = read_pairs(multi30k("de", "en"), "test_2017_mscoco", tmp_path / "cache", mirror_root)
    # every second sentence translated perfectly, the others by a wrong sentence
    table = {src: (ref if i % 2 == 0 else "a cat sleeps .") for i, (src, ref) in enumerate(pairs)}
    task = _Task(table)
    decode = DecodeSettings(strategy="beam", beam_size=2)
    metrics = evaluate_split(task, "test_2017_mscoco", decode, tmp_path / "out",
                             data_dir=str(tmp_path / "cache"), mirror_root=str(mirror_root))

    hyps = [table[s] for s, _ in pairs]
    assert task.translators[0].asked == len(pairs) == metrics["sentences"] == 461
    assert metrics["bleu"] == round(BLEU().corpus_score(hyps, [[r for _, r in pairs]]).score, 2)
    assert 30 < metrics["bleu"] < 100 and metrics["bleu_signature"].startswith("nrefs:1")
    assert metrics["pair"] == "de-en" and metrics["split"] == "test_2017_mscoco" and metrics["decode"] == decode.to_dict()
    assert metrics["truncated_sources"] == 3 and metrics["mean_iterations"] == 2.5
    written = (tmp_path / "out" / "test_2017_mscoco.beam.hyp.en").read_text(encoding="utf-8")
    assert written.split("\n") == hyps + [""]
    assert json.loads((tmp_path / "out" / "test_2017_mscoco.beam.json").read_text()) == metrics


def test_translation_task_evaluate_is_evaluate_split(monkeypatch, tmp_path):
    from transformer.tasks import seq2seq, translation

    seen = {}

    def fake_evaluate_split(*args):
        seen["args"] = args
        return {"bleu": 1.0}

    monkeypatch.setattr(seq2seq, "evaluate_split", fake_evaluate_split)
    task = object.__new__(translation.TranslationTask)
    assert translation.TranslationTask.evaluate(task, "val", {"strategy": "greedy"}, tmp_path) == {"bleu": 1.0}
    assert seen["args"] == (task, "val", {"strategy": "greedy"}, tmp_path, "data/cache", None, "cpu")


def _metrics(split: str, decode: dict, bleu: float) -> dict:
    return {"pair": "de-en", "split": split, "decode": decode, "bleu": bleu, "bleu_lowercase": bleu + 1,
            "chrf": 60.0, "sentences": 1000, "sentences_per_second": 123.456, "bleu_signature": "nrefs:1|x"}


def test_markdown_table_has_one_row_per_evaluation_and_the_signature():
    rows = [_metrics("test_2016_flickr", {"strategy": "greedy"}, 38.0),
            _metrics("test_2016_flickr", {"strategy": "beam", "beam_size": 4}, 39.256)]
    lines = markdown_table(rows).split("\n")
    assert lines[0].startswith("| pair | split | decoding | BLEU (cased) |")
    assert lines[2] == "| de-en | test_2016_flickr | greedy | 38.00 | 39.00 | 60.00 | 1000 | 123.5 |"
    assert lines[3] == "| de-en | test_2016_flickr | beam 4 | 39.26 | 40.26 | 60.00 | 1000 | 123.5 |"
    assert lines[-1] == "signature: nrefs:1|x" and len(lines) == 6


@pytest.mark.parametrize("decode, name", [({}, "greedy"), ({"strategy": "nat_mask_predict"}, "nat_mask_predict")])
def test_decoding_names(decode, name):
    from transformer.evaluation.translation import decoding_name

    assert decoding_name(decode) == name
