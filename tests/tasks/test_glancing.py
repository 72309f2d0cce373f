"""Glancing training: the annealed ratio, exact reveal counts, and (CMLM) revealed tokens kept
out of the loss."""

from __future__ import annotations

import math

import pytest
import torch

from transformer.tasks.glancing import GlancingSchedule, reveal_counts, reveal_positions
from transformer.tasks.nat import nat_targets

from test_nat_task import MASK, PAD, make_batch, make_task


def test_ratio_is_annealed_linearly_then_held():
    s = GlancingSchedule(0.5, 0.3, 100)
    assert s.enabled
    assert [s.ratio(x) for x in (0, 50, 100, 1000)] == pytest.approx([0.5, 0.4, 0.3, 0.3])
    assert GlancingSchedule(0.5, 0.2, 0).ratio(0) == 0.2
    assert not GlancingSchedule.from_config(None).enabled
    assert not GlancingSchedule.from_config({"ratio_start": 0, "ratio_end": 0, "anneal_steps": 10}).enabled


def test_reveal_positions_draws_exactly_the_count_among_real_positions():
    real = torch.tensor([[True] * 6 + [False] * 2, [True] * 3 + [False] * 5, [False] * 8])
    counts = reveal_counts(torch.tensor([5, 3, 0]), 0.5)
    assert counts.tolist() == [2, 1, 0]
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        revealed = reveal_positions(real, counts, gen)
        assert revealed.sum(1).tolist() == [2, 1, 0] and not bool((revealed & ~real).any())


@pytest.mark.parametrize("decoder_input", ["mask", "copy"])
@pytest.mark.parametrize("ratio", [0.3, 0.5, 1.0])
def test_glancing_reveals_floor_ratio_times_hamming_and_keeps_them_out_of_the_loss(decoder_input, ratio):
    from transformer.tasks.translation import label_smoothed_nll

    task = make_task(decoder_input)
    batch = make_batch()
    target, real = nat_targets(batch["tgt_in"], PAD)
    enc = task.model.encode(batch["src"])
    first_in = target.masked_fill(real, MASK) if decoder_input == "mask" else target
    errors = (task.model.decode(enc, first_in, real).argmax(-1).ne(target) & real).sum(1)
    out = task.compute_losses(batch, glance_ratio=ratio, generator=torch.Generator().manual_seed(3))
    revealed = out["revealed"]
    assert revealed.sum(1).tolist() == [math.floor(ratio * e) for e in errors.tolist()]
    assert not bool((revealed & ~real).any())
    scored = real & ~revealed
    assert int(out["n_tokens"]) == int(scored.sum())
    # the loss is exactly the loss of the unrevealed positions, revealed ones holding gold inputs
    tokens = target.masked_fill(scored, MASK) if decoder_input == "mask" else target
    full = task.model.decode(enc, tokens, real, reveal=revealed)  # (B, T, V)
    ref, _ = label_smoothed_nll(full, target.masked_fill(~scored, -100), task.hparams.label_smoothing, PAD)
    torch.testing.assert_close(out["token_loss"], ref)


def test_revealed_gold_tokens_reach_the_decoder_in_copy_mode():
    task = make_task("copy")
    batch = make_batch()
    target, real = nat_targets(batch["tgt_in"], PAD)
    enc = task.model.encode(batch["src"])
    reveal = torch.zeros_like(real)
    reveal[0, 1] = True
    assert not torch.allclose(task.model.decode(enc, target, real), task.model.decode(enc, target, real, reveal=reveal))


def test_training_step_uses_the_schedule():
    task = make_task("mask", glancing={"ratio_start": 1.0, "ratio_end": 0.5, "anneal_steps": 10})
    assert task.glancing.ratio(task.global_step) == 1.0
    with pytest.raises(ValueError, match="ratios in"):
        make_task("mask", glancing={"ratio_start": -0.1})
