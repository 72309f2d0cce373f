"""Stochastic depth (Huang et al. 2016): in training, a residual branch is dropped for a whole
sample, so that sample's layer is the identity; kept branches are scaled by ``1 / (1 - p)`` so
that the expected output equals the input and evaluation needs no rescaling.

DeiT (Touvron et al. 2021) trains its ViTs with it (rate 0.1), the rate rising linearly with
depth from 0 at the first layer to the rate given at the last (:func:`depth_rates`, timm's rule).

Shape legend: B batch, T positions, D = d_model, N the real positions of a packed batch.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transformer.modules.attention import PackedRows


def depth_rates(rate: float, n_layers: int) -> list[float]:
    """Each layer's drop rate for a stack of ``n_layers``: ``rate · i / (n_layers - 1)`` for
    layer ``i`` (0 at the bottom, ``rate`` at the top; one layer: ``rate``)."""
    if n_layers == 1:
        return [float(rate)]
    return [rate * i / (n_layers - 1) for i in range(n_layers)]


class DropPath(nn.Module):
    """``forward(branch (B, T, D), rows) -> (B, T, D)``: in training, each sample's branch is
    zeroed with probability ``p`` and kept ones are scaled by ``1 / (1 - p)``; at evaluation, or
    with ``p = 0``, the branch itself. Given ``rows`` (``modules.attention.PackedRows``), the
    branch is ``(N, D)``, the batch's real positions, and each keeps its sample's draw."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"drop_path={p!r}: expected a rate with 0 <= rate < 1")
        self.p = float(p)

    def forward(self, branch: Tensor, rows: PackedRows | None = None) -> Tensor:
        if not self.training or self.p == 0.0:
            return branch
        b = branch.size(0) if rows is None else rows.shape[0]
        keep = torch.rand(b, device=branch.device) >= self.p  # (B,)
        scale = keep.to(branch.dtype) / (1 - self.p)  # (B,)
        if rows is not None:  # (B,) -> (B, T) -> (N,): each real position its sample's draw
            scale = rows.pack(scale[:, None].expand(rows.shape))
        return branch * scale.view(-1, *([1] * (branch.dim() - 1)))  # (B|N, ...) * (B|N, 1, ...)

    def extra_repr(self) -> str:
        return f"p={self.p}"


__all__ = ["DropPath", "depth_rates"]
