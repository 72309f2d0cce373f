"""What a model's positional encoding holds, as arrays ready to plot or save.

Shape legend: P positions, D = d_model, H heads.

* absolute encodings (sinusoidal, learned): the table ``(P, D)`` added to the embeddings, and
  the cosine similarity of every pair of positions ``(P, P)``: for the sinusoid it depends only
  on the distance (Vaswani et al. 2017, sec. 3.5), so nearby positions resemble each other;
* T5 relative buckets: the learned bias per head for every query/key pair ``(H, P, P)``, and the
  bias per head against the distance ``key - query``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
    sinusoid_table,
)


def cosine_similarity_matrix(table: torch.Tensor) -> torch.Tensor:
    """``(P, D)`` -> ``(P, P)`` cosine similarity of every pair of rows."""
    unit = torch.nn.functional.normalize(table.double(), dim=-1)  # (P, D)
    return (unit @ unit.T).float()  # (P, D) @ (D, P) -> (P, P)


@torch.no_grad()
def position_arrays(positional: nn.Module, n_positions: int) -> dict[str, np.ndarray]:
    """Arrays describing ``positional`` over its first ``n_positions`` positions.

    Absolute: ``{"table": (P, D), "similarity": (P, P)}``. Relative: ``{"bias": (H, P, P),
    "bias_by_distance": (H, 2P - 1), "distances": (2P - 1,)}``. A learned table holds at most
    its ``max_len`` positions. ``ValueError`` for a model without positional information.
    """
    if isinstance(positional, SinusoidalPositionalEncoding):
        table = sinusoid_table(n_positions, positional.d_model)
    elif isinstance(positional, LearnedPositionalEncoding):
        table = positional.embedding.weight[: min(n_positions, positional.max_len)].float().cpu()
    elif isinstance(positional, RelativePositionBias):
        bias = positional.attention_bias(n_positions, n_positions)[0].float().cpu()  # (H, P, P)
        # distance d = key - query: read it off row P-1 (d <= 0) and row 0 (d >= 0)
        by_distance = torch.cat([bias[:, -1, :], bias[:, 0, 1:]], dim=-1)  # (H, 2P - 1)
        distances = np.arange(-(n_positions - 1), n_positions)
        return {"bias": bias.numpy(), "bias_by_distance": by_distance.numpy(), "distances": distances}
    elif isinstance(positional, NoPositionalEncoding):
        raise ValueError("this model has no positional encoding (NoPositionalEncoding): nothing to show")
    else:
        raise ValueError(f"unknown positional encoding {type(positional).__name__}")
    return {"table": table.numpy(), "similarity": cosine_similarity_matrix(table).numpy()}
