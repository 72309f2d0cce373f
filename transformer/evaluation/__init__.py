"""Scoring and report writing: corpus BLEU / chrF for translation, shared by every task kind;
tagging accuracy reports, ensembles and the most-frequent-tag baseline."""

from transformer.evaluation.tagging import ensemble_report, evaluate_tagging, format_report, most_frequent_tag_baseline
from transformer.evaluation.translation import CorpusBLEU, score_translations, write_outputs

__all__ = ["CorpusBLEU", "ensemble_report", "evaluate_tagging", "format_report", "most_frequent_tag_baseline",
           "score_translations", "write_outputs"]
