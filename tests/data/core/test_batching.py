"""TokenBudgetBatchSampler properties and the collate functions."""

from __future__ import annotations

import logging
import random

import pytest
import torch

from transformer.data.core.batching import (IGNORE_INDEX, TaggingCollator, TokenBudgetBatchSampler,
                                            TranslationCollator, cut_row, restore_order)


def _lengths(n=997, seed=0, hi=60):
    rng = random.Random(seed)
    return [rng.randint(1, hi) for _ in range(n)]


def _padded(batch, lengths):
    return max(lengths[i] for i in batch) * len(batch)


@pytest.mark.parametrize("max_tokens", [60, 200, 1000])
def test_budget_never_exceeded(max_tokens):
    lengths = _lengths()
    s = TokenBudgetBatchSampler(lengths, max_tokens, shuffle=True, seed=1)
    batches = list(s)
    assert all(_padded(b, lengths) <= max_tokens for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert len(batches) == len(s)
    # bucketing: batches are length-homogeneous, so padding waste stays small
    real = sum(lengths)
    assert real / sum(_padded(b, lengths) for b in batches) > 0.8


@pytest.mark.parametrize("n,max_tokens,seed", [(997, 200, 0), (1000, 333, 1), (31, 40, 2), (5, 1000, 3), (2, 10, 4)])
def test_two_ranks_cover_epoch_exactly_once(n, max_tokens, seed):
    lengths = _lengths(n, seed, hi=min(60, max_tokens))
    for epoch in range(3):
        shares = []
        for rank in range(2):
            s = TokenBudgetBatchSampler(lengths, max_tokens, shuffle=True, seed=seed, num_replicas=2, rank=rank)
            s.set_epoch(epoch)
            shares.append(list(s))
            assert len(shares[-1]) == len(s)
        assert len(shares[0]) == len(shares[1])  # DDP steps stay in lockstep
        seen = [i for share in shares for b in share for i in b]
        assert sorted(seen) == list(range(n))  # every example exactly once
        assert all(_padded(b, lengths) <= max_tokens for share in shares for b in share)


def test_drop_last_gives_equal_shares_without_duplicates():
    lengths = _lengths(101, 5)
    shares = [list(TokenBudgetBatchSampler(lengths, 100, num_replicas=3, rank=r, drop_last=True)) for r in range(3)]
    assert len({len(s) for s in shares}) == 1
    seen = [i for s in shares for b in s for i in b]
    assert len(seen) == len(set(seen))


def test_deterministic_by_seed_and_epoch():
    lengths = _lengths()
    a = TokenBudgetBatchSampler(lengths, 300, seed=7)
    b = TokenBudgetBatchSampler(lengths, 300, seed=7)
    a.set_epoch(3)
    b.set_epoch(3)
    assert list(a) == list(b)
    b.set_epoch(4)
    assert list(a) != list(b)
    c = TokenBudgetBatchSampler(lengths, 300, seed=8)
    c.set_epoch(3)
    assert list(c) != list(a)
    assert len(a) == len(b) == len(c)


def test_unshuffled_is_sorted_and_fixed():
    lengths = _lengths(200)
    s = TokenBudgetBatchSampler(lengths, 150, shuffle=False)
    flat = [i for b in s for i in b]
    assert [lengths[i] for i in flat] == sorted(lengths)
    s.set_epoch(5)
    assert [i for b in s for i in b] == flat


def test_oversized_example_gets_own_batch(caplog):
    lengths = [5, 5, 50, 5]
    with caplog.at_level(logging.WARNING):
        s = TokenBudgetBatchSampler(lengths, 20, shuffle=False)
    assert s.oversized == [2] and "longer than max_tokens" in caplog.text
    assert [2] in list(s)


def test_translation_collate():
    pad, bos, eos = 0, 1, 2
    col = TranslationCollator(pad, bos, eos)
    batch = col([{"src": [7, 8, 9], "tgt": [5], "index": 4}, {"src": [6], "tgt": [10, 11, 12], "index": 0}])
    assert batch["src"].tolist() == [[7, 8, 9, eos], [6, eos, pad, pad]]
    assert batch["src_pad_mask"].tolist() == [[True] * 4, [True, True, False, False]]
    assert batch["tgt_in"].tolist() == [[bos, 5, pad, pad], [bos, 10, 11, 12]]
    assert batch["tgt_out"].tolist() == [[5, eos, pad, pad], [10, 11, 12, eos]]
    assert batch["tgt_pad_mask"].tolist() == [[True, True, False, False], [True] * 4]
    assert batch["index"].tolist() == [4, 0]
    assert all(v.dtype == torch.long for k, v in batch.items() if "mask" not in k and k != "n_tokens")
    assert batch["src_pad_mask"].dtype == torch.bool
    assert batch["n_tokens"] == 6 and isinstance(batch["n_tokens"], int)  # counted on the host
    assert set(col([{"src": [7], "index": 0}])) == {"src", "src_pad_mask", "index"}


def test_translation_collate_pads_to_a_multiple():
    col = TranslationCollator(0, 1, 2, pad_to_multiple=8)
    examples = [{"src": list(range(3, 12)), "tgt": [5], "index": 0}, {"src": [6], "tgt": [7, 8, 9], "index": 1}]
    batch = col(examples)
    assert batch["src"].shape == (2, 16) and batch["tgt_in"].shape == batch["tgt_out"].shape == (2, 8)
    plain = TranslationCollator(0, 1, 2)(examples)
    assert torch.equal(batch["src"][:, :10], plain["src"]) and not batch["src"][:, 10:].any()
    assert torch.equal(batch["tgt_out"][:, :4], plain["tgt_out"]) and batch["n_tokens"] == plain["n_tokens"]


@pytest.mark.parametrize("multiple", [8, 16])
def test_bucketed_batches_keep_the_budget_after_padding_and_every_sentence(multiple):
    lengths = _lengths(hi=70)
    budget = 1024
    sampler = TokenBudgetBatchSampler(lengths, budget, shuffle=True, seed=3, pad_to_multiple=multiple)
    seen = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(len(lengths)))  # every sentence once
        for b in batches:
            width = -(-max(lengths[i] for i in b) // multiple) * multiple  # what the collator pads to
            assert width * len(b) <= budget
        seen.append({(len(b), -(-max(lengths[i] for i in b) // multiple) * multiple) for b in batches})
    assert seen[0] == seen[1]  # the same batch shapes every epoch
    assert len(seen[0]) < len(set(lengths))  # a handful of shapes, fewer than the distinct lengths


def test_tagging_collate():
    col = TaggingCollator(pad_id=0)
    batch = col([
        {"src": [9, 10, 11], "word_ids": [0, 0, 1], "tags": [3, 4], "index": 2},
        {"src": [12], "word_ids": [0], "tags": [5], "index": 1},
    ])
    assert batch["src"].tolist() == [[9, 10, 11], [12, 0, 0]]
    assert batch["word_ids"].tolist() == [[0, 0, 1], [0, -1, -1]]
    assert batch["tags"].tolist() == [[3, 4], [5, IGNORE_INDEX]]
    assert batch["src_pad_mask"].tolist() == [[True] * 3, [True, False, False]]
    assert batch["index"].tolist() == [2, 1]
    assert "aux_tags" not in batch
    aux = col([
        {"src": [9], "word_ids": [0], "tags": [3], "aux_tags": [7], "index": 0},
        {"src": [12, 13], "word_ids": [0, 1], "tags": [5, 6], "aux_tags": [8, 9], "index": 1},
    ])
    assert aux["aux_tags"].tolist() == [[7, IGNORE_INDEX], [8, 9]]


def test_rows_past_the_position_table_are_cut_keeping_the_closing_frame():
    assert cut_row([101, 7, 8, 9, 102], 4, [102]) == [101, 7, 8, 102]
    assert cut_row([101, 7, 102], 4, [102]) == [101, 7, 102]  # short enough: as it is
    assert cut_row([7, 8, 9], None) == [7, 8, 9]
    from transformer.data.labelled.datamodule import ClassificationCollator

    batch = ClassificationCollator(pad_id=0, max_positions=4, suffix=[102])(
        [{"src": [101, 7, 8, 9, 102], "label": 1, "index": 0}, {"src": [101, 7, 102], "label": 0, "index": 1}])
    assert batch["src"].tolist() == [[101, 7, 8, 102], [101, 7, 102, 0]]


def test_a_cut_tagging_row_scores_only_the_words_it_keeps():
    col = TaggingCollator(pad_id=0, max_positions=5, suffix=[102])
    # [CLS] w0 w0 w1 w2 w2 w3 [SEP]: five positions keep [CLS] w0 w0 w1 [SEP]; w2 and w3 lose every piece
    batch = col([{"src": [101, 9, 10, 11, 12, 13, 14, 102], "word_ids": [-1, 0, 0, 1, 2, 2, 3, -1],
                  "tags": [3, 4, 5, 6], "aux_tags": [7, 8, 9, 10], "index": 0},
                 {"src": [101, 9, 102], "word_ids": [-1, 0, -1], "tags": [3], "aux_tags": [7], "index": 1}])
    assert batch["src"].tolist() == [[101, 9, 10, 11, 102], [101, 9, 102, 0, 0]]
    assert batch["word_ids"].tolist() == [[-1, 0, 0, 1, -1], [-1, 0, -1, -1, -1]]
    assert batch["tags"].tolist() == [[3, 4, IGNORE_INDEX, IGNORE_INDEX], [3] + [IGNORE_INDEX] * 3]
    assert batch["aux_tags"].tolist() == [[7, 8, IGNORE_INDEX, IGNORE_INDEX], [7] + [IGNORE_INDEX] * 3]


def test_restore_order():
    assert restore_order([2, 0, 1], ["c", "a", "b"]) == ["a", "b", "c"]


def _greedy_reference(lengths, order, max_tokens):
    """The plain greedy cut, one example at a time: what the sampler's vectorized cut must equal."""
    batches, cur, cur_max = [], [], 0
    for i in order:
        if cur and max(cur_max, lengths[i]) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, lengths[i])
    return batches + ([cur] if cur else [])


@pytest.mark.parametrize("max_tokens", [30, 200, 4096])
def test_sampler_takes_a_numpy_length_column_and_cuts_like_the_plain_greedy_loop(max_tokens):
    import numpy as np

    lengths = np.random.default_rng(7).integers(1, 80, size=5000).astype(np.int32)  # a column, as read from Arrow
    from_array = TokenBudgetBatchSampler(lengths, max_tokens, shuffle=False)
    assert isinstance(from_array.lengths, np.ndarray)
    order = np.argsort(lengths, kind="stable").tolist()
    assert list(from_array) == _greedy_reference(lengths.tolist(), order, max_tokens)
    for epoch in range(2):
        a = TokenBudgetBatchSampler(lengths, max_tokens, seed=3, num_replicas=2, rank=1)
        b = TokenBudgetBatchSampler(lengths.tolist(), max_tokens, seed=3, num_replicas=2, rank=1)
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        assert list(a) == list(b) and len(a) == len(b)
        assert all(len(batch) == 1 or max(lengths[batch]) * len(batch) <= max_tokens for batch in a)


def test_sampler_over_a_million_lengths_hands_out_batches_as_they_are_asked_for():
    import numpy as np

    lengths = np.random.default_rng(0).integers(2, 60, size=1_000_000)
    s = TokenBudgetBatchSampler(lengths, 4096, seed=1, num_replicas=2, rank=0)
    it = iter(s)
    first = next(it)
    assert isinstance(first, list) and max(lengths[first]) * len(first) <= 4096
    assert sum(1 for _ in it) + 1 == len(s)
