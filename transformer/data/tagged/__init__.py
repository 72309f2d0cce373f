"""Tagged text (a tag per word, for tagging): the corpus reader and its option
checks (``corpus.py``) and the TaggingDataModule (``datamodule.py``)."""
