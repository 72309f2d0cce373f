"""Hugging Face folders read onto our own modules: a config translation and a key map per family
(``hub.families``: BERT, RoBERTa, DistilBERT; Marian, M2M100, NLLB and mBART-50 onto the
encoder-decoder, the multilingual families' language codes in ``hub.languages``), and the folder's
files, the tokenizer included (``hub.folder``). No model classes of its own: what a family does
differently is a switch of ``models.transformer``, ``models.mlm``, ``models.pooling`` and
``modules.positional``, and its fine-tuned sequence and token classifiers are our classifier and
tagger (``hub.families.HEADS``)."""

from transformer.hub.families import FAMILIES, HubError
from transformer.hub.folder import (PREFIX, checkpoint, head_checkpoint, init_checkpoint, is_hub_path, mlm_checkpoint,
                                    resolve, translation_checkpoint)

__all__ = ["FAMILIES", "HubError", "PREFIX", "checkpoint", "head_checkpoint", "init_checkpoint", "is_hub_path",
           "mlm_checkpoint", "resolve", "translation_checkpoint"]
