"""A decoding step's attention (one query per row, no mask, CPU) takes an in-place path of its
own; it must give exactly what the written-out product gives, for a cache's strided keys and
values and for an additive source bias."""

import pytest
import torch

from transformer.modules.attention import MultiHeadAttention, scaled_dot_product


@pytest.mark.parametrize("bias", ["none", "padding", "relative"])
def test_one_query_step_equals_the_written_out_product(bias):
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    q = torch.randn(6, 4, 1, 4)
    buf_k, buf_v = torch.randn(6, 4, 40, 4), torch.randn(6, 4, 40, 4)  # a cache's buffers, 17 steps filled
    k, v = buf_k[:, :, :17], buf_v[:, :, :17]
    attn_bias = {"none": None, "padding": torch.zeros(6, 1, 1, 17).index_fill(-1, torch.arange(12, 17), float("-inf")),
                 "relative": torch.randn(1, 4, 1, 17)}[bias]
    out, weights = attn.attend(q, k, v, None, attn_bias)
    assert weights is None
    ctx, _ = scaled_dot_product(q, k, v, True, None, attn_bias)
    assert torch.equal(out, attn.w_o(ctx.transpose(1, 2).reshape(6, 1, 16)))
    with_weights, w = attn.attend(q, k, v, None, attn_bias, need_weights=True)
    assert torch.equal(out, with_weights) and w.shape == (6, 4, 1, 17)
