"""KVCache bookkeeping: growth, cross entries, reorder."""

import torch

from transformer.modules.kv_cache import KVCache


def test_append_grows_and_length_counts_steps():
    cache = KVCache.empty(2)
    assert cache.length == 0
    for step in range(3):
        for layer in range(2):
            k, v = cache.append_self(layer, torch.full((2, 1, 1, 4), float(step)), torch.zeros(2, 1, 1, 4))
        assert k.shape == (2, 1, step + 1, 4)
    assert cache.length == 3
    assert cache.self_k[0][0, 0, :, 0].tolist() == [0.0, 1.0, 2.0]


def test_reorder_selects_rows_of_every_tensor():
    cache = KVCache.empty(1)
    cache.set_cross(0, torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1) + 10)
    cache.append_self(0, torch.arange(3.0).view(3, 1, 1, 1), torch.arange(3.0).view(3, 1, 1, 1) + 20)
    idx = torch.tensor([2, 2, 0, 1])
    new = cache.reorder(idx)
    assert new.self_k[0].flatten().tolist() == [2, 2, 0, 1]
    assert new.self_v[0].flatten().tolist() == [22, 22, 20, 21]
    assert new.cross(0)[0].flatten().tolist() == [2, 2, 0, 1]
    assert new.cross(0)[1].flatten().tolist() == [12, 12, 10, 11]
    assert new.length == 1 and cache.self_k[0].size(0) == 3  # the original is untouched
