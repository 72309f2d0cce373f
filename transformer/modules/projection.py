"""The output projection from model width to vocabulary scores.

Shape legend: D = d_model, V vocabulary size.
"""

from __future__ import annotations

from torch import nn


class VocabProjection(nn.Linear):
    """``Linear(D, V, bias=False)``: ``(..., D) -> (..., V)``; its ``weight (V, D)`` may be tied
    to a token embedding.

    A class of its own so that code which treats the vocabulary projection differently (the CPU
    fast paths in ``transformer.accel``) finds it by type, not by attribute name.
    """

    def __init__(self, d_model: int, vocab_size: int, device=None, dtype=None):
        super().__init__(d_model, vocab_size, bias=False, device=device, dtype=dtype)
