"""The number format autoregressive search computes in (``decode.dtype``): fp32, or bf16 weights
and KV cache.

bf16 halves the bytes every decoder step reads (weights, cached keys and values) and, on a CPU
with bf16 instructions (AVX512-BF16, AMX) or a GPU, runs its products at the bf16 rate. The
search itself stays in fp32: the model's ``decode_step`` turns its logits into fp32 before the
log-softmax, beam search recomputes its best candidates' scores in fp32 from the bf16 output
states (``beam._rescored_candidates``: a score rounded to bf16 moves by up to 0.03, enough to
swap near-ties; an ensemble averages its members' rounded probabilities), and beam scores and summed log-probabilities are fp32 (or fp64) tensors, so
ranking decisions are not made on 8-bit mantissas. A CPU without bf16 instructions only emulates them
(oneDNN widens every product back to fp32), which is slower than fp32: it is refused there.

bf16 decoding searches a bf16 copy of the model: the fp32 model is left as it is (the server
keeps one model for several translators; training goes on after a validation decoding).
"""

from __future__ import annotations

import copy
import platform

import torch
from torch import nn

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # the values of DecodeSettings.dtype


def cpu_has_bf16() -> bool:
    """True unless this is an x86 CPU without bf16 instructions (AVX512-BF16 or AMX), where
    oneDNN emulates bf16 products (slower than fp32); other CPUs answer True."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True
    native = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in native if check is not None)


def check_dtype(dtype: str, device: torch.device | str) -> None:
    """A ``ValueError`` naming ``decode.dtype`` for a value other than fp32/bf16, or bf16 on a CPU
    that would emulate it."""
    if dtype not in DTYPES:
        raise ValueError(f"decode.dtype={dtype!r}: expected one of {', '.join(DTYPES)}")
    if dtype == "bf16" and torch.device(device).type == "cpu" and not cpu_has_bf16():
        raise ValueError("decode.dtype=bf16: this CPU has no bf16 instructions (AVX512-BF16 or AMX), so bf16 "
                         "products would be emulated, slower than fp32; set decode.dtype=fp32")


def compute_dtype(model) -> torch.dtype:
    """The format ``model`` computes in: its ``dtype`` (a compiled wrapper's), else its first
    parameter's; fp32 for a model without parameters."""
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype
    first = next(model.parameters(), None) if isinstance(model, nn.Module) else None
    return torch.float32 if first is None else first.dtype


def decoding_model(model: nn.Module, dtype: str) -> nn.Module:
    """``model`` itself for fp32; for bf16 a copy with every floating-point weight and buffer in
    bf16 (its KV caches follow: they hold the keys and values its layers compute). Refused where
    bf16 would be emulated (:func:`check_dtype`) or with int8 layers (``quantize=int8``)."""
    if dtype == "fp32":
        return model
    if any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        raise ValueError(f"decode.dtype={dtype} and quantize=int8 do not combine: choose one")
    first = next(model.parameters(), None)
    check_dtype(dtype, first.device if first is not None else "cpu")
    return copy.deepcopy(model).to(DTYPES[dtype])


__all__ = ["DTYPES", "check_dtype", "compute_dtype", "cpu_has_bf16", "decoding_model"]
