"""Data, by kind. ``core/`` is what every kind shares: dataset sources (download/mirror +
checksums), readers (one per file format), the subword tokenizer, seeded held-out splits, the
Arrow cache, token-budget batching and the base LightningDataModule (with the data config check
every kind runs). Each kind of data has its own package: ``parallel/`` (sentence pairs,
translation), ``text/`` (unlabelled text, pretraining), ``labelled/`` (a label per text,
classification) and ``tagged/`` (a tag per word, tagging), each with its corpus reader
and its config checks (``corpus.py``) and its LightningDataModule, which tokenizes
the corpus into the cache (``datamodule.py``), named by its path in configs
(``transformer.data.parallel.datamodule.TranslationDataModule``).

Everything but the data modules imports without Lightning; this package re-exports the core
pieces most callers need.
"""

from transformer.data.core.batching import (IGNORE_INDEX, TaggingCollator, TokenBudgetBatchSampler,
                                            TranslationCollator, restore_order)
from transformer.data.core.readers import (DataFormatError, TaggedSentence, iter_hub_rows, iter_line_pairs, iter_lines,
                                           iter_rows, read_columns, read_conllu)
from transformer.data.core.sources import DATASETS, ChecksumError, DownloadError, fetch
from transformer.data.core.tokenizer import SubwordTokenizer

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
