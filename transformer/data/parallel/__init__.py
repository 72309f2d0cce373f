"""Parallel text (sentence pairs, for translation): the corpus reader (``corpus.py``), its config
checks (``checks.py``) and the TranslationDataModule (``datamodule.py``)."""
