"""Encoder properties: permutation equivariance, padding invariance, local window."""

import pytest
import torch
from tiny_models import POSITIONALS, TINY

import transformer.modules.attention as attention
from transformer.models.transformer import StackConfig, TransformerEncoder
from transformer.modules.attention import LocalWindow


def _encoder(positional, **kw):
    return TransformerEncoder(StackConfig(vocab_size=20, pad_id=0, positional=positional, **{**TINY, **kw}), 2).eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_without_positions_encoder_is_permutation_equivariant(norm_first):
    enc = _encoder(POSITIONALS["none"], norm_first=norm_first)
    src = torch.randint(1, 20, (2, 7))
    perm = torch.randperm(7)
    torch.testing.assert_close(enc(src[:, perm]), enc(src)[:, perm], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["sinusoidal", "learned", "relative"])
def test_with_positions_encoder_is_not_permutation_equivariant(name):
    enc = _encoder(POSITIONALS[name])
    src = torch.tensor([[3, 4, 5, 6, 7, 8, 9]])
    perm = torch.tensor([6, 5, 4, 3, 2, 1, 0])
    assert not torch.allclose(enc(src[:, perm]), enc(src)[:, perm], atol=1e-3)


@pytest.mark.parametrize("name", ["sinusoidal", "learned", "relative"])
@pytest.mark.parametrize("window", [None, 2])
def test_extra_padding_leaves_real_positions_unchanged(name, window):
    enc = _encoder(POSITIONALS[name], window=window, norm_first=True)
    src = torch.tensor([[5, 6, 7, 8, 9]])
    padded = torch.cat([src, torch.zeros(1, 4, dtype=torch.long)], 1)
    torch.testing.assert_close(enc(padded)[:, :5], enc(src), atol=1e-5, rtol=0)


def test_all_pad_row_is_finite():
    enc = _encoder(POSITIONALS["relative"])
    src = torch.tensor([[5, 6, 7], [0, 0, 0]])
    assert torch.isfinite(enc(src)).all()


def test_local_window_weights_outside_window_are_exactly_zero():
    enc = _encoder(POSITIONALS["sinusoidal"], window=1)
    memory, weights = enc(torch.randint(1, 20, (2, 6)), need_weights=True)
    assert len(weights) == 2 and weights[0].shape == (2, 2, 6, 6)
    i, j = torch.arange(6).view(6, 1), torch.arange(6).view(1, 6)
    outside = (i - j).abs() > 1
    for w in weights:
        assert torch.equal(w[..., outside], torch.zeros_like(w[..., outside]))
        assert (w[..., ~outside] > 0).all()
    # Without a window the same weights are non-zero everywhere.
    full = _encoder(POSITIONALS["sinusoidal"])
    _, w_full = full(torch.randint(1, 20, (2, 6)), need_weights=True)
    assert (w_full[0] > 0).all()


def test_forward_embeddings_matches_forward():
    enc = _encoder(POSITIONALS["sinusoidal"])
    src = torch.tensor([[5, 6, 7, 0]])
    via_embeddings = enc.forward_embeddings(enc.embed_tokens(src), src != 0)
    torch.testing.assert_close(via_embeddings, enc(src))


def test_layers_get_the_padding_mask():
    enc = _encoder(POSITIONALS["sinusoidal"])
    seen = []
    for layer in enc.layers:
        layer.register_forward_pre_hook(lambda mod, args: seen.append(args[1]))
    enc(torch.tensor([[5, 6, 7], [8, 9, 0]]))
    assert [m.shape for m in seen] == [(2, 1, 1, 3)] * 2 and not bool(seen[0][1, 0, 0, 2])


@pytest.mark.parametrize("name", ["sinusoidal", "relative"])
@pytest.mark.parametrize("window", [0, 3, 20])
def test_a_long_input_takes_the_blocked_window_path_with_the_dense_band_s_states_and_gradients(
        name, window, monkeypatch):
    enc = _encoder(POSITIONALS[name], window=window, max_len=512)
    src = torch.randint(1, 20, (2, 300))
    src[1, 170:] = 0
    real = src.ne(0)
    assert LocalWindow(300, window).blocked

    def run():
        out = enc(src)
        grads = torch.autograd.grad(out[real].square().mean(), list(enc.parameters()), allow_unused=True)
        with torch.inference_mode():
            packed = enc(src)  # the inference path: real positions only, the window kept as a LocalWindow
        return out, grads, packed

    blocked, blocked_grads, blocked_packed = run()
    monkeypatch.setattr(attention, "BLOCKED_MIN_LENGTH", 10**9)  # every window as the dense (S, S) band
    dense, dense_grads, dense_packed = run()
    torch.testing.assert_close(blocked, dense, atol=1e-5, rtol=0)
    torch.testing.assert_close(blocked_packed[real], dense[real], atol=1e-5, rtol=0)
    assert (blocked_packed[~real] == 0).all()
    for g_blocked, g_dense in zip(blocked_grads, dense_grads):
        if g_dense is not None:
            torch.testing.assert_close(g_blocked, g_dense, atol=1e-5, rtol=1e-5)


def test_a_window_over_image_patches_is_2d_and_grows_by_one_ring_a_layer():
    # A 6x6 grid of 1x1 patches, window 1, no class vector: after L layers patch (0, 0) has seen
    # only patches within L rows and L columns of it, whatever the others hold.
    from functools import partial

    from transformer.modules.frontends import PatchEmbedding

    torch.manual_seed(0)
    cfg = StackConfig(vocab_size=1, pad_id=0, positional=POSITIONALS["learned"], window=1, dropout=0.0,
                      frontend=partial(PatchEmbedding, height=6, width=6, patch_size=1),
                      **{k: v for k, v in TINY.items() if k != "dropout"})
    enc = TransformerEncoder(cfg, 2).eval()
    images = torch.rand(1, 1, 6, 6)
    changed = images.clone()
    changed[0, 0, 2:, 3:] = torch.rand(4, 3)  # beyond two columns of (0, 0), within two rows
    changed[0, 0, 3:, :] = torch.rand(3, 6)  # beyond two rows
    out, out_changed = enc(images), enc(changed)  # (1, 36, D)
    torch.testing.assert_close(out_changed[0, 0], out[0, 0], atol=1e-6, rtol=0)
    # the same change moves a patch that is near it, and full attention moves (0, 0) too
    assert not torch.allclose(out_changed[0, 35], out[0, 35], atol=1e-4)
    enc.window = None
    assert not torch.allclose(enc(changed)[0, 0], enc(images)[0, 0], atol=1e-4)
