"""Held-out splits carved from one corpus: reproducible, exact in size, leak-free."""

from __future__ import annotations

import random

import pytest

from transformer.data.core.holdout import KeySplit


def _keys(n_sources: int = 400, seed: int = 0) -> list[str]:
    """Sources with 1-4 copies each (like Tatoeba's several translations per sentence), shuffled."""
    rng = random.Random(seed)
    keys = [f"sentence {i}" for i in range(n_sources) for _ in range(rng.randint(1, 4))]
    rng.shuffle(keys)
    return keys


def test_split_is_reproducible_and_independent_of_order():
    keys = _keys()
    a = KeySplit(keys, {"test": 100, "valid": 50}, seed=3)
    b = KeySplit(list(reversed(keys)), {"test": 100, "valid": 50}, seed=3)
    assert [a(k) for k in keys] == [b(k) for k in keys]
    other = KeySplit(keys, {"test": 100, "valid": 50}, seed=4)
    assert [a(k) for k in keys] != [other(k) for k in keys]  # the seed matters


def test_every_copy_of_a_source_stays_in_one_split_and_sizes_are_exact():
    keys = _keys()
    split = KeySplit(keys, {"test": 100, "valid": 50}, seed=1)
    where: dict[str, set[str]] = {}
    for k in keys:
        where.setdefault(k, set()).add(split(k))
    assert all(len(s) == 1 for s in where.values())
    counts = {name: sum(1 for k in keys if split(k) == name) for name in ("train", "test", "valid")}
    assert counts == split.counts == {"train": len(keys) - 150, "test": 100, "valid": 50}


def test_fractions_and_bad_sizes():
    keys = [f"s{i}" for i in range(1000)]
    assert KeySplit(keys, {"test": 0.1}, seed=0).counts == {"train": 900, "test": 100}
    with pytest.raises(ValueError, match="leaving none to train on"):
        KeySplit(keys, {"test": 600, "valid": 400})
    with pytest.raises(ValueError, match="'test'.*-3"):
        KeySplit(keys, {"test": -3})
    with pytest.raises(ValueError, match="training split's name"):
        KeySplit(keys, {"train": 3})
