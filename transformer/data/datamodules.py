"""The LightningDataModules: translation (Multi30k), tagging (UD GUM, CoNLL-2000),
sentence classification (a user's labelled files) and unlabelled text (pretraining).

The only modules of ``transformer.data`` that import Lightning are this one and the five it
gathers: :mod:`~transformer.data.datamodule_base` (dataloaders, resumable training loader,
cached tokenizer), :mod:`~transformer.data.translation_datamodule`,
:mod:`~transformer.data.tagging_datamodule`,
:mod:`~transformer.data.classification_datamodule` and :mod:`~transformer.data.text_datamodule`.
Configs name the classes by this module's path (``transformer.data.datamodules.TranslationDataModule``).
"""

from transformer.data.classification_datamodule import ClassificationDataModule
from transformer.data.datamodule_base import ResumableLoader, TokenBudgetDataModule
from transformer.data.tagging_datamodule import TaggingDataModule
from transformer.data.text_datamodule import TextDataModule
from transformer.data.translation_datamodule import MULTI30K_EVAL_SPLITS, TranslationDataModule

__all__ = ["MULTI30K_EVAL_SPLITS", "ClassificationDataModule", "ResumableLoader", "TaggingDataModule", "TextDataModule",
           "TokenBudgetDataModule", "TranslationDataModule"]
