"""KVCache bookkeeping: growth, cross entries, reorder."""

import pytest
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


def test_growing_past_the_initial_capacity_keeps_every_step():
    cache = KVCache.empty(1, capacity=2)
    for step in range(5):  # grows 2 -> 4 -> 8
        k, v = cache.append_self(0, torch.full((1, 1, 1, 2), float(step)), torch.full((1, 1, 1, 2), -float(step)))
    assert k[0, 0, :, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert v[0, 0, :, 1].tolist() == [0.0, -1.0, -2.0, -3.0, -4.0]
    # several steps in one call may need more than one doubling
    cache = KVCache.empty(1, capacity=1)
    k, _ = cache.append_self(0, torch.arange(6.0).view(1, 1, 6, 1), torch.zeros(1, 1, 6, 1))
    assert k.flatten().tolist() == [0, 1, 2, 3, 4, 5] and cache.length == 6


def test_append_writes_in_place_until_the_buffer_is_full():
    cache = KVCache.empty(1, capacity=4)
    k1, _ = cache.append_self(0, torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1))
    k2, _ = cache.append_self(0, torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    assert k1.data_ptr() == k2.data_ptr()  # same storage: no copy of the history
    assert k2.flatten().tolist() == [0.0, 1.0]


def test_reorder_then_append_continues_from_the_selected_rows():
    cache = KVCache.empty(1, capacity=2)
    cache.append_self(0, torch.arange(3.0).view(3, 1, 1, 1), torch.zeros(3, 1, 1, 1))
    new = cache.reorder(torch.tensor([1, 1, 2]))
    k, _ = new.append_self(0, torch.full((3, 1, 1, 1), 9.0), torch.zeros(3, 1, 1, 1))
    assert k[:, 0, :, 0].tolist() == [[1, 9], [1, 9], [2, 9]]
    assert cache.self_k[0].flatten().tolist() == [0, 1, 2]  # the original keeps its rows


def test_reorder_without_cross_keeps_the_source_rows_and_checks_the_row_count():
    cache = KVCache.empty(1)
    cross = torch.arange(4.0).view(4, 1, 1, 1)
    cache.set_cross(0, cross, cross + 10)
    cache.append_self(0, torch.arange(4.0).view(4, 1, 1, 1), torch.zeros(4, 1, 1, 1))
    new = cache.reorder(torch.tensor([1, 1, 3, 2]), cross=False)
    assert new.self_k[0].flatten().tolist() == [1, 1, 3, 2]
    assert new.cross(0)[0].flatten().tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="as many indices as rows"):
        cache.reorder(torch.tensor([0, 1]), cross=False)


def test_source_mask_becomes_an_additive_bias_that_follows_reorder():
    cache = KVCache.empty(1)
    assert cache.set_source_mask(torch.ones(2, 3, dtype=torch.bool), torch.float32)
    assert cache.source_mask_set and cache.cross_bias is None  # nothing padded: no bias at all
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert cache.set_source_mask(mask, torch.float32)
    assert cache.cross_bias.shape == (2, 1, 1, 3)
    assert cache.cross_bias[:, 0, 0].tolist() == [[0.0, 0.0, float("-inf")], [0.0, float("-inf"), float("-inf")]]
    moved = cache.reorder(torch.tensor([1, 1, 0]))
    assert moved.source_mask_set and moved.cross_bias[:, 0, 0, 1].tolist() == [float("-inf")] * 2 + [0.0]
    # A source row without any real token keeps the bool-mask path (its rule: zero output).
    empty_row = KVCache.empty(1)
    assert not empty_row.set_source_mask(torch.tensor([[True, False], [False, False]]), torch.float32)
    assert not empty_row.source_mask_set


def test_in_place_reorder_matches_reorder_and_recycles_buffers():
    torch.manual_seed(0)
    a, b = KVCache.empty(2), KVCache.empty(2)
    for cache in (a, b):
        cache.set_cross(0, torch.arange(4.0).view(4, 1, 1, 1), torch.zeros(4, 1, 1, 1))
    steps = [torch.randn(4, 2, 1, 3) for _ in range(4)]
    orders = [torch.tensor([1, 1, 0, 3]), torch.tensor([3, 2, 2, 0]), torch.tensor([0, 0, 0, 1])]
    pointers = set()
    for step, k in enumerate(steps):
        for layer in range(2):
            a.append_self(layer, k, -k)
            b.append_self(layer, k, -k)
        if step < len(orders):
            a = a.reorder(orders[step], cross=False)
            same = b.reorder_(orders[step], cross=False)
            assert same is b
            pointers.add(b._k[0].data_ptr())
    for layer in range(2):
        torch.testing.assert_close(b.self_k[layer], a.self_k[layer])
        torch.testing.assert_close(b.self_v[layer], a.self_v[layer])
    assert len(pointers) == 2  # two buffers take turns
    assert b.cross(0)[0].flatten().tolist() == [0, 1, 2, 3]


def test_an_in_place_reorder_to_fewer_rows_writes_into_the_spare_buffers_first_rows():
    """Sentences leaving a beam-search batch: the in-place reorder to fewer rows selects them into
    the first rows of the buffers kept from the reorder before (no new buffer), with the values
    of a plain reorder."""
    torch.manual_seed(1)
    a, b = KVCache.empty(1), KVCache.empty(1)
    cross = torch.randn(4, 1, 2, 3), torch.randn(4, 1, 2, 3)
    for cache in (a, b):
        cache.set_cross(0, *cross)
    for step, order in enumerate([torch.tensor([1, 1, 0, 3]), torch.tensor([3, 0]), torch.tensor([1])]):
        k = torch.randn(a.self_k[0].size(0) if step else 4, 2, 1, 3)
        a.append_self(0, k, -k)
        b.append_self(0, k, -k)
        spare = b._spare_k[0]
        a = a.reorder(order)
        b.reorder_(order)
        if spare is not None:  # from the second reorder on: the spare's first rows, not a new tensor
            assert b._k[0].data_ptr() == spare.data_ptr() and b._k[0].size(0) == order.numel()
        torch.testing.assert_close(b.self_k[0], a.self_k[0], rtol=0, atol=0)
        torch.testing.assert_close(b.self_v[0], a.self_v[0], rtol=0, atol=0)
        torch.testing.assert_close(b.cross(0)[0], a.cross(0)[0], rtol=0, atol=0)


def test_static_buffers_allocated_together_reorder_as_one_tensor_and_match_separate_ones():
    """A static cache whose buffers are views of one tensor (``allocate(together=True)``)
    reorders them in place into a second such tensor, with the same keys and values as a cache
    whose buffers are tensors of their own; a reorder that changes the rows leaves them apart."""
    from transformer.modules.kv_cache import StaticKVCache

    torch.manual_seed(0)
    like = torch.zeros(1, 2, 5, 3)  # cross keys: one sentence, 2 heads, 5 source steps
    caches = []
    for together in (False, True):
        cache = StaticKVCache.empty(2, capacity=6, group=4).reserve(6)
        cache.set_cross(0, like, like)
        cache.set_cross(1, like, like)
        caches.append(cache.allocate(like, 4, together=together))
    apart, joined = caches
    orders = [torch.tensor([1, 1, 0, 3]), torch.tensor([3, 2, 2, 0]), torch.tensor([0, 0, 0, 1])]
    stores = set()
    for step, order in enumerate(orders):
        k = torch.randn(4, 2, 1, 3)
        for layer in range(2):
            for cache in caches:
                cache.append_self(layer, k + layer, -k)
        apart.reorder_(order, cross=False)
        assert joined.reorder_(order, cross=False) is joined
        stores.add(joined._k[0].untyped_storage().data_ptr())
    for layer in range(2):
        torch.testing.assert_close(joined.self_k[layer], apart.self_k[layer], rtol=0, atol=0)
        torch.testing.assert_close(joined.self_v[layer], apart.self_v[layer], rtol=0, atol=0)
    assert len(stores) == 2  # two tensors take turns
    shared = {b.untyped_storage().data_ptr() for b in joined._k + joined._v}
    assert len(shared) == 1  # every layer's keys and values: views of one tensor
    joined.reorder_(torch.tensor([3, 2, 1, 0]), cross=True)  # the general reorder: apart again
    apart.reorder_(torch.tensor([3, 2, 1, 0]), cross=True)
    assert len({b.untyped_storage().data_ptr() for b in joined._k + joined._v}) == 4
    torch.testing.assert_close(joined.self_k[1], apart.self_k[1], rtol=0, atol=0)


def test_reserve_sizes_buffers_once_for_the_announced_steps():
    cache = KVCache.empty(1, capacity=2).reserve(7)
    ptrs = set()
    for step in range(7):
        k, _ = cache.append_self(0, torch.full((1, 1, 1, 1), float(step)), torch.zeros(1, 1, 1, 1))
        ptrs.add(k.data_ptr())
    assert len(ptrs) == 1  # never regrown
    assert k.flatten().tolist() == [0, 1, 2, 3, 4, 5, 6]
    # past the reservation it still grows, keeping every step
    k, _ = cache.append_self(0, torch.full((1, 1, 1, 1), 7.0), torch.zeros(1, 1, 1, 1))
    assert k.flatten().tolist() == list(range(8))
    with pytest.raises(ValueError, match="steps"):
        cache.reserve(0)


@pytest.mark.parametrize("kind", ["growing", "static", "static together"])
def test_a_reorder_that_moves_few_rows_copies_them_in_place(kind):
    """Beam search keeps most beams in their parent's row: an in-place reorder then writes only
    the rows that change, into the buffers it has (no turn of the spare ones), and the cache
    holds what a plain reorder gives, a row that is both source and destination included."""
    from transformer.modules.kv_cache import StaticKVCache

    torch.manual_seed(3)
    like = torch.randn(2, 2, 5, 3)  # cross keys: two sentences of three beams
    ref, cache = (KVCache.empty(2, group=3) if kind == "growing" else StaticKVCache.empty(2, group=3).reserve(6)
                  for _ in range(2))
    for c in (ref, cache):
        c.set_cross(0, like, like)
        c.set_cross(1, like, -like)
    if kind == "static together":
        cache.allocate(like, together=True)
    orders = [torch.tensor([0, 0, 2, 3, 4, 5]), torch.tensor([1, 0, 2, 3, 4, 4]), torch.tensor([2, 0, 1, 3, 3, 3])]
    for step, order in enumerate(orders):
        k = torch.randn(6, 2, 1, 3)
        for layer in range(2):
            ref.append_self(layer, k + layer, -k)
            cache.append_self(layer, k + layer, -k)
        before = [b.data_ptr() for b in cache._k + cache._v]
        ref = ref.reorder(order, cross=False)
        assert cache.reorder_(order, cross=False) is cache
        few = 2 * int((order != torch.arange(6)).sum()) < 6
        assert ([b.data_ptr() for b in cache._k + cache._v] == before) == few
        for layer in range(2):
            torch.testing.assert_close(cache.self_k[layer], ref.self_k[layer], rtol=0, atol=0)
            torch.testing.assert_close(cache.self_v[layer], ref.self_v[layer], rtol=0, atol=0)
