"""int8 dynamic quantization (``accel.quantize``): every linear layer becomes int8, the model it
came from is untouched, and the outputs stay close to fp32's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer import accel
from transformer.accel.quantize import apply_quantize, check_quantize, float_weight, int8_dynamic, is_quantized
from transformer.models.ctc import CTCConfig, CTCNonAutoregressiveModel


def tiny_ctc(seed: int = 0) -> CTCNonAutoregressiveModel:
    torch.manual_seed(seed)
    return CTCNonAutoregressiveModel(CTCConfig(vocab_size=40, pad_id=0, blank_id=4, d_model=32, n_heads=4,
                                               n_encoder_layers=2, n_decoder_layers=1, d_ff=64, dropout=0.0)).eval()


def linears(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, nn.Linear) or is_quantized(m)]


def test_every_linear_layer_becomes_int8_and_the_original_stays_fp32():
    model = tiny_ctc()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = int8_dynamic(model)
    layers = linears(q)
    assert layers and all(is_quantized(m) for m in layers)
    assert is_quantized(q.decoder.output_proj)  # the tied vocabulary projection too
    assert not any(is_quantized(m) for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_int8_scores_stay_close_to_fp32_and_keep_most_argmaxes():
    model = tiny_ctc()
    src = torch.randint(5, 40, (3, 7))
    with torch.inference_mode():
        ref, _ = model(src)
        out, _ = int8_dynamic(model)(src)
    assert out.shape == ref.shape
    assert not torch.equal(out, ref)  # int8 rounding changes the numbers...
    assert torch.allclose(out, ref, atol=0.15 * ref.abs().max().item())  # ...a little
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean() > 0.8


def test_quantized_weights_dequantize_to_the_fp32_ones():
    model = tiny_ctc()
    q = int8_dynamic(model)
    w, wq = float_weight(model.decoder.output_proj), float_weight(q.decoder.output_proj)
    scale = w.abs().max() / 127
    assert torch.allclose(w, wq, atol=scale.item() * 1.01)


def test_apply_quantize_keeps_the_cpu_fast_attention_and_none_is_identity():
    model = accel.apply(tiny_ctc(), "cpu")
    assert apply_quantize(model, "none") is model and apply_quantize(model, None) is model
    q = apply_quantize(model, "int8", "cpu")
    kinds = {type(m).__name__ for m in q.modules()}
    assert "CPUMultiHeadAttention" in kinds
    assert all(is_quantized(m) for m in linears(q))


@pytest.mark.parametrize("value, device", [("int4", "cpu"), ("yes", "cpu"), ("int8", "cuda")])
def test_bad_quantize_settings_name_the_key(value, device):
    with pytest.raises(ValueError, match="quantize="):
        check_quantize(value, device)
