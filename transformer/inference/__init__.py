"""Batched inference on raw text: one predictor per task kind, independent of Lightning."""

from transformer.inference.classifier import SentenceClassifier
from transformer.inference.fill import Filler, MaskFiller
from transformer.inference.tagger import WordTagger, chunk_sentence
from transformer.inference.translator import SearchFn, Translator, one_line

__all__ = ["Filler", "MaskFiller", "SearchFn", "SentenceClassifier", "Translator", "WordTagger", "chunk_sentence", "one_line"]
