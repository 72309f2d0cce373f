"""Helpers shared by the search functions."""

import torch

from transformer.decoding.common import ban_tokens


def test_ban_tokens_copies_unless_asked_to_work_in_place():
    lp = torch.zeros(2, 5)
    banned = ban_tokens(lp, (0, None, 3))
    assert banned[:, [0, 3]].eq(float("-inf")).all() and banned[:, [1, 2, 4]].eq(0).all()
    assert lp.eq(0).all()  # the input is untouched by default
    same = ban_tokens(lp, (1,), inplace=True)
    assert same.data_ptr() == lp.data_ptr() and lp[:, 1].eq(float("-inf")).all()
