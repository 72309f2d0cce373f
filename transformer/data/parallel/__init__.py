"""Parallel text (sentence pairs, for translation): the corpus reader and its config
checks (``corpus.py``) and the TranslationDataModule (``datamodule.py``)."""
