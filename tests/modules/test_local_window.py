"""Truncated self-attention computed block by block (``LocalWindow``) equals full attention masked by
``local_window_mask`` and the padding mask: outputs and gradients to 1e-5 in fp32, with and without a
relative position bias, for lengths that are not a multiple of the block, windows 0, 1 and wider
than the sequence, right, left and scattered padding; fully padded rows stay zero and finite."""

import pytest
import torch

import transformer.modules.attention as attention
from transformer.modules.attention import LocalWindow, MultiHeadAttention, local_window_mask, merge_masks
from transformer.modules.positional import RelativePositionBias

D_MODEL, N_HEADS = 16, 2


@pytest.fixture
def always_blocked(monkeypatch):
    """Every LocalWindow takes the blocked path, whatever its length (the rule is tested below)."""
    monkeypatch.setattr(attention, "BLOCKED_MIN_LENGTH", 0)
    monkeypatch.setattr(attention, "BLOCKED_MIN_SLICES", 0)


def _pad(t: int, kind: str) -> torch.Tensor | None:
    """A ``(2, T)`` key padding mask (True = real) of the given kind, or None."""
    if kind == "none":
        return None
    real = torch.ones(2, t, dtype=torch.bool)
    if kind == "right":
        real[1, (2 * t) // 3:] = False
    elif kind == "left":
        real[0, : t // 4] = False
    elif kind == "scattered":
        real = torch.rand(2, t) > 0.3
    elif kind == "empty_row":
        real[1] = False
    return real


def _both(t, window, kind, relative=False):
    """(blocked, dense) outputs of one attention module on the same inputs, and the leaf tensors."""
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    rel = RelativePositionBias(n_heads=N_HEADS, num_buckets=8, max_distance=16) if relative else None
    x = torch.randn(2, t, D_MODEL, requires_grad=True)
    real = _pad(t, kind)
    q, k, v = mha.project_q(x), *mha.project_kv(x)
    window_mask = LocalWindow(t, window, real, None if rel is None else rel.attention_bias)
    assert window_mask.blocked
    blocked, _ = mha.attend(q, k, v, window_mask)
    dense, _ = mha.attend(q, k, v, merge_masks(real, local_window_mask(t, t, window)),
                          None if rel is None else rel.attention_bias(t, t))
    params = [x, *mha.parameters(), *([] if rel is None else rel.parameters())]
    return blocked, dense, params


def _grads(out, params, probe):
    return torch.autograd.grad((out * probe).sum(), params, retain_graph=True)


CASES = [  # (T, window, padding): T not a multiple of the block of 16, windows 0, 1, small, = block, > T
    (37, 0, "none"), (50, 1, "right"), (100, 3, "left"), (33, 5, "empty_row"), (64, 16, "scattered"),
    (81, 20, "right"), (45, 60, "right"), (1, 2, "none"), (129, 7, "scattered"),
]


@pytest.mark.parametrize("relative", [False, True], ids=["no_bias", "relative_bias"])
@pytest.mark.parametrize("t,window,kind", CASES)
def test_blocked_equals_full_attention_masked_to_the_window(always_blocked, t, window, kind, relative):
    blocked, dense, params = _both(t, window, kind, relative)
    torch.testing.assert_close(blocked, dense, atol=1e-5, rtol=0)
    probe = torch.randn_like(dense)
    for g_blocked, g_dense in zip(_grads(blocked, params, probe), _grads(dense, params, probe)):
        torch.testing.assert_close(g_blocked, g_dense, atol=1e-5, rtol=0)


def test_a_fully_padded_row_gives_zeros_and_finite_gradients(always_blocked):
    blocked, _, params = _both(40, 3, "empty_row", relative=True)
    assert torch.isfinite(blocked).all() and (blocked[1] == 0).all()
    assert all(torch.isfinite(g).all() for g in _grads(blocked, params, torch.ones_like(blocked)))


def test_a_query_whose_whole_window_is_padding_gives_zeros(always_blocked):
    # Keys 10..29 are padding: with window 2, queries 12..27 see no real key, 11 and 28 see one.
    real = torch.ones(1, 40, dtype=torch.bool)
    real[0, 10:30] = False
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    x = torch.randn(1, 40, D_MODEL)
    out, _ = mha(x, x, x, LocalWindow(40, 2, real))
    assert torch.isfinite(out).all() and (out[0, 12:28] == 0).all()
    assert (out[0, 11] != 0).any() and (out[0, 28] != 0).any()


@pytest.mark.parametrize("window", [0, 4, 17])
def test_extra_padding_leaves_real_positions_unchanged(always_blocked, window):
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    x = torch.randn(1, 53, D_MODEL)
    out, _ = mha(x, x, x, LocalWindow(53, window))
    padded = torch.cat([x, torch.randn(1, 30, D_MODEL)], 1)  # (1, 83, D): 30 padded positions of noise
    real = torch.arange(83).lt(53).unsqueeze(0)
    out_padded, _ = mha(padded, padded, padded, LocalWindow(83, window, real))
    torch.testing.assert_close(out_padded[:, :53], out, atol=1e-5, rtol=0)


def test_the_rule_blocks_long_inputs_only_and_never_builds_the_dense_band(monkeypatch):
    assert not LocalWindow(255, 4).blocked and LocalWindow(256, 4).blocked  # a block's fixed cost
    assert not LocalWindow(383, 64).blocked and LocalWindow(384, 64).blocked  # 2 slices of 64 + 128 keys
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    x = torch.randn(2, 300, D_MODEL)
    real = _pad(300, "right")
    dense, _ = mha(x, x, x, merge_masks(real, local_window_mask(300, 300, 8)))

    def refuse(self, device=None):
        raise AssertionError("the blocked path built the (T, T) band")

    monkeypatch.setattr(LocalWindow, "dense", refuse)
    blocked, weights = mha(x, x, x, LocalWindow(300, 8, real))
    assert weights is None
    torch.testing.assert_close(blocked, dense, atol=1e-5, rtol=0)


def test_asked_for_weights_it_returns_the_dense_band_weights():
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    x = torch.randn(2, 300, D_MODEL)
    real = _pad(300, "right")
    out, weights = mha(x, x, x, LocalWindow(300, 5, real), need_weights=True)
    ref, ref_weights = mha(x, x, x, merge_masks(real, local_window_mask(300, 300, 5)), need_weights=True)
    assert weights.shape == (2, N_HEADS, 300, 300)
    torch.testing.assert_close(weights, ref_weights, atol=0, rtol=0)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


def test_a_second_bias_and_a_wrong_length_are_refused():
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    x = torch.randn(1, 300, D_MODEL)
    with pytest.raises(ValueError, match="carries its own position bias"):
        mha(x, x, x, LocalWindow(300, 4), attn_bias=torch.zeros(1, N_HEADS, 300, 300))
    with pytest.raises(ValueError, match="over 299 positions got 300 queries"):
        mha(x, x, x, LocalWindow(299, 4))
    with pytest.raises(ValueError, match="window must be >= 0"):
        LocalWindow(10, -1)
