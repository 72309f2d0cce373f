"""Adversarial training on the encoder's input vectors (Goodfellow et al. 2015; for text,
Miyato et al. 2017; for taggers, Yasunaga et al. 2018), shared by the tagging and the
classification tasks.

A training step scores its batch once through an ``input_hook`` that keeps the encoder's input
vectors ``x`` (:class:`InputCapture`), then again with ``x + r``, where ``r`` is
:func:`adversarial_shift`: the direction in which the loss rises fastest, scaled per sentence to
a fraction of that sentence's own input norm. The second loss is added to the first.

Shape legend: B sentences, L input positions (pieces or words), D = d_model.
"""

from __future__ import annotations

import torch
from torch import Tensor


class InputCapture:
    """An ``input_hook`` that keeps the vectors it is given (``.x``) and passes them on."""

    def __init__(self) -> None:
        self.x: Tensor | None = None

    def __call__(self, x: Tensor) -> Tensor:
        self.x = x
        return x


def adversarial_shift(objective: Tensor, x: Tensor, eps: float) -> Tensor:
    """``r (B, L, D)``: ``eps * |x_b| * g_b / |g_b|`` for each sentence ``b``, where
    ``g = d objective / d x``; a constant for autograd (the graph of ``objective`` is kept for
    its own backward pass)."""
    (g,) = torch.autograd.grad(objective, x, retain_graph=True)  # (B, L, D)
    dims = tuple(range(1, g.dim()))
    scale = x.detach().norm(dim=dims, keepdim=True) / g.norm(dim=dims, keepdim=True).clamp(min=1e-12)
    return eps * scale * g


def check_eps(eps: float) -> None:
    """``task.adversarial_eps`` is a fraction >= 0 (0 = off), else a ``ValueError`` names it."""
    if not eps >= 0:
        raise ValueError(f"task.adversarial_eps={eps!r}: expected a fraction >= 0 (0 = off)")


__all__ = ["InputCapture", "adversarial_shift", "check_eps"]
