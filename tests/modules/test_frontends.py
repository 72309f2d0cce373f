"""The front ends. Speech: exact output lengths, the padding mask, and padding that never changes
an utterance's outputs (a padded batch equals each utterance alone). Images: patches reassemble
into the image, each patch holds its own pixels, the embedding is one linear map per patch."""

from __future__ import annotations

import pytest
import torch

from transformer.modules.frontends import ConvSubsampling, PatchEmbedding, patchify, unpatchify


def _reference_length(t: int) -> int:
    """Two valid 3-wide stride-2 convolutions, by Conv2d's own arithmetic."""
    for _ in range(2):
        t = (t - 3) // 2 + 1 if t >= 3 else 0
    return t


@pytest.mark.parametrize("t", [7, 8, 9, 10, 11, 14, 15, 100, 101, 1001])
def test_output_shape_and_length_formula(t):
    fe = ConvSubsampling(n_mels=80, d_model=32, channels=8)
    x, mask = fe(torch.randn(2, t, 80), torch.tensor([t, t]))
    expected = ((t - 1) // 2 - 1) // 2
    assert expected == _reference_length(t)
    assert x.shape == (2, expected, 32) and mask.shape == (2, expected) and mask.dtype == torch.bool
    assert mask.all()
    assert int(ConvSubsampling.output_lengths(torch.tensor(t))) == expected


def test_lengths_below_seven_frames():
    assert ConvSubsampling.output_lengths(torch.arange(0, 9)).tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="at least 7 frames"):
        ConvSubsampling(80, 16)(torch.randn(1, 6, 80), torch.tensor([6]))
    with pytest.raises(ValueError, match="expects 80 features"):
        ConvSubsampling(80, 16)(torch.randn(1, 20, 40), torch.tensor([20]))


@pytest.mark.parametrize("t", [15, 16, 17, 30, 31, 100, 1001])
def test_subsampling_by_eight_halves_once_more(t):
    """x8: three convolutions, ``T' = (((T - 1) // 2 - 1) // 2 - 1) // 2`` by Conv2d's own
    arithmetic; under 15 frames is refused; padding still never reaches a valid output."""
    fe = ConvSubsampling(n_mels=40, d_model=16, channels=4, subsampling=8).eval()
    expected = (_reference_length(t) - 3) // 2 + 1 if _reference_length(t) >= 3 else 0
    x, mask = fe(torch.randn(1, t, 40), torch.tensor([t]))
    assert x.shape == (1, expected, 16) and int(mask.sum()) == expected
    assert int(fe.lengths_out(torch.tensor(t))) == expected and len(fe.conv) == 6
    item = torch.randn(t, 40)
    padded = torch.cat([item, 1e3 * torch.randn(40, 40)]).unsqueeze(0)  # (1, T + 40, M)
    got, got_mask = fe(padded, torch.tensor([t]))
    torch.testing.assert_close(got[0, :expected], fe(item.unsqueeze(0), torch.tensor([t]))[0][0], atol=1e-5, rtol=1e-5)
    assert not got_mask[0, expected:].any()


def test_subsampling_factor_and_its_shortest_input():
    with pytest.raises(ValueError, match="at least 15 frames"):
        ConvSubsampling(40, 16, subsampling=8)(torch.randn(1, 14, 40), torch.tensor([14]))
    with pytest.raises(ValueError, match="4 or 8, got 6"):
        ConvSubsampling(40, 16, subsampling=6)
    assert ConvSubsampling(40, 16).lengths_out(torch.tensor(7)) == 1


def test_padding_never_changes_valid_outputs():
    torch.manual_seed(0)
    fe = ConvSubsampling(n_mels=40, d_model=24, channels=6).eval()
    lengths = [57, 23, 100, 7, 8]
    items = [torch.randn(t, 40) for t in lengths]
    src = torch.zeros(len(items), max(lengths), 40)  # (B, T, M)
    for b, item in enumerate(items):
        src[b, : len(item)] = item
    # the padding holds garbage: a valid output that looked at it would change
    for b, t in enumerate(lengths):
        src[b, t:] = 1e3 * torch.randn(max(lengths) - t, 40)
    x, mask = fe(src, torch.tensor(lengths))
    for b, item in enumerate(items):
        alone, alone_mask = fe(item.unsqueeze(0), torch.tensor([len(item)]))
        n = alone.shape[1]
        assert alone_mask.all() and int(mask[b].sum()) == n
        assert mask[b, :n].all() and not mask[b, n:].any()
        torch.testing.assert_close(x[b, :n], alone[0], atol=1e-5, rtol=1e-5)


def test_gradients_reach_every_parameter():
    fe = ConvSubsampling(n_mels=20, d_model=8, channels=4)
    x, mask = fe(torch.randn(2, 30, 20), torch.tensor([30, 12]))
    (x * mask.unsqueeze(-1)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in fe.parameters())
    assert fe.out.in_features == 4 * 4  # 20 mel bins -> 4 after two convolutions


def test_too_few_mel_bins():
    with pytest.raises(ValueError, match="n_mels >= 7"):
        ConvSubsampling(n_mels=6, d_model=8)


# ----------------------------------------------------------------------------- image patches
def test_patches_reassemble_into_the_image():
    images = torch.randn(2, 3, 8, 12)  # (B, C, H, W)
    patches = patchify(images, 4)
    assert patches.shape == (2, 6, 3 * 4 * 4)  # a 2x3 grid of 4x4 patches
    torch.testing.assert_close(unpatchify(patches, 4, 8, 12), images, rtol=0, atol=0)


def test_a_patch_holds_its_own_pixels_in_row_major_grid_order():
    image = torch.arange(2 * 6 * 4, dtype=torch.float32).reshape(1, 2, 6, 4)  # (1, C, H, W)
    patches = patchify(image, 2)  # a 3x2 grid
    for n in range(6):
        r, c = divmod(n, 2)  # grid row and column of patch n
        block = image[0, :, 2 * r: 2 * r + 2, 2 * c: 2 * c + 2]  # (C, 2, 2)
        assert torch.equal(patches[0, n], block.reshape(-1))


def test_patch_embedding_is_one_linear_map_of_each_patch_and_every_patch_is_real():
    torch.manual_seed(0)
    fe = PatchEmbedding(height=8, width=8, patch_size=2, d_model=16, channels=1)
    images = torch.rand(3, 1, 8, 8)
    x, mask = fe(images)
    assert x.shape == (3, 16, 16) and fe.grid == (4, 4) and fe.n_patches == 16
    assert mask.dtype == torch.bool and mask.all()
    torch.testing.assert_close(x, fe.proj(patchify(images, 2)))


def test_overlapping_patches_are_a_convolution_of_kernel_p_and_stride_s():
    torch.manual_seed(0)
    fe = PatchEmbedding(height=8, width=12, patch_size=4, d_model=16, channels=3, stride=2)
    images = torch.rand(2, 3, 8, 12)
    x, mask = fe(images)
    assert fe.grid == (4, 6) and x.shape == (2, 24, 16) and mask.all()  # the grid of 2x2 cells
    conv = torch.nn.functional.conv2d(images, fe.proj.weight.view(16, 3, 4, 4), fe.proj.bias, stride=2, padding=1)
    torch.testing.assert_close(x, conv.flatten(2).transpose(1, 2))  # (B, D, 4, 6) -> (B, 24, D)
    # The token of cell (1, 2) reads rows 1..4 and columns 3..6 of the image: its 4x4 patch, centred.
    torch.testing.assert_close(x[:, 1 * 6 + 2], fe.proj(images[:, :, 1:5, 3:7].reshape(2, -1)))


def test_a_stride_equal_to_the_patch_side_is_the_plain_patch_embedding():
    fe = PatchEmbedding(height=8, width=8, patch_size=2, d_model=8, stride=2)
    images = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(fe(images)[0], fe.proj(patchify(images, 2)))


@pytest.mark.parametrize("patch_size, stride", [(4, 3), (2, 4)])
def test_a_stride_that_does_not_centre_the_patches_is_refused(patch_size, stride):
    with pytest.raises(ValueError, match="stride"):
        PatchEmbedding(height=12, width=12, patch_size=patch_size, d_model=8, stride=stride)


def test_patch_embedding_refuses_another_image_size():
    with pytest.raises(ValueError, match="does not divide"):
        PatchEmbedding(height=8, width=9, patch_size=2, d_model=8)
    fe = PatchEmbedding(height=8, width=8, patch_size=2, d_model=8)
    with pytest.raises(ValueError, match="1x8x8"):
        fe(torch.rand(1, 1, 16, 16))
