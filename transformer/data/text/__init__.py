"""Unlabelled text (passages, for pretraining): the corpus reader (``corpus.py``), its config
checks (``checks.py``) and the TextDataModule (``datamodule.py``)."""
