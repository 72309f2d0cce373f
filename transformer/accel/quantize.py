"""int8 dynamic quantization for CPU inference: the one lossy fast path, chosen by ``quantize=int8``.

Every ``nn.Linear`` of the model (the vocabulary projection included) becomes
``torch.ao``'s dynamically quantized linear layer: weights stored as int8 once, each input
quantized to int8 on the fly, products on the CPU's int8 kernels (fbgemm/oneDNN on x86). The
outputs differ from fp32 by the rounding, so a quantized model is measured like a new system
(BLEU and speed, BENCHMARKS.md), never assumed equal. Attention scores, softmax, layer norms and
embeddings stay fp32. Each input's int8 scale comes from the whole tensor, so a sentence's output
can change with the sentences batched beside it (the CTC student's test BLEU was 27.35 decoded in
4096-token batches, 27.16 in batches of 64 sentences).

``torch.ao``'s eager quantization is deprecated in favour of ``torchao`` but still ships with
torch; its warnings are silenced here, and the function fails loudly when it is gone.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

QUANTIZE = ("none", "int8")


def _plain_linears(model: nn.Module) -> nn.Module:
    """``model`` with each ``nn.Linear`` subclass (the vocabulary projection) replaced by an
    ``nn.Linear`` holding the same tensors, which is the type the quantizer converts."""
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear) and type(child) is not nn.Linear:
            plain = nn.Linear.__new__(nn.Linear)
            nn.Module.__init__(plain)
            plain.in_features, plain.out_features = child.in_features, child.out_features
            plain.weight, plain.bias = child.weight, child.bias
            setattr(model, name, plain)
        else:
            _plain_linears(child)
    return model


def int8_dynamic(model: nn.Module) -> nn.Module:
    """A copy of ``model`` (eval mode, CPU) whose linear layers compute in int8 (module
    docstring); ``model`` itself is unchanged. Plain modules only: apply the CPU fast paths'
    ``accel.apply(model, "none")`` first if they are on."""
    from torch.ao.quantization import quantize_dynamic

    plain = _plain_linears(copy.deepcopy(model).cpu().eval())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        return quantize_dynamic(plain, {nn.Linear}, dtype=torch.qint8)


def is_quantized(module: nn.Module) -> bool:
    """Whether ``module`` is a dynamically quantized linear layer (its ``weight`` is a method)."""
    return callable(getattr(module, "weight", None)) and not isinstance(module, nn.Linear)


def float_weight(module: nn.Module) -> torch.Tensor:
    """A linear layer's ``(out, in)`` weight in floating point (dequantized if quantized)."""
    return module.weight().dequantize() if is_quantized(module) else module.weight


def check_quantize(quantize: str | None, device: str) -> str:
    """``quantize`` (None means ``none``), checked against :data:`QUANTIZE` and the device."""
    quantize = quantize or "none"
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize={quantize!r}: expected one of {', '.join(QUANTIZE)}")
    if quantize != "none" and not str(device).startswith("cpu"):
        raise ValueError(f"quantize={quantize}: int8 kernels run on a CPU only (device={device})")
    return quantize


def apply_quantize(model: nn.Module, quantize: str | None, backend: str = "none") -> nn.Module:
    """``model`` as ``quantize`` (``none``/None or ``int8``) wants it, then with the ``accel``
    ``backend``'s fast paths on the modules that stay fp32 (attention, dropout)."""
    from transformer import accel

    if check_quantize(quantize, "cpu") == "none":
        return model
    return accel.apply(int8_dynamic(accel.apply(model, "none")), backend)
