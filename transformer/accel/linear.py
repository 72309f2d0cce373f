"""``nn.Linear`` whose fp32 CPU products run on oneDNN instead of MKL (inference and training).

Shape legend: ``(..., D_in) -> (..., D_out)``; R = the number of input rows (product of the
leading dims).

PyTorch's CPU ``F.linear`` calls MKL's sgemm. On an AMD EPYC (AVX-512) CPU with one thread,
MKL reached ~100 GFLOP/s on decoder-sized products (R = 41-590 rows, 256 <-> 1024 <-> 8000)
while oneDNN, given the same weight reordered once into its blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, what ``torch.compile``'s CPU backend uses), ran
the same fp32 products at 200-230 GFLOP/s. For a single row MKL's matrix-vector path is
faster (16 vs 24 us at 256 -> 1024), so one-row inputs keep ``F.linear``
(``MIN_ROWS``). Results equal ``F.linear``'s up to fp32 summation order (~1e-6 relative).

At inference (no autograd) on a CPU in fp32, the packed copy is made on first use and again
whenever the weight changes (its storage or version counter, which an optimiser step or
``load_state_dict`` bumps); it is not part of the state dict and is dropped when the module
is copied or pickled.

Training on a CPU in fp32 goes through ``_OneDNNLinear``, an autograd function: the forward
product and the input gradient ``dY W`` run on oneDNN with the weight packed afresh at each
step (it changes every update; packing costs a copy of the weight), the weight gradient
``dYᵀ X`` stays an MKL product (oneDNN needs a repacked ``X`` there, which cost more than it
gained). Forward + backward of one layer at 4096 rows: 1.35-1.55x faster than ``F.linear``.
The two packs a layer costs each step are paid back only by products of many rows: below
``MIN_TRAIN_ROWS`` (2048) the packed path was level with ``F.linear`` or slower on a 2-core AMD
EPYC (Zen 4), up to 3.5x at 128-256 rows of 144 -> 576, so smaller inputs train on
``F.linear`` (BENCHMARKS.md: the speech recipes' batches of 60-500 rows).
Under CPU autocast (bf16) and on other devices everything is ``F.linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Inputs with fewer rows take F.linear (MKL's matrix-vector product wins at one row).
MIN_ROWS = 2
# Training inputs with fewer rows take F.linear: two packs of the weight a step cost more than
# oneDNN's faster product gains below it (module docstring).
MIN_TRAIN_ROWS = 2048

_onednn_ok: bool | None = None


def onednn_linear_available() -> bool:
    """True where this torch build can run oneDNN's packed linear (checked once, by running it)."""
    global _onednn_ok
    if _onednn_ok is None:
        try:
            w = torch.ones(3, 2)
            packed = torch.ops.mkldnn._reorder_linear_weight(w)
            out = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 2), packed, None, "none", [], "")
            _onednn_ok = bool(torch.backends.mkldnn.is_available()) and torch.equal(out, torch.full((2, 3), 2.0))
        except (AttributeError, RuntimeError, NotImplementedError):
            _onednn_ok = False
    return _onednn_ok


def _pack(weight: Tensor) -> Tensor:
    """``(D_out, D_in)`` weight -> oneDNN's blocked layout (an opaque tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous())


def _onednn_product(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """``x (..., D_in) @ Wᵀ + b -> (..., D_out)`` with a packed ``W``."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """``F.linear`` for training on a CPU: oneDNN forward and input gradient, MKL weight gradient."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn_product(x, _pack(weight), bias)  # (..., D_out)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        g = grad_out.reshape(-1, grad_out.size(-1))  # (R, D_out)
        if ctx.needs_input_grad[0]:
            grad_x = _onednn_product(grad_out, _pack(weight.t()), None)  # (..., D_out) @ (D_out, D_in)
        if ctx.needs_input_grad[1]:
            grad_w = g.t() @ x.reshape(-1, x.size(-1))  # (D_out, R) @ (R, D_in) -> (D_out, D_in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)  # (D_out,)
        return grad_x, grad_w, grad_b


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) whose fp32 CPU products run on oneDNN:
    at inference on a cached prepacked weight, in training through ``_OneDNNLinear``; see the
    module docstring for when and why."""

    plain = nn.Linear
    cache_attrs: tuple[str, ...] = ("_packed", "_packed_key")

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.prepare(self)

    @staticmethod
    def prepare(module: nn.Linear) -> None:
        """Give a module replaced by this class (``accel.apply``) its empty packed-weight cache."""
        module._packed = None
        module._packed_key = None

    def _onednn_eligible(self, x: Tensor) -> bool:
        """fp32 on a CPU, no autocast, at least ``MIN_ROWS`` rows, and a build that has the op.

        Written for speed (it runs before every product; ~1 us): the cheap tensor checks
        first, the module-global availability flag read directly once it is known."""
        return (
            x.is_cpu
            and x.dtype is torch.float32
            and x.numel() >= MIN_ROWS * x.size(-1) > 0
            and self.weight.dtype is torch.float32
            and (_onednn_ok if _onednn_ok is not None else onednn_linear_available())
            and not torch.is_autocast_enabled("cpu")
        )

    def packed_weight(self) -> Tensor:
        """The weight in oneDNN's blocked layout (opaque tensor), repacked after any change."""
        w = self.weight
        key = (w.data_ptr(), w._version, w.shape)
        if self._packed is None or self._packed_key != key:
            self._packed = _pack(w)
            self._packed_key = key
        return self._packed

    def forward(self, x: Tensor) -> Tensor:
        if self._onednn_eligible(x):
            if not torch.is_grad_enabled():
                # a weight created under inference_mode has no version counter to watch
                if not self.weight.is_inference():
                    return _onednn_product(x, self.packed_weight(), self.bias)
            elif (x.requires_grad or self.weight.requires_grad) and x.numel() >= MIN_TRAIN_ROWS * x.size(-1):
                return _OneDNNLinear.apply(x, self.weight, self.bias)
        return self._unpacked(x)

    def _unpacked(self, x: Tensor) -> Tensor:
        """Every case oneDNN does not take (one row, GPU, other dtypes, autocast)."""
        return F.linear(x, self.weight, self.bias)

    def __getstate__(self):
        # oneDNN's opaque tensors cannot be copied or pickled; the copy repacks on first use.
        state = self.__dict__.copy()
        state["_packed"], state["_packed_key"] = None, None
        return state
