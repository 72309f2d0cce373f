"""Data: sources (download/mirror + checksums), readers (one per file format), tokenizer,
batching, datamodules.

Everything here imports without Lightning; the LightningDataModules are their own modules
(``transformer.data.translation_datamodule.TranslationDataModule``, ``tagging_datamodule``,
``classification_datamodule``, over ``datamodule_base``), named by their path in configs.
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

__all__ = [
    "DATASETS",
    "IGNORE_INDEX",
    "ChecksumError",
    "DataFormatError",
    "DownloadError",
    "SubwordTokenizer",
    "TaggedSentence",
    "TaggingCollator",
    "TokenBudgetBatchSampler",
    "TranslationCollator",
    "fetch",
    "iter_hub_rows",
    "iter_line_pairs",
    "iter_lines",
    "iter_rows",
    "read_columns",
    "read_conllu",
    "restore_order",
]
