"""Tagged text (a tag per word, for tagging): the corpus reader (``corpus.py``), its option
checks (``checks.py``) and the TaggingDataModule (``datamodule.py``)."""
