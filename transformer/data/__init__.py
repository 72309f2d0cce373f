"""Data: sources (download/mirror + checksums), readers (one per file format), tokenizer,
batching, datamodules.

Everything but the LightningDataModules imports without Lightning; the datamodules
are loaded on first access (``transformer.data.TranslationDataModule``).
"""

from transformer.data.batching import (
    IGNORE_INDEX,
    TaggingCollator,
    TokenBudgetBatchSampler,
    TranslationCollator,
    restore_order,
)
from transformer.data.readers import (
    DataFormatError,
    TaggedSentence,
    iter_hub_rows,
    iter_line_pairs,
    iter_lines,
    iter_rows,
    read_columns,
    read_conllu,
)
from transformer.data.sources import DATASETS, ChecksumError, DownloadError, fetch
from transformer.data.tokenizer import SubwordTokenizer

_LAZY = {"TranslationDataModule", "TaggingDataModule"}


def __getattr__(name: str):
    if name in _LAZY:
        from transformer.data import datamodules

        return getattr(datamodules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DATASETS",
    "IGNORE_INDEX",
    "ChecksumError",
    "DataFormatError",
    "DownloadError",
    "SubwordTokenizer",
    "TaggedSentence",
    "TaggingCollator",
    "TaggingDataModule",
    "TokenBudgetBatchSampler",
    "TranslationCollator",
    "TranslationDataModule",
    "fetch",
    "iter_hub_rows",
    "iter_line_pairs",
    "iter_lines",
    "iter_rows",
    "read_columns",
    "read_conllu",
    "restore_order",
]
