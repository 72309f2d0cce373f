"""Layers: the norm_first switch (each placement against its formula), the encoder layer's
residual / feed-forward / LayerNorm switches (each against its formula, down to a graph attention
layer), the stacks' final norm, cached decoder layer, feed-forward activations."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer.models.transformer import DecoderLayer, EncoderLayer, FeedForward, StackConfig, TransformerEncoder
from transformer.modules.attention import causal_mask, merge_masks
from transformer.modules.kv_cache import KVCache


def _layer(cls, norm_first: bool):
    """A layer without dropout whose LayerNorms have distinct random weights, so that using one
    norm in another's place shows."""
    torch.manual_seed(0)
    layer = cls(16, 2, 32, dropout=0.0, norm_first=norm_first).eval()
    with torch.no_grad():
        for m in layer.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.3)
                m.bias.normal_(0.0, 0.3)
    return layer


def _ln(norm: nn.LayerNorm, x):
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_its_formula(norm_first):
    layer = _layer(EncoderLayer, norm_first)
    x = torch.randn(2, 5, 16)

    def attn(h):
        return layer.self_attn(h, h, h)[0]

    if norm_first:  # x + Sublayer(LN(x)) (Xiong et al. 2020)
        h = x + attn(_ln(layer.norm_1, x))
        want = h + layer.ffn(_ln(layer.norm_2, h))
    else:  # LN(x + Sublayer(x)) (Vaswani et al. 2017)
        h = _ln(layer.norm_1, x + attn(x))
        want = _ln(layer.norm_2, h + layer.ffn(h))
    torch.testing.assert_close(layer(x)[0], want)


@pytest.mark.parametrize("norm_first", [False, True])
def test_an_encoder_layer_without_residuals_matches_its_formula(norm_first):
    torch.manual_seed(0)
    full = _layer(EncoderLayer, norm_first)
    layer = EncoderLayer(16, 2, 32, dropout=0.0, norm_first=norm_first, residual=False).eval()
    layer.load_state_dict(full.state_dict())  # the same weights: only the residual paths differ
    x = torch.randn(2, 5, 16)

    def attn(h):
        return layer.self_attn(h, h, h)[0]

    if norm_first:  # Sublayer(LN(x)), twice
        h = attn(_ln(layer.norm_1, x))
        want = layer.ffn(_ln(layer.norm_2, h))
    else:  # LN(Sublayer(x)), twice
        h = _ln(layer.norm_1, attn(x))
        want = _ln(layer.norm_2, layer.ffn(h))
    torch.testing.assert_close(layer(x)[0], want)
    assert not torch.allclose(layer(x)[0], full(x)[0])


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_graph_attention_layer_is_attention_then_its_activation(norm_first):
    # residual, feed_forward and layer_norm off: ELU(attention(x)), a GAT layer (Velickovic et al.
    # 2018, eq. 5), whatever norm_first says; no FFN or LayerNorm weights are left.
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0, activation="elu", norm_first=norm_first, residual=False,
                         feed_forward=False, layer_norm=False).eval()
    assert layer.ffn is None and not any(isinstance(m, nn.LayerNorm) for m in layer.modules())
    x = torch.randn(2, 5, 16)
    mask = merge_masks(None, causal_mask(5))
    torch.testing.assert_close(layer(x, mask)[0], F.elu(layer.self_attn(x, x, x, mask)[0]))
    # with the residual kept, the activation follows the sum: ELU(x + attention(x))
    kept = EncoderLayer(16, 2, 32, dropout=0.0, activation="elu", norm_first=norm_first, feed_forward=False,
                        layer_norm=False).eval()
    kept.load_state_dict(layer.state_dict())
    torch.testing.assert_close(kept(x, mask)[0], F.elu(x + layer.self_attn(x, x, x, mask)[0]))


def test_a_stack_without_layer_norms_has_no_final_norm():
    cfg = StackConfig(vocab_size=10, pad_id=0, d_model=16, n_heads=2, d_ff=32, norm_first=True)
    assert isinstance(TransformerEncoder(cfg, 2).final_norm, nn.LayerNorm)
    stack = TransformerEncoder(cfg, 2, layer_norm=False)
    assert not any(isinstance(m, nn.LayerNorm) for m in stack.modules())


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_its_formula(norm_first):
    layer = _layer(DecoderLayer, norm_first)
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    causal = merge_masks(None, causal_mask(4))

    def self_attn(h):
        return layer.self_attn(h, h, h, causal)[0]

    def cross_attn(h):
        return layer.cross_attn(h, memory, memory)[0]

    if norm_first:
        h = x + self_attn(_ln(layer.norm_1, x))
        h = h + cross_attn(_ln(layer.norm_2, h))
        want = h + layer.ffn(_ln(layer.norm_3, h))
    else:
        h = _ln(layer.norm_1, x + self_attn(x))
        h = _ln(layer.norm_2, h + cross_attn(h))
        want = _ln(layer.norm_3, h + layer.ffn(h))
    torch.testing.assert_close(layer(x, memory, causal)[0], want)


@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
def test_pre_and_post_norm_share_weights_and_differ(cls):
    post, pre = _layer(cls, False), _layer(cls, True)
    assert list(post.state_dict()) == list(pre.state_dict())  # checkpoints load either way
    pre.load_state_dict(post.state_dict())
    x = torch.randn(2, 5, 16)
    args = (x,) if cls is EncoderLayer else (x, torch.randn(2, 3, 16))
    assert not torch.allclose(post(*args)[0], pre(*args)[0], atol=1e-3)


def test_only_a_pre_norm_stack_ends_in_a_layer_norm():
    stacks = {nf: TransformerEncoder(StackConfig(vocab_size=10, pad_id=0, d_model=8, n_heads=2, d_ff=16,
                                                 norm_first=nf), 1) for nf in (False, True)}
    assert isinstance(stacks[True].final_norm, nn.LayerNorm) and isinstance(stacks[False].final_norm, nn.Identity)
    extra = set(stacks[True].state_dict()) - set(stacks[False].state_dict())
    assert extra == {"final_norm.weight", "final_norm.bias"}


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_incremental_with_cache_equals_full(norm_first):
    layer = DecoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first).eval()
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
