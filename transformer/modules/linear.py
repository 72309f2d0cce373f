"""``nn.Linear`` with a faster CPU inference path: oneDNN's matrix product on a prepacked weight.

Shape legend: ``(..., D_in) -> (..., D_out)``; R = the number of input rows (product of the
leading dims).

PyTorch's CPU ``F.linear`` calls MKL's sgemm. On an AMD EPYC (AVX-512) CPU with one thread,
MKL reached ~100 GFLOP/s on decoder-sized products (R = 41-590 rows, 256 <-> 1024 <-> 8000)
while oneDNN, given the same weight reordered once into its blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, what ``torch.compile``'s CPU backend uses), ran
the same fp32 products at 200-230 GFLOP/s. For a single row MKL's matrix-vector path is
faster (16 vs 24 us at 256 -> 1024), so one-row inputs keep ``F.linear``
(``MIN_ROWS``). Results equal ``F.linear``'s up to fp32 summation order (~1e-6 relative).

The fast path runs only at inference on a CPU in fp32 (no autograd: the packed op has no
backward). The packed copy is made on first use and again whenever the weight changes (its
storage or version counter, which an optimiser step or ``load_state_dict`` bumps); it is
not part of the state dict and is dropped when the module is copied or pickled.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Inputs with fewer rows take F.linear (MKL's matrix-vector product wins at one row).
MIN_ROWS = 2

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


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) whose CPU inference runs oneDNN on a
    prepacked copy of the weight; see the module docstring for when and why."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self._packed: Tensor | None = None
        self._packed_key: tuple | None = None

    def _packed_path(self, x: Tensor) -> bool:
        w = self.weight
        return (
            not torch.is_grad_enabled()
            and x.device.type == "cpu"
            and x.dtype == torch.float32
            and w.dtype == torch.float32
            # a weight created under inference_mode has no version counter to watch
            and not w.is_inference()
            and x.numel() >= MIN_ROWS * x.size(-1) > 0
            and onednn_linear_available()
        )

    def packed_weight(self) -> Tensor:
        """The weight in oneDNN's blocked layout (opaque tensor), repacked after any change."""
        w = self.weight
        key = (w.data_ptr(), w._version, w.shape)
        if self._packed is None or self._packed_key != key:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.detach())
            self._packed_key = key
        return self._packed

    def forward(self, x: Tensor) -> Tensor:
        if self._packed_path(x):
            return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight(), self.bias, "none", [], "")
        return self._unpacked(x)

    def _unpacked(self, x: Tensor) -> Tensor:
        """Every case the packed path does not take (training, one row, GPU, other dtypes)."""
        return F.linear(x, self.weight, self.bias)

    def __getstate__(self):
        # oneDNN's opaque tensors cannot be copied or pickled; the copy repacks on first use.
        state = self.__dict__.copy()
        state["_packed"], state["_packed_key"] = None, None
        return state
