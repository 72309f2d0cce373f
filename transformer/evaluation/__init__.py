"""Scoring and report writing: corpus BLEU / chrF for translation, shared by every task kind."""

from transformer.evaluation.translation import CorpusBLEU, score_translations, write_outputs

__all__ = ["CorpusBLEU", "score_translations", "write_outputs"]
