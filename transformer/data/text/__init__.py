"""Unlabelled text (passages, for pretraining): the corpus reader and its config
checks (``corpus.py``) and the TextDataModule (``datamodule.py``)."""
