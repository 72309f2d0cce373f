"""The LightningDataModules: translation (Multi30k), tagging (UD GUM, CoNLL-2000) and
sentence classification (a user's labelled files).

The only modules of ``transformer.data`` that import Lightning are this one and the four it
gathers: :mod:`~transformer.data.datamodule_base` (dataloaders, resumable training loader,
cached tokenizer), :mod:`~transformer.data.translation_datamodule`,
:mod:`~transformer.data.tagging_datamodule` and
:mod:`~transformer.data.classification_datamodule`. Configs name the classes by this module's path
(``transformer.data.datamodules.TranslationDataModule``).
"""

from transformer.data.classification_datamodule import ClassificationDataModule
from transformer.data.datamodule_base import ResumableLoader, TokenBudgetDataModule
from transformer.data.tagging_datamodule import TaggingDataModule
from transformer.data.translation_datamodule import MULTI30K_EVAL_SPLITS, TranslationDataModule

__all__ = ["MULTI30K_EVAL_SPLITS", "ClassificationDataModule", "ResumableLoader", "TaggingDataModule", "TokenBudgetDataModule",
           "TranslationDataModule"]
