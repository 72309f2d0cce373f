"""Hardware-specific fast paths, kept out of the reference modules and applied by one transform.

The modules in ``transformer/modules`` are plain PyTorch (``nn.Linear``, ``nn.Dropout``,
``F.scaled_dot_product_attention``), which is what ``torch.compile`` and a GPU want.
``apply(model, "cpu")`` turns a built model's modules, in place, into subclasses that run faster
on a CPU in eager mode:

* ``nn.Linear`` -> ``accel.linear.Linear``: fp32 products on oneDNN with a packed weight;
* the decoders' ``output_proj`` -> ``accel.vocab_projection.VocabProjection``: the same, plus a
  contiguous transposed weight for one-row products (greedy search on one sentence);
* ``nn.Dropout`` -> ``accel.dropout.Dropout``: a mask from 16-bit uniforms (CPU only);
* ``MultiHeadAttention`` -> ``accel.attention.CPUMultiHeadAttention``: no all-True masks, two
  matmuls for one-query decoding, the faster dropout mask on attention weights.

Only each module's class changes, never its tensors: parameters, buffers, state-dict keys and
tied weights stay as they are, and ``apply(model, "none")`` gives the plain classes back. Every
fast path equals the plain module (``tests/accel/``) and falls back to it off the CPU, in other
dtypes and under autocast. Which settings measure fastest: BENCHMARKS.md ("CPU fast paths and
torch.compile").
"""

from __future__ import annotations

from torch import nn

from transformer.accel.attention import CPUMultiHeadAttention
from transformer.accel.dropout import Dropout
from transformer.accel.linear import Linear
from transformer.accel.vocab_projection import VocabProjection
from transformer.modules.attention import MultiHeadAttention

BACKENDS = ("none", "cpu")


def _fast_class(name: str, base: type) -> type | None:
    """The CPU class for a module of exact class ``base`` named ``name``, or None."""
    if base is nn.Linear:
        return VocabProjection if name.rsplit(".", 1)[-1] == "output_proj" else Linear
    return {nn.Dropout: Dropout, MultiHeadAttention: CPUMultiHeadAttention}.get(base)


def apply(model: nn.Module, backend: str = "cpu") -> nn.Module:
    """Switch ``model``'s modules to ``backend``'s fast classes in place (``"none"``: the plain
    ones) and return it. Unknown backends raise ``ValueError``."""
    if backend not in BACKENDS:
        raise ValueError(f"accel must be one of {BACKENDS}, got {backend!r}")
    for name, module in model.named_modules():
        base = getattr(type(module), "accel_base", type(module))
        module.__class__ = base
        fast = _fast_class(name, base) if backend == "cpu" else None
        if fast is not None:
            module.__class__ = fast
            fast.prepare(module)
    return model


def resolve(backend: str | None, device: str, compiled: bool = False) -> str:
    """The backend for ``backend`` (``"auto"``/None: ``"cpu"`` for an eager model on a CPU,
    else ``"none"``; a compiled model wants the plain modules)."""
    if backend in (None, "auto"):
        return "cpu" if str(device).startswith("cpu") and not compiled else "none"
    if backend not in BACKENDS:
        raise ValueError(f"accel must be one of {BACKENDS + ('auto',)}, got {backend!r}")
    return backend


__all__ = ["BACKENDS", "Dropout", "Linear", "VocabProjection", "apply", "resolve"]
