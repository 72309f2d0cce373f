"""Batched inference on raw text: one predictor per task kind, independent of Lightning."""

from transformer.inference.translator import SearchFn, Translator, one_line

__all__ = ["SearchFn", "Translator", "one_line"]
