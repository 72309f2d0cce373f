"""Helpers shared by the search functions."""

import pytest
import torch

from transformer.decoding.common import ban_tokens


def test_ban_tokens_copies_unless_asked_to_work_in_place():
    lp = torch.zeros(2, 5)
    banned = ban_tokens(lp, (0, None, 3))
    assert banned[:, [0, 3]].eq(float("-inf")).all() and banned[:, [1, 2, 4]].eq(0).all()
    assert lp.eq(0).all()  # the input is untouched by default
    same = ban_tokens(lp, (1,), inplace=True)
    assert same.data_ptr() == lp.data_ptr() and lp[:, 1].eq(float("-inf")).all()


@pytest.mark.parametrize("shape", [(3, 7), (2, 4, 9), (1, 1)])
def test_max_last_matches_torch_max_and_keeps_the_first_tie(shape):
    from transformer.decoding.common import max_last

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 3, shape, generator=g).float()  # many ties
    x[..., 0] = float("-inf")
    values, idx = max_last(x)
    ref = x.max(dim=-1)
    assert torch.equal(idx, ref.indices) and torch.equal(values, ref.values)
    assert idx.dtype == torch.long
    # a non-contiguous view, and a tensor autograd tracks, give the same answer
    t = x.transpose(0, -1).contiguous().transpose(0, -1)
    assert torch.equal(max_last(t)[1], ref.indices)
    w = x.clone().requires_grad_(True)
    assert torch.equal(max_last(w)[1], ref.indices)
