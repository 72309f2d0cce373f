"""Mask construction: polarity, the cached-decoding offset rule, merging."""

import torch

from transformer.modules.attention import causal_mask, grid_window_mask, local_window_mask, merge_masks, pad_mask


def test_pad_mask_true_is_real():
    tokens = torch.tensor([[5, 6, 0], [0, 0, 0]])
    assert pad_mask(tokens, 0).tolist() == [[True, True, False], [False, False, False]]


def test_causal_mask_square_is_lower_triangular():
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_causal_mask_offset_rule_for_cached_queries():
    # 2 queries over 5 keys: they are positions 3 and 4, so they equal the last rows of the full mask.
    assert torch.equal(causal_mask(2, 5), causal_mask(5)[3:])
    assert causal_mask(1, 5).all()


def test_local_window_mask():
    m = local_window_mask(5, 5, 1)
    expected = torch.tensor([[abs(i - j) <= 1 for j in range(5)] for i in range(5)])
    assert torch.equal(m, expected)
    assert torch.equal(local_window_mask(2, 5, 1), m[3:])


def test_grid_window_mask_is_the_2d_neighbourhood_and_leading_positions_are_global():
    rows, cols, w = 3, 4, 1
    m = grid_window_mask(rows, cols, w, t=1 + rows * cols)  # a class vector, then the grid
    assert m.shape == (13, 13) and m[0].all() and m[:, 0].all()
    for i in range(rows * cols):
        for j in range(rows * cols):
            (ri, ci), (rj, cj) = divmod(i, cols), divmod(j, cols)
            assert bool(m[1 + i, 1 + j]) == (abs(ri - rj) <= w and abs(ci - cj) <= w)
    assert int(m[1:, 1:].sum(-1).max()) == 9  # an inner patch sees its 3x3 neighbourhood
    assert grid_window_mask(rows, cols, 0).equal(torch.eye(12, dtype=torch.bool))
    assert grid_window_mask(rows, cols, 3).all()


def test_merge_masks_shapes_and_and():
    pad = torch.tensor([[True, True, False], [True, False, False]])
    merged = merge_masks(pad, causal_mask(3))
    assert merged.shape == (2, 1, 3, 3)
    assert torch.equal(merged[0, 0], causal_mask(3) & pad[0])
    assert merge_masks(pad).shape == (2, 1, 1, 3)
    assert merge_masks(None, None) is None
