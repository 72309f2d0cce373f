"""Positional encodings: the sinusoid rotation property, offsets, relative buckets."""

import pytest
import torch

from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
    relative_position_bucket,
    sinusoid_table,
)


def test_sinusoid_formula():
    pe = sinusoid_table(50, 8)
    pos, i = 7, 1
    assert pe[pos, 2 * i].item() == pytest.approx(torch.sin(torch.tensor(pos / 10000 ** (2 * i / 8))).item(), abs=1e-6)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(torch.cos(torch.tensor(pos / 10000 ** (2 * i / 8))).item(), abs=1e-6)


def test_sinusoid_shift_is_a_fixed_block_diagonal_rotation():
    d, k = 16, 5
    pe = sinusoid_table(100, d).double()
    omega = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.zeros(d, d, dtype=torch.float64)
    for i, w in enumerate(omega):
        c, s = torch.cos(k * w), torch.sin(k * w)
        # [sin a, cos a] @ [[c, -s], [s, c]] = [sin(a + kw), cos(a + kw)]
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.stack([torch.stack([c, -s]), torch.stack([s, c])])
    # One matrix (built from k alone) maps every position pos to pos + k.
    torch.testing.assert_close(pe[:-k] @ m, pe[k:], atol=1e-5, rtol=0)


@pytest.mark.parametrize("cls", [SinusoidalPositionalEncoding, LearnedPositionalEncoding])
def test_absolute_forward_offset_matches_slice(cls):
    pe = cls(d_model=8, n_heads=2, max_len=32, causal=False)
    x = torch.randn(2, 10, 8)
    full = pe(x)
    torch.testing.assert_close(pe(x[:, 6:], offset=6), full[:, 6:])
    assert not torch.allclose(full, x)
    assert pe.attention_bias(3, 3) is None


def test_sinusoid_extrapolates_past_max_len():
    pe = SinusoidalPositionalEncoding(d_model=8, max_len=4)
    out = pe(torch.zeros(1, 3, 8), offset=5)
    torch.testing.assert_close(out[0], sinusoid_table(8, 8)[5:8])


@pytest.mark.parametrize(
    "cls", [SinusoidalPositionalEncoding, LearnedPositionalEncoding, RelativePositionBias, NoPositionalEncoding])
def test_uniform_constructor_kwargs(cls):
    """Every scheme takes the one keyword set a config's ``_partial_`` factory passes, and
    uses the arguments that apply to it."""
    pos = cls(d_model=8, n_heads=2, max_len=16, causal=True)
    x = torch.zeros(3, 5, 8)
    out, bias = pos(x), pos.attention_bias(5, 5)
    assert out.shape == x.shape
    if cls is SinusoidalPositionalEncoding:
        assert pos.pe.shape == (16, 8) and bias is None
        torch.testing.assert_close(out, sinusoid_table(16, 8)[:5].expand(3, 5, 8))
    elif cls is LearnedPositionalEncoding:
        assert (pos.embedding.num_embeddings, pos.embedding.embedding_dim) == (16, 8) and bias is None
        torch.testing.assert_close(out, pos.embedding.weight[:5].expand(3, 5, 8))
    elif cls is RelativePositionBias:
        assert torch.equal(out, x) and bias.shape == (1, 2, 5, 5)
        # causal: every future key shares the distance-0 bucket, so the first query sees one value
        assert torch.equal(bias[0, :, 0, 1:], bias[0, :, 0, :1].expand(2, 4))
    else:
        assert torch.equal(out, x) and bias is None


def test_relative_bias_shape_identity_forward_and_offset():
    rel = RelativePositionBias(d_model=8, n_heads=2, causal=True)
    x = torch.randn(1, 6, 8)
    assert torch.equal(rel(x), x)
    full = rel.attention_bias(6, 6)
    assert full.shape == (1, 2, 6, 6)
    torch.testing.assert_close(rel.attention_bias(2, 6, offset=4), full[:, :, 4:])
    # Depends only on the distance: a Toeplitz matrix.
    torch.testing.assert_close(full[:, :, 1:, 1:], full[:, :, :-1, :-1])


def test_relative_buckets_bidirectional_vs_causal():
    rp = torch.arange(-5, 6)
    bi = relative_position_bucket(rp, causal=False, num_buckets=32, max_distance=128)
    ca = relative_position_bucket(rp, causal=True, num_buckets=32, max_distance=128)
    assert set(bi[rp < 0].tolist()).isdisjoint(bi[rp > 0].tolist())
    assert (ca[rp >= 0] == 0).all() and len(set(ca[rp < 0].tolist())) == 5
    far = relative_position_bucket(torch.tensor([-1000, 1000]), causal=False, num_buckets=32, max_distance=128)
    assert far.tolist() == [15, 31]  # clamped to the last bucket of each direction


def test_fairseq_sinusoids_space_frequencies_over_half_minus_one_and_start_at_first_position():
    d = 7  # odd: a zero column after the sines and cosines
    pe = sinusoid_table(20, d, "fairseq")
    half, pos = d // 2, 9
    freqs = torch.exp(torch.arange(half, dtype=torch.float64) * -(torch.log(torch.tensor(10000.0)) / (half - 1)))
    torch.testing.assert_close(pe[pos, :half].double(), torch.sin(pos * freqs), atol=1e-6, rtol=0)
    torch.testing.assert_close(pe[pos, half:2 * half].double(), torch.cos(pos * freqs), atol=1e-6, rtol=0)
    assert pe[:, -1].abs().max().item() == 0.0
    # M2M100's first piece sits at row padding_idx + 1 = 2, under a static cache's tensor offset too
    enc = SinusoidalPositionalEncoding(d_model=d, max_len=16, layout="fairseq", first_position=2)
    x = torch.zeros(1, 4, d)
    torch.testing.assert_close(enc(x)[0], pe[2:6])
    torch.testing.assert_close(enc(x[:, :1], offset=torch.tensor(3))[0], pe[5:6])
    torch.testing.assert_close(enc(x, offset=14)[0], sinusoid_table(20, d, "fairseq")[16:20])  # past the table
