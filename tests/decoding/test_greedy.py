"""Greedy search on the scripted fake decoder (traces in scripted_tables.py)."""

from __future__ import annotations

import math

import pytest
import torch
from decoding_fakes import BOS, EOS, PAD, ScriptedSeq2Seq
from scripted_tables import A, C, D, dist

from transformer.decoding import greedy_search

SPECIALS = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}


def _src(*rows: list[int]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


def test_greedy_follows_the_argmax_and_stops_at_eos():
    model = ScriptedSeq2Seq(dist)
    [(tokens, score)] = greedy_search(model, _src([A, 3]), **SPECIALS, return_scores=True)
    assert tokens == [3, 5]
    assert score == pytest.approx(math.log(0.6 * 0.55 * 0.9), abs=1e-5)


def test_greedy_batch_keeps_input_order_and_finished_rows_stop_growing():
    # A ends after 3 steps, D at once; C never emits EOS and is cut at floor(1 * 2 + 1) = 3.
    model = ScriptedSeq2Seq(dist)
    src = _src([A, 3], [C, 3], [D, 3])
    out = greedy_search(model, src, **SPECIALS, max_len_a=1.0, max_len_b=1, return_scores=True)
    assert [t for t, _ in out] == [[3, 5], [3, 3, 3], []]
    assert out[0][1] == pytest.approx(math.log(0.297), abs=1e-5)
    assert out[1][1] == pytest.approx(math.log(0.6**3), abs=1e-5)
    assert out[2][1] == pytest.approx(math.log(0.55), abs=1e-5)
    # Finished sentences leave the batch: nothing is computed for D after its EOS, while
    # A and C (still live) went on being decoded beside each other.
    assert not any(key == D and EOS in prefix for key, prefix in model.queries)
    assert any(key == C and len(prefix) == 2 for key, prefix in model.queries)  # its 3rd step


def test_finished_rows_that_ride_along_keep_their_outputs_and_scores():
    """A drop copies the rows that go on, so a finished sentence may stay in a large batch for
    a few steps: what it is fed and scores then reaches neither its tokens nor its score."""
    model = ScriptedSeq2Seq(dist)
    # D ends at once and C is cut at its cap floor(1 * 1 + 0) = 1; the ten A rows end at step 3.
    src = _src([D, 3, 3], [C], *[[A, 3, 3]] * 10)
    out = greedy_search(model, src, **SPECIALS, max_len_a=1.0, max_len_b=0, return_scores=True)
    assert [t for t, _ in out] == [[], [3]] + [[3, 5]] * 10
    assert [s for _, s in out] == pytest.approx([math.log(0.55), math.log(0.6)] + [math.log(0.297)] * 10, abs=1e-5)
    assert any(key == D and EOS in prefix for key, prefix in model.queries)  # D rode along


def test_greedy_length_cap_is_per_sentence_from_the_real_source_length():
    model = ScriptedSeq2Seq(dist)
    src = _src([C, 3, 3], [C])  # real lengths 3 and 1
    assert greedy_search(model, src, **SPECIALS, max_len_a=1.0, max_len_b=0) == [[3, 3, 3], [3]]
    lengths = torch.tensor([2, 2])  # explicit lengths override the pad count
    out = greedy_search(model, src, **SPECIALS, max_len_a=1.0, max_len_b=0, src_lengths=lengths)
    assert out == [[3, 3], [3, 3]]


def test_greedy_never_emits_pad_or_bos():
    model = ScriptedSeq2Seq(
        lambda key, prefix: {PAD: 0.5, BOS: 0.3, 4: 0.2} if len(prefix) < 2 else {EOS: 1.0}
    )
    assert greedy_search(model, _src([A]), **SPECIALS) == [[4, 4]]


def test_hard_max_len_caps_every_sentence():
    from transformer.decoding.common import max_target_lengths

    src = torch.tensor([[5, 6, 7, 8, 2], [5, 2, 0, 0, 0]])
    caps = max_target_lengths(src, pad_id=0, max_len_a=2.0, max_len_b=10)
    assert caps.tolist() == [20, 14]
    assert max_target_lengths(src, 0, 2.0, 10, max_len=16).tolist() == [16, 14]


@pytest.mark.parametrize("vocab", [50, 1009, 8000])
def test_the_compiled_steps_choice_is_the_first_largest_allowed_score(vocab):
    # A compiled greedy step chooses from the raw scores (greedy._traced_choice), by blocks over
    # a large vocabulary: the first index of the largest allowed score, as torch.max, banned ids
    # (here holding the maximum) never, and with scores the log-softmax's value of the choice.
    from types import SimpleNamespace

    from transformer.decoding.greedy import _traced_choice

    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(9, vocab, generator=gen) * 4.0
    logits[0, BOS] = logits[1, PAD] = 50.0  # banned ids holding the row's maximum
    logits[2, [7, vocab - 3]] = logits[3, [10, 11]] = 40.0  # ties: across blocks, within one
    model = SimpleNamespace(decode_step_logits=lambda last, enc, cache: (logits.clone(), cache))
    allowed = logits.clone()
    allowed[:, [PAD, BOS]] = float("-inf")
    want_lp, want = torch.log_softmax(logits, -1).gather(1, allowed.argmax(-1, keepdim=True)).squeeze(1), allowed.argmax(-1)
    assert want[2] == 7 and want[3] == 10
    for with_scores in (False, True):
        lp, best, _ = _traced_choice(model, (PAD, BOS), with_scores)(None, None, None)
        assert torch.equal(best, want)
        if with_scores:
            torch.testing.assert_close(lp, want_lp, rtol=0, atol=1e-5)
        else:
            assert lp is None
