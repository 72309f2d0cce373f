"""Labelled text (a label per text, for classification): the corpus reader (``corpus.py``), its
config checks (``checks.py``) and the ClassificationDataModule (``datamodule.py``)."""
