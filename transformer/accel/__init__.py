"""Hardware-specific fast paths, kept out of the reference modules and applied by one transform,
only where asked for: ``accel=cpu`` on a command line or in a recipe file (the default,
``accel=none``, runs the plain modules on every device).

The modules in ``transformer/modules`` are plain PyTorch (``nn.Linear``, ``nn.Dropout``,
``F.scaled_dot_product_attention``), which is what ``torch.compile`` and a GPU want.
``apply(model, "cpu")`` replaces a built model's modules, chosen by their exact type, with
subclasses that run faster on a CPU in eager mode:

* ``nn.Linear`` -> ``accel.linear.Linear``: fp32 products on oneDNN with a packed weight;
* ``models.transformer.VocabProjection`` -> ``accel.vocab_projection.VocabProjection``: the same,
  plus a contiguous transposed weight for one-row products (greedy search on one sentence);
* ``nn.Dropout`` -> ``accel.dropout.Dropout``: a mask from 16-bit uniforms (CPU only);
* ``MultiHeadAttention`` -> ``accel.attention.CPUMultiHeadAttention``: no all-True masks, two
  matmuls for one-query decoding, the faster dropout mask on attention weights.

A replacement is a new module holding the same ``Parameter`` and buffer objects (as
``torch.ao``'s ``swap_module`` does), so state-dict keys, optimiser references and tied weights
stay as they are. ``apply(model, "none")`` replaces every fast module with a new plain one that
holds the same tensors and none of the fast path's caches: it deep-copies, pickles and compiles
like a freshly built model. Every fast path equals the plain module (``tests/accel/``) and falls
back to it off the CPU, in other dtypes and under autocast. Which settings measure fastest:
BENCHMARKS.md ("Training and decoding speed on the CPU, against the chip's limit").
"""

from __future__ import annotations

import copy

from torch import nn

from transformer.accel.attention import CPUMultiHeadAttention
from transformer.accel.dropout import Dropout
from transformer.accel.linear import Linear
from transformer.accel.vocab_projection import VocabProjection
from transformer.models.transformer import VocabProjection as PlainVocabProjection
from transformer.modules.attention import MultiHeadAttention

BACKENDS = ("none", "cpu")

# exact plain type -> its CPU fast class; each fast class names its plain type as ``plain``
CPU_CLASSES: dict[type, type] = {
    nn.Linear: Linear,
    PlainVocabProjection: VocabProjection,
    nn.Dropout: Dropout,
    MultiHeadAttention: CPUMultiHeadAttention,
}


def is_fast(module: nn.Module) -> bool:
    """Whether ``module`` is one of the CPU fast classes (``apply(..., "cpu")`` put it there)."""
    return type(module) in _FAST


_FAST = frozenset(CPU_CLASSES.values())


def _rebuilt(module: nn.Module, cls: type, drop: tuple[str, ...] = ()) -> nn.Module:
    """A new ``cls`` instance holding ``module``'s parameters, buffers, children and settings
    (the same objects, in containers of its own), without the attributes named in ``drop``."""
    new = cls.__new__(cls)
    for key, value in module.__dict__.items():
        if key not in drop:
            new.__dict__[key] = copy.copy(value) if isinstance(value, (dict, set)) else value
    return new


def _replacement(module: nn.Module, backend: str) -> nn.Module:
    """``module`` as ``backend`` wants it: a new module, or ``module`` itself if it is already."""
    if is_fast(module):  # back to its plain type first
        module = _rebuilt(module, type(module).plain, drop=type(module).cache_attrs)
    fast = CPU_CLASSES.get(type(module)) if backend == "cpu" else None
    if fast is None:
        return module
    new = _rebuilt(module, fast)
    fast.prepare(new)
    return new


def apply(model: nn.Module, backend: str = "cpu") -> nn.Module:
    """Replace ``model``'s modules with ``backend``'s classes (``"cpu"``: the fast ones,
    ``"none"``: the plain ones) and return it; use the returned module, since ``model`` itself
    is replaced when it is one of those types. Unknown backends raise ``ValueError``."""
    check(backend)
    for name, child in list(model.named_children()):
        new = apply(child, backend)
        if new is not child:
            setattr(model, name, new)
    return _replacement(model, backend)


def check(backend: object) -> str:
    """``backend`` when it names one (``none``: the plain modules, ``cpu``: the CPU fast paths),
    else a ``ValueError`` naming the choices. Nothing is chosen for the user: the fast path
    runs only where a command line or a recipe asks for ``accel=cpu``."""
    if backend not in BACKENDS:
        raise ValueError(f"accel={backend!r}: expected one of {', '.join(BACKENDS)} "
                         f"(none: the plain modules; cpu: the CPU fast paths)")
    return backend


__all__ = ["BACKENDS", "CPU_CLASSES", "Dropout", "Linear", "VocabProjection", "apply", "check", "is_fast"]
