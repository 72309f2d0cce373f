"""Attention: the worked example, equality with torch.nn.MultiheadAttention, mask handling."""

import math

import pytest
import torch

from transformer.modules.attention import MultiHeadAttention, causal_mask, merge_masks, scaled_dot_product

X = torch.tensor([[1.0, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]])
W_K = torch.tensor([[0.0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]])
W_Q = torch.tensor([[1.0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]])
W_V = torch.tensor([[0.0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]])


def test_worked_example_unscaled():
    out, w = scaled_dot_product(X @ W_Q, X @ W_K, X @ W_V, scale=False)
    expected = torch.tensor([[1.9366, 6.6831, 1.5951], [2.0000, 7.9640, 0.0540], [1.9997, 7.7599, 0.3584]])
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones(3))


def test_worked_example_scaled():
    out, _ = scaled_dot_product(X @ W_Q, X @ W_K, X @ W_V, scale=True)
    torch.testing.assert_close(out[0], torch.tensor([1.8639, 6.3194, 1.7042]), atol=1e-4, rtol=0)


def test_worked_example_through_single_head_module():
    """A 1-head MultiHeadAttention without bias computes the same mix before W_o."""
    mha = MultiHeadAttention(d_model=4, n_heads=1, bias=False)
    pad = torch.zeros(4, 1)
    with torch.no_grad():  # nn.Linear computes x Wᵀ: store Wᵀ, padding d_k 3 -> 4 with a zero column
        mha.w_q.weight.copy_(torch.cat([W_Q, pad], 1).T)
        mha.w_k.weight.copy_(torch.cat([W_K, pad], 1).T)
        mha.w_v.weight.copy_(torch.cat([W_V, pad], 1).T)
        mha.w_o.weight.copy_(torch.eye(4))
    out, _ = mha(X[None], X[None], X[None])
    # The zero column makes d_head 4, so the module scales by 1/√4 rather than 1/√3.
    ref, _ = scaled_dot_product(X @ W_Q / 2, X @ W_K, X @ W_V, scale=False)
    torch.testing.assert_close(out[0, :, :3], ref, atol=1e-5, rtol=0)


def _pair(d_model=16, n_heads=4):
    ours = MultiHeadAttention(d_model, n_heads)
    ref = torch.nn.MultiheadAttention(d_model, n_heads, batch_first=True)
    with torch.no_grad():
        wq, wk, wv = ref.in_proj_weight.chunk(3)
        bq, bk, bv = ref.in_proj_bias.chunk(3)
        for lin, w, b in ((ours.w_q, wq, bq), (ours.w_k, wk, bk), (ours.w_v, wv, bv)):
            lin.weight.copy_(w)
            lin.bias.copy_(torch.randn_like(b))
            b.copy_(lin.bias)
        ours.w_o.weight.copy_(ref.out_proj.weight)
        ref.out_proj.bias.normal_()
        ours.w_o.bias.copy_(ref.out_proj.bias)
    return ours.eval(), ref.eval()


@pytest.mark.parametrize("need_weights", [False, True])
def test_matches_torch_multihead_attention(need_weights):
    ours, ref = _pair()
    q, kv = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    out, w = ours(q, kv, kv, need_weights=need_weights)
    ref_out, ref_w = ref(q, kv, kv, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_matches_torch_with_padding_and_causal_masks(need_weights):
    ours, ref = _pair()
    x = torch.randn(2, 6, 16)
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    mask = merge_masks(real, causal_mask(6))
    out, w = ours(x, x, x, mask=mask, need_weights=need_weights)
    # torch polarity: True = may NOT attend.
    ref_out, ref_w = ref(x, x, x, key_padding_mask=~real, attn_mask=~causal_mask(6),
                         need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)


def test_fast_and_explicit_paths_agree_with_mask_and_bias():
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(3, 5, 16)
    mask = merge_masks(torch.tensor([[1, 1, 1, 0, 0], [1] * 5, [1, 0, 0, 0, 0]]).bool(), causal_mask(5))
    bias = torch.randn(1, 4, 5, 5)
    fast, none = mha(x, x, x, mask, bias)
    slow, w = mha(x, x, x, mask, bias, need_weights=True)
    assert none is None and w.shape == (3, 4, 5, 5)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)
    # The bias matters: without it the output differs.
    assert not torch.allclose(fast, mha(x, x, x, mask)[0], atol=1e-4)


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_query_gives_zeros_not_nan(need_weights):
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    mask = torch.ones(2, 1, 3, 3, dtype=torch.bool)
    mask[1, :, 1] = False  # query 1 of row 1 may attend to nothing
    mask[0] = False  # every query of row 0
    out, w = mha(x, x, x, mask=mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0], torch.zeros(3, 8))
    assert torch.equal(out[1, 1], torch.zeros(8))
    assert out[1, 0].abs().sum() > 0
    if need_weights:
        assert torch.equal(w[1, :, 1], torch.zeros(2, 3))


def test_project_and_attend_equal_forward():
    mha = MultiHeadAttention(12, 3).eval()
    q_in, kv = torch.randn(2, 4, 12), torch.randn(2, 6, 12)
    q = mha.project_q(q_in)
    k, v = mha.project_kv(kv)
    assert q.shape == (2, 3, 4, 4) and k.shape == v.shape == (2, 3, 6, 4)
    torch.testing.assert_close(mha.attend(q, k, v)[0], mha(q_in, kv, kv)[0])


def test_scores_are_scaled_by_sqrt_d_head():
    q, k, v = torch.randn(1, 2, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 5)
    _, w = scaled_dot_product(q, k, v)
    torch.testing.assert_close(w, torch.softmax(q @ k.transpose(1, 2) / math.sqrt(8), -1))
