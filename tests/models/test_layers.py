"""Layers: both norm arrangements, cached decoder layer, feed-forward activations."""

import pytest
import torch
from torch import nn

from transformer.models.transformer import (
    FeedForward,
    PostNorm,
    PostNormDecoderLayer,
    PostNormEncoderLayer,
    PreNorm,
    PreNormDecoderLayer,
    PreNormEncoderLayer,
)
from transformer.modules.attention import causal_mask, merge_masks
from transformer.modules.kv_cache import KVCache


def test_pre_and_post_norm_encoder_layers_differ_with_same_weights():
    torch.manual_seed(0)
    post = PostNormEncoderLayer(16, 2, 32, dropout=0.0).eval()
    pre = PreNormEncoderLayer(16, 2, 32, dropout=0.0).eval()
    pre.load_state_dict(post.state_dict())
    x = torch.randn(2, 5, 16)
    out_post, _ = post(x)
    out_pre, _ = pre(x)
    assert not torch.allclose(out_post, out_pre, atol=1e-3)
    # Post-norm ends in a LayerNorm: zero mean, unit variance per position.
    torch.testing.assert_close(out_post.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)


def test_arrangements_build_their_layers_and_final_norm():
    assert isinstance(PostNorm().encoder_layer(8, 2, 16, 0.0, "relu"), PostNormEncoderLayer)
    assert isinstance(PreNorm().decoder_layer(8, 2, 16, 0.0, "relu"), PreNormDecoderLayer)
    assert isinstance(PostNorm().final_norm(8), nn.Identity)
    assert isinstance(PreNorm().final_norm(8), nn.LayerNorm)


@pytest.mark.parametrize("cls", [PostNormDecoderLayer, PreNormDecoderLayer])
def test_decoder_layer_incremental_with_cache_equals_full(cls):
    layer = cls(16, 4, 32, dropout=0.0).eval()
    x, memory = torch.randn(2, 6, 16), torch.randn(2, 4, 16)
    src_real = torch.tensor([[True] * 4, [True, True, False, False]])
    cross = merge_masks(src_real)
    full, _ = layer(x, memory, merge_masks(None, causal_mask(6)), cross)
    cache = KVCache.empty(1)
    cache.set_cross(0, *layer.cross_attn.project_kv(memory))
    steps = []
    for t in range(6):
        mask = merge_masks(None, causal_mask(1, t + 1))
        out, _ = layer(x[:, t : t + 1], None, mask, cross, cache=cache, layer_idx=0)
        steps.append(out)
    assert cache.length == 6
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)


def test_feedforward_activations_differ_and_reject_unknown():
    torch.manual_seed(0)
    relu = FeedForward(8, 16, activation="relu")
    gelu = FeedForward(8, 16, activation="gelu")
    gelu.load_state_dict(relu.state_dict())
    x = torch.randn(3, 8)
    assert not torch.allclose(relu(x), gelu(x))
    with pytest.raises(ValueError):
        FeedForward(8, 16, activation="tanh")


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feedforward_output_and_gradients_match_the_formula(activation):
    # FFN(x) = W_2 act(W_1 x + b_1) + b_2, with autograd and (ReLU in place) without.
    torch.manual_seed(0)
    ffn = FeedForward(8, 16, activation=activation)
    x = torch.randn(2, 3, 8, requires_grad=True)
    act = torch.relu if activation == "relu" else torch.nn.functional.gelu
    w1, b1, w2, b2 = ffn.w_1.weight, ffn.w_1.bias, ffn.w_2.weight, ffn.w_2.bias
    expected = act(x @ w1.T + b1) @ w2.T + b2
    out = ffn(x)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.square().sum(), (x, w1, b1, w2, b2))
    want = torch.autograd.grad(expected.square().sum(), (x, w1, b1, w2, b2))
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w)
    with torch.inference_mode():
        torch.testing.assert_close(ffn(x), expected.detach())
