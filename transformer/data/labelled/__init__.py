"""Labelled text (a label per text, for classification): the corpus reader and its config
checks (``corpus.py``) and the ClassificationDataModule (``datamodule.py``)."""
