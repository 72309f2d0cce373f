"""Beam search pinned on the scripted fake decoder (traces in scripted_tables.py)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from decoding_fakes import BOS, EOS, PAD, ScriptedSeq2Seq
from scripted_tables import A, B, C, D, dist

from transformer.decoding import Hypothesis, beam_search, greedy_search

SPECIALS = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}


def _src(*rows: list[int]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


def _hyp(tokens: list[int], p: float, length: int, lp: float) -> Hypothesis:
    return Hypothesis(tokens, math.log(p) / length**lp, math.log(p))


def _assert_hyps(got: list[Hypothesis], want: list[Hypothesis]) -> None:
    assert [h.tokens for h in got] == [h.tokens for h in want]
    assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-5)
    assert [h.logprob for h in got] == pytest.approx([h.logprob for h in want], abs=1e-5)


def test_beam_finds_the_better_hypothesis_greedy_misses():
    model = ScriptedSeq2Seq(dist)
    [[best]] = beam_search(model, _src([A, 3]), **SPECIALS, beam_size=2)
    _assert_hyps([best], [_hyp([4, 6], 0.36, 3, 1.0)])  # length 3 counts the EOS
    assert greedy_search(ScriptedSeq2Seq(dist), _src([A, 3]), **SPECIALS) == [[3, 5]]
    # Only beam 0 is live at step 0: the two beams extended at step 1 are distinct.
    assert {p for k, p in model.queries if len(p) == 1} == {(3,), (4,)}


def test_one_cache_reorder_per_step_and_one_token_per_call():
    model = ScriptedSeq2Seq(dist)
    beam_search(model, _src([B, 3]), **SPECIALS, beam_size=2)
    assert model.counter["decode_step"] == 4  # B finishes after 4 steps
    assert model.counter["reorder"] == model.counter["decode_step"] - 1


def test_length_penalty_changes_the_winner():
    lp1 = beam_search(ScriptedSeq2Seq(dist), _src([B, 3]), **SPECIALS, beam_size=2, length_penalty=1.0)
    lp0 = beam_search(ScriptedSeq2Seq(dist), _src([B, 3]), **SPECIALS, beam_size=2, length_penalty=0.0)
    _assert_hyps(lp1[0], [_hyp([4, 5, 6], 0.3655125, 4, 1.0)])
    _assert_hyps(lp0[0], [_hyp([3], 0.495, 2, 0.0)])


def test_n_best_sorted_by_score_with_exact_scores():
    [hyps] = beam_search(ScriptedSeq2Seq(dist), _src([B, 3]), **SPECIALS, beam_size=2, n_best=2)
    _assert_hyps(hyps, [_hyp([4, 5, 6], 0.3655125, 4, 1.0), _hyp([3], 0.495, 2, 1.0)])
    assert hyps[0].score > hyps[1].score


def test_finished_hypothesis_stops_growing_and_keeps_its_score():
    # [3] finishes at step 1 of B; the search runs two more steps around it.
    model = ScriptedSeq2Seq(dist)
    [hyps] = beam_search(model, _src([B, 3]), **SPECIALS, beam_size=2, n_best=2, length_penalty=0.0)
    assert hyps[0] == Hypothesis([3], pytest.approx(math.log(0.495)), pytest.approx(math.log(0.495)))
    assert not any(EOS in prefix for _, prefix in model.queries), "a finished hypothesis was extended"
    assert max(len(p) for _, p in model.queries) == 3


def test_max_length_finalises_unfinished_beams():
    # C never emits EOS: cap floor(1.0 * 2 + 1) = 3 tokens, both beams finalised without EOS.
    kw = dict(beam_size=2, n_best=2, max_len_a=1.0, max_len_b=1)
    [hyps] = beam_search(ScriptedSeq2Seq(dist), _src([C, 3]), **SPECIALS, **kw)
    _assert_hyps(hyps, [_hyp([3, 3, 3], 0.216, 3, 1.0), _hyp([4, 3, 3], 0.192, 3, 1.0)])


def test_batch_of_sentences_with_different_behaviour_keeps_input_order():
    kw = dict(beam_size=2, n_best=2, max_len_a=1.0, max_len_b=2)
    rows = [[B, 3, 3], [A, 3], [C]]  # caps 5, 4, 3; B ends at step 4, A at 3, C cut at 3
    batched = beam_search(ScriptedSeq2Seq(dist), _src(*rows), **SPECIALS, **kw)
    assert [h[0].tokens for h in batched] == [[4, 5, 6], [4, 6], [3, 3, 3]]
    for row, got in zip(rows, batched):
        alone = beam_search(ScriptedSeq2Seq(dist), _src(row), **SPECIALS, **kw)[0]
        _assert_hyps(got, alone)
    reversed_out = beam_search(ScriptedSeq2Seq(dist), _src(*rows[::-1]), **SPECIALS, **kw)
    assert [h[0].tokens for h in reversed_out] == [[3, 3, 3], [4, 6], [4, 5, 6]]


def test_done_sentences_leave_the_batch():
    model = ScriptedSeq2Seq(dist)
    beam_search(model, _src([B, 3, 3], [A, 3], [C]), **SPECIALS, beam_size=2, n_best=2,
                max_len_a=1.0, max_len_b=2)
    per_sentence = Counter(key for key, _ in model.queries)
    # A and C are done after 3 steps, so B's two beams run the 4th step alone.
    assert per_sentence == {B: 2 * 4, A: 2 * 3, C: 2 * 3}


def test_stopping_rule_early_versus_exhaustive():
    early = beam_search(ScriptedSeq2Seq(dist), _src([D, 3]), **SPECIALS, beam_size=1)
    _assert_hyps(early[0], [_hyp([], 0.55, 1, 1.0)])
    model = ScriptedSeq2Seq(dist)
    exhaustive = beam_search(model, _src([D, 3]), **SPECIALS, beam_size=1, early_stopping=False)
    _assert_hyps(exhaustive[0], [_hyp([3], 0.4455, 2, 1.0)])
    assert model.counter["decode_step"] == 2  # stops once [3, 4] cannot beat [3]


@pytest.mark.parametrize("key", [A, B, C, D])
def test_beam_size_one_equals_greedy_on_the_fake(key):
    src = _src([key, 3])
    cap = dict(max_len_a=1.0, max_len_b=1)
    greedy = greedy_search(ScriptedSeq2Seq(dist), src, **SPECIALS, return_scores=True, **cap)
    [[hyp]] = beam_search(ScriptedSeq2Seq(dist), src, **SPECIALS, beam_size=1, **cap)
    assert hyp.tokens == greedy[0][0]
    assert hyp.logprob == pytest.approx(greedy[0][1], abs=1e-5)


def test_n_best_larger_than_beam_is_rejected():
    with pytest.raises(ValueError, match="n_best"):
        beam_search(ScriptedSeq2Seq(dist), _src([A]), **SPECIALS, beam_size=2, n_best=3)


@pytest.mark.parametrize("vocab", [1024, 1280, 8000])
def test_blocked_candidate_selection_equals_ranking_every_extension(vocab):
    # Large vocabularies rank block maxima first (beam._top_candidates); the result must be the
    # plain top-2K over scores + log-probs, including beams at -inf and banned (-inf) tokens.
    from transformer.decoding.beam import _top_candidates
    from transformer.decoding.common import block_size as _block_size

    assert _block_size(vocab) is not None
    gen = torch.Generator().manual_seed(vocab)
    for trial in range(20):
        batch, k = 1 + trial % 4, 1 + trial % 6
        sharpness = 0.1 + 8.0 * torch.rand((), generator=gen).item()
        log_probs = torch.log_softmax(torch.randn(batch, k, vocab, generator=gen) * sharpness, -1)
        log_probs[..., :3] = float("-inf")
        scores = 3.0 * torch.randn(batch, k, generator=gen)
        if trial % 2:
            scores[:, 1:] = float("-inf")  # the first step: only beam 0 is live
        got = _top_candidates(scores, log_probs)
        top, flat = (scores.unsqueeze(-1) + log_probs).view(batch, k * vocab).topk(2 * k, dim=-1)
        assert torch.equal(got.scores, top)
        assert torch.equal(got.beams, flat // vocab) and torch.equal(got.tokens, flat % vocab)


@pytest.mark.parametrize("vocab", [1009, 1024, 8000])
def test_candidates_from_raw_scores_equal_those_from_log_probs(vocab):
    # A compiled step ranks candidates from the unnormalised scores by blocks (beam._raw_candidates):
    # the same parents and tokens as the log-softmax's path, banned ids never chosen (one of
    # them alone in its block's maximum), scores equal to float32 rounding.
    from transformer.decoding.beam import _next_log_probs, _raw_candidates, _top_candidates

    gen = torch.Generator().manual_seed(vocab)
    banned = (1, 2, vocab - 1)
    for trial in range(12):
        batch, k = 1 + trial % 4, 1 + trial % 6
        logits = torch.randn(batch * k, vocab, generator=gen) * (0.1 + 8.0 * torch.rand((), generator=gen).item())
        logits[trial % (batch * k), banned[trial % 3]] = 50.0  # a banned id holds its row's maximum
        scores = 3.0 * torch.randn(batch, k, generator=gen)
        if trial % 2:
            scores[:, 1:] = float("-inf")
        want = _top_candidates(scores, _next_log_probs(torch.log_softmax(logits, -1), k, banned))
        got = _raw_candidates(scores, logits, k, banned)
        assert torch.equal(got.beams, want.beams) and torch.equal(got.tokens, want.tokens)
        assert not torch.isin(got.tokens, torch.tensor(banned)).any()
        torch.testing.assert_close(got.scores, want.scores, rtol=0, atol=1e-5)


def test_each_parents_best_child_keeps_its_parents_slot():
    # The survivors (rank order) are laid out so that the cache copies only moved rows
    # (beam._slots_by_parent): a permutation, each parent's best-ranked child in the parent's
    # slot, the other children in the free slots in rank order.
    from transformer.decoding.beam import _slots_by_parent

    gen = torch.Generator().manual_seed(0)
    for k in (1, 2, 5, 8):
        parents = torch.randint(0, k, (50, k), generator=gen)
        order = _slots_by_parent(parents)  # (B, K) slot -> rank
        for row, slots in zip(parents.tolist(), order.tolist()):
            assert sorted(slots) == list(range(k))
            best = {p: i for i, p in reversed(list(enumerate(row)))}  # parent -> its best child's rank
            assert all(slots[p] == i for p, i in best.items())
            others = [i for i in slots if i not in best.values()]
            assert others == sorted(others)
