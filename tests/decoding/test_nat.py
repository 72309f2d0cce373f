"""NAT decoding pinned on the scripted fake (``decoding_fakes.ScriptedNAT``).

Mask-Predict trace for sentence 3 (length 4, T = 3), (token, prob) per position and call:
    call 0 (all masked):  (3,.9) (4,.5) (5,.6) (6,.8)        -> 3 4 5 6, conf .9 .5 .6 .8
    t=1, n=floor(4*2/3)=2: re-mask positions 1, 2 (.5, .6)
    call 1:               (3,.3) (5,.7) (6,.4) (5,.99)       -> 3 5 6 6, conf .9 .7 .4 .8
                          (position 0 keeps conf .9: were it updated to .3, t=2 would pick it;
                           position 3 keeps token 6 although call 1 offers 5)
    t=2, n=floor(4*1/3)=1: re-mask position 2 (.4)
    call 2:               (4,.99) (6,.99) (3,.95) (5,.99)    -> 3 5 3 6
"""

from __future__ import annotations

import math

import pytest
import torch
from decoding_fakes import BOS, EOS, MASK, PAD, FakeEncoderOut, ScriptedNAT

from transformer.decoding import mask_predict, nat_length_beam, nat_one_pass, predict_lengths, top_k_lengths

MP = 3  # Mask-Predict sentence
LB_SHORT = 4  # length beam: the 2nd most likely length wins
LB_LONG = 5  # length beam: the 2nd most likely length (longer) wins
WITH_EOS = 6
REPEATS = 7  # one pass gives 4 4 5 5 EOS 5

OUTPUTS = {
    (MP, 4): [
        [(3, 0.9), (4, 0.5), (5, 0.6), (6, 0.8)],
        [(3, 0.3), (5, 0.7), (6, 0.4), (5, 0.99)],
        [(4, 0.99), (6, 0.99), (3, 0.95), (5, 0.99)],
    ],
    (MP, 3): [[(6, 0.2)] * 3],
    (LB_SHORT, 3): [[(3, 0.5), (4, 0.5), (5, 0.5)]],
    (LB_SHORT, 2): [[(6, 0.9), (5, 0.9)]],
    (LB_SHORT, 5): [[(3, 0.6)] * 5],
    (LB_LONG, 2): [[(3, 0.4), (4, 0.4)]],
    (LB_LONG, 4): [[(3, 0.8), (4, 0.8), (5, 0.8), (6, 0.8)]],
    (WITH_EOS, 4): [[(3, 0.9), (EOS, 0.9), (4, 0.9), (5, 0.9)]],
    (REPEATS, 6): [[(4, 0.9), (4, 0.8), (5, 0.7), (5, 0.6), (EOS, 0.9), (5, 0.9)]],
}
LENGTHS = {
    MP: {4: 0.7, 3: 0.2},
    LB_SHORT: {3: 0.5, 2: 0.3, 5: 0.2},
    LB_LONG: {2: 0.5, 4: 0.4},
    WITH_EOS: {4: 1.0},
    REPEATS: {6: 1.0},
}


def _model(lengths=None, outputs=None) -> ScriptedNAT:
    return ScriptedNAT(lengths or LENGTHS, OUTPUTS if outputs is None else outputs)


def _src(*keys: int) -> torch.Tensor:
    return torch.tensor([[k, 3, 3] for k in keys])


def _masked_counts(model: ScriptedNAT) -> list[list[int]]:
    """Per decoder call, per row: how many real positions were given as MASK."""
    return [((c.tgt_tokens == MASK) & c.tgt_pad_mask).sum(1).tolist() for c in model.calls]


def test_one_pass_uses_the_predicted_length():
    model = _model()
    out, stats = nat_one_pass(model, _src(MP, LB_SHORT), pad_id=PAD, return_stats=True)
    assert out == [[3, 4, 5, 6], [3, 4, 5]]
    assert stats.lengths == [4, 3] and stats.iterations == [1, 1]
    assert stats.scores[0] == pytest.approx(sum(map(math.log, (0.9, 0.5, 0.6, 0.8))) / 4, abs=1e-5)
    [call] = model.calls  # a single pass, all real positions masked, padding marked as such
    assert call.tgt_pad_mask.tolist() == [[True] * 4, [True] * 3 + [False]]
    assert call.tgt_tokens.tolist() == [[MASK] * 4, [MASK] * 3 + [PAD]]


def test_one_pass_cuts_at_eos_when_asked():
    assert nat_one_pass(_model(), _src(WITH_EOS), pad_id=PAD, eos_id=EOS) == [[3]]
    assert nat_one_pass(_model(), _src(WITH_EOS), pad_id=PAD) == [[3, EOS, 4, 5]]


def test_pad_mask_and_banned_ids_are_never_predicted():
    # Every scripted position prefers PAD or MASK; the rest of the mass is uniform, so the
    # argmax falls on the lowest id not banned.
    model = ScriptedNAT({9: {2: 1.0}}, {(9, 2): [[(PAD, 0.9), (MASK, 0.9)]]})
    assert nat_one_pass(model, _src(9), pad_id=PAD) == [[BOS, BOS]]
    assert nat_one_pass(model, _src(9), pad_id=PAD, ban_ids=(BOS, EOS)) == [[3, 3]]


def test_length_beam_picks_the_best_mean_logprob_in_input_order():
    model = _model()
    out, stats = nat_length_beam(model, _src(LB_SHORT, LB_LONG), pad_id=PAD, length_beam=2, return_stats=True)
    assert out == [[6, 5], [3, 4, 5, 6]]
    assert stats.lengths == [2, 4]
    assert stats.scores == pytest.approx([math.log(0.9), math.log(0.8)], abs=1e-5)
    [call] = model.calls  # B * k rows in one pass: row b*k + j is candidate j of sentence b
    assert call.tgt_pad_mask.sum(1).tolist() == [3, 2, 2, 4]
    # With one candidate it is one-pass decoding; with three the winner is unchanged.
    one = nat_length_beam(_model(), _src(LB_SHORT, LB_LONG), pad_id=PAD, length_beam=1)
    assert one == [[3, 4, 5], [3, 4]]
    assert nat_length_beam(_model(), _src(LB_SHORT), pad_id=PAD, length_beam=3) == [[6, 5]]


def test_mask_predict_pinned_trace():
    model = _model()
    out, stats = mask_predict(model, _src(MP), pad_id=PAD, iterations=3, return_stats=True)
    assert out == [[3, 5, 3, 6]]
    assert stats.iterations == [3]
    want = sum(map(math.log, (0.9, 0.7, 0.95, 0.8))) / 4
    assert stats.scores == pytest.approx([want], abs=1e-5)
    inputs = [c.tgt_tokens[0].tolist() for c in model.calls]
    assert inputs == [[MASK] * 4, [3, MASK, MASK, 6], [3, 5, MASK, 6]]


def test_mask_predict_one_iteration_equals_one_pass():
    src = _src(MP, LB_SHORT, WITH_EOS)
    one_pass = nat_one_pass(_model(), src, pad_id=PAD, eos_id=EOS)
    assert mask_predict(_model(), src, pad_id=PAD, iterations=1, eos_id=EOS) == one_pass
    beam = nat_length_beam(_model(), src, pad_id=PAD, length_beam=2)
    assert mask_predict(_model(), src, pad_id=PAD, iterations=1, length_beam=2) == beam


def test_mask_predict_schedule_masks_floor_L_times_T_minus_t_over_T():
    # Unscripted rows get random logits; lengths 10 and 3 decoded side by side, T = 4.
    model = ScriptedNAT({20: {10: 1.0}, 21: {3: 1.0}}, {})
    _, stats = mask_predict(model, _src(20, 21), pad_id=PAD, iterations=4, return_stats=True)
    assert _masked_counts(model) == [[10, 3], [7, 2], [5, 1], [2, 0]]
    assert stats.iterations == [4, 3]  # the length-3 row had nothing to re-mask at t=3
    for before, after in zip(model.calls[1:], model.calls[2:]):
        kept = (before.tgt_tokens != MASK) & (after.tgt_tokens != MASK) & before.tgt_pad_mask
        assert torch.equal(before.tgt_tokens[kept], after.tgt_tokens[kept]), "an unmasked token changed"


def test_mask_predict_stops_when_nothing_is_left_to_remask():
    # L = 2, T = 5: n = 1, 1, 0 -> three passes, then stop.
    model = ScriptedNAT({30: {2: 1.0}}, {})
    _, stats = mask_predict(model, _src(30), pad_id=PAD, iterations=5, return_stats=True)
    assert len(model.calls) == 3 and stats.iterations == [3] and stats.mean_iterations == 3.0
    assert _masked_counts(model) == [[2], [1], [1]]


def test_copy_mode_model_decodes_one_pass_but_not_mask_predict():
    model = _model()
    model.mask_id = None  # a copy-mode model ignores tgt_tokens
    assert nat_one_pass(model, _src(MP), pad_id=PAD) == [[3, 4, 5, 6]]
    assert model.calls[0].tgt_tokens.tolist() == [[PAD] * 4]
    with pytest.raises(ValueError, match="mask_id"):
        mask_predict(model, _src(MP), pad_id=PAD, iterations=2)


def test_top_k_lengths_excludes_length_zero_and_impossible_classes():
    logits = torch.tensor([[5.0, 1.0, 3.0, float("-inf")], [0.0, 2.0, 1.0, float("-inf")]])
    lengths, logprobs = top_k_lengths(logits, k=3)
    assert lengths.tolist() == [[2, 1], [1, 2]]  # k shrinks to the 2 valid finite classes
    assert torch.isfinite(logprobs).all()


def test_model_own_length_helper_is_used():
    class OffsetNAT(ScriptedNAT):
        def top_k_lengths(self, length_logits, k, enc):
            assert isinstance(enc, FakeEncoderOut)
            return torch.full((length_logits.size(0), k), 3)  # e.g. source length + offset

    model = OffsetNAT(LENGTHS, OUTPUTS)
    enc = model.encode(_src(MP))
    assert predict_lengths(model, enc, 1).tolist() == [[3]]
    assert nat_one_pass(model, _src(MP), pad_id=PAD) == [[6, 6, 6]]


def test_collapse_repeats_keeps_one_copy_of_neighbouring_repeats_after_the_eos_cut():
    src = _src(REPEATS, MP)
    assert nat_one_pass(_model(), src, pad_id=PAD, eos_id=EOS) == [[4, 4, 5, 5], [3, 4, 5, 6]]
    out, stats = nat_one_pass(_model(), src, pad_id=PAD, eos_id=EOS, collapse_repeats=True, return_stats=True)
    assert out == [[4, 5], [3, 4, 5, 6]]  # the 5 after EOS is cut, not merged
    # the statistics describe the decoded candidate, repeats included
    assert stats.lengths == [6, 4]
    assert stats.scores[0] == pytest.approx(sum(map(math.log, (0.9, 0.8, 0.7, 0.6, 0.9, 0.9))) / 6, abs=1e-5)
    assert nat_length_beam(_model(), _src(REPEATS), pad_id=PAD, length_beam=1, eos_id=EOS,
                           collapse_repeats=True) == [[4, 5]]


def test_collapse_repeats_in_mask_predict_touches_only_the_output():
    # T = 2 on the Mask-Predict sentence: call 0 gives 3 4 5 6, call 1 re-predicts positions
    # 1 and 2 as 5 and 6, so the final candidate is 3 5 6 6.
    plain = _model()
    assert mask_predict(plain, _src(MP), pad_id=PAD, iterations=2) == [[3, 5, 6, 6]]
    collapsed = _model()
    assert mask_predict(collapsed, _src(MP), pad_id=PAD, iterations=2, collapse_repeats=True) == [[3, 5, 6]]
    # the model saw the same inputs either way
    assert len(collapsed.calls) == len(plain.calls) == 2
    for a, b in zip(plain.calls, collapsed.calls):
        assert torch.equal(a.tgt_tokens, b.tgt_tokens) and torch.equal(a.tgt_pad_mask, b.tgt_pad_mask)
