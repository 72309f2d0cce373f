"""What every kind of data shares: sources, readers, tokenizer, held-out splits, the Arrow
cache, batching, config checks and the base LightningDataModule (see :mod:`transformer.data`)."""
