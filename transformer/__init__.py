"""A readable Transformer built from scratch in PyTorch, trained with Lightning and Hydra."""
__version__ = "0.1.0"
