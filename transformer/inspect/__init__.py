"""Looking inside trained models: attention weights captured from a checkpoint's own outputs,
word alignments from cross-attention, positional-encoding tables, and their plots.

``attention`` and ``positions`` are plain torch/numpy; ``plots`` needs matplotlib
(``pip install "transformer[inspect]"``).
"""
