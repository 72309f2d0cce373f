"""Position-wise feed-forward network (Vaswani et al. 2017, sec. 3.3)."""

from __future__ import annotations

from typing import Callable

import torch.nn.functional as F
from torch import Tensor, nn


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2, applied to each position alike.

    Shapes: ``(B, T, D) -> (B, T, D)`` through ``(B, T, d_ff)``.
    ``activation`` is ``"relu"`` (the paper) or ``"gelu"`` (Hendrycks & Gimpel 2016, used by BERT/GPT).
    Dropout after the activation follows tensor2tensor's ``relu_dropout``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = ACTIVATIONS[activation]
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.w_1(x))  # (B, T, d_ff)
        return self.w_2(self.dropout(h))  # (B, T, D)
