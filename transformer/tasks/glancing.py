"""Glancing training (GLAT, Qian et al. 2021) and the CTC alignment it needs (Gu & Kong 2021).

A first decoder pass (no gradient) predicts every position; the number of positions whose gold
token is then revealed to the second pass is ``floor(ratio * errors)``: the more the first pass
got wrong, the more of the answer the second pass sees, so the model learns word
interdependencies gradually. The positions to reveal are drawn uniformly among the real ones
(GLAT's random sampling). ``ratio`` is annealed linearly (``GlancingSchedule``).

For a CTC model the "gold token" of a decoder position comes from the best alignment of the
target (the Viterbi path of the CTC loss, ``ctc_best_alignment``), and the errors are the
Hamming distance between the first pass's argmax path and that alignment (Gu & Kong 2021).

Shape legend: B sentences, T positions (target or upsampled), L target length, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class GlancingSchedule:
    """The glancing ratio at a training step: ``ratio_start`` linearly to ``ratio_end`` over
    ``anneal_steps`` updates, then ``ratio_end`` (``anneal_steps = 0``: ``ratio_end`` throughout).
    Both ratios 0 disable glancing."""

    ratio_start: float = 0.0
    ratio_end: float = 0.0
    anneal_steps: int = 0

    def __post_init__(self) -> None:
        if not (0 <= self.ratio_start <= 1 and 0 <= self.ratio_end <= 1) or self.anneal_steps < 0:
            raise ValueError(f"task.glancing needs ratios in [0, 1] and anneal_steps >= 0, got {self}")

    @classmethod
    def from_config(cls, cfg: dict | None) -> "GlancingSchedule":
        """From ``task.glancing`` (``None``: disabled)."""
        cfg = dict(cfg or {})
        return cls(float(cfg.get("ratio_start", 0.0)), float(cfg.get("ratio_end", 0.0)),
                   int(cfg.get("anneal_steps", 0)))

    @property
    def enabled(self) -> bool:
        return self.ratio_start > 0 or self.ratio_end > 0

    def ratio(self, step: int) -> float:
        """The ratio after ``step`` updates."""
        if self.anneal_steps <= 0:
            return self.ratio_end
        progress = min(max(step, 0) / self.anneal_steps, 1.0)
        return self.ratio_start + (self.ratio_end - self.ratio_start) * progress


def reveal_counts(errors: Tensor, ratio: float) -> Tensor:
    """``floor(ratio * errors)`` per row: ``errors (B,)`` long -> ``(B,)`` long."""
    return (errors.double() * ratio).floor().long()


def reveal_positions(real: Tensor, counts: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Exactly ``min(counts[b], real[b].sum())`` real positions of each row, drawn uniformly.

    Args:
        real: ``(B, T)`` bool, True = real position; counts: ``(B,)`` long.

    Returns:
        ``(B, T)`` bool, True = revealed; padding never revealed.
    """
    scores = torch.rand(real.shape, device=real.device, generator=generator)  # (B, T)
    scores = scores.masked_fill(~real, 2.0)  # padding sorts last
    ranks = scores.argsort(1).argsort(1)  # (B, T): rank of each position in a random order
    return (ranks < counts.unsqueeze(1)) & real  # (B, T) < (B, 1) -> (B, T)


def ctc_required_lengths(targets: Tensor, target_lengths: Tensor) -> Tensor:
    """The fewest CTC input positions that can emit each target: its length plus one blank
    between every pair of equal neighbours. ``targets (B, L)`` -> ``(B,)`` long."""
    pos = torch.arange(targets.size(1), device=targets.device).unsqueeze(0)  # (1, L)
    inside = pos[:, 1:] < target_lengths.unsqueeze(1)  # (B, L - 1): pairs inside the target
    repeats = (targets[:, 1:].eq(targets[:, :-1]) & inside).sum(1)  # (B,)
    return target_lengths + repeats


@torch.no_grad()
def ctc_best_alignment(log_probs: Tensor, input_lengths: Tensor, targets: Tensor, target_lengths: Tensor,
                       blank_id: int, pad_id: int) -> tuple[Tensor, Tensor]:
    """The most probable CTC path that collapses to each target, as the ids it emits
    (:func:`ctc_best_states`' lattice states read as tokens and blanks).

    Returns:
        ``path (B, T)`` long (``pad_id`` past each row's input length) and ``feasible (B,)``
        bool; a row whose input is too short for its target gets an all-``pad_id`` path.
    """
    state, feasible = ctc_best_states(log_probs, input_lengths, targets, target_lengths, blank_id)
    path = _interleave_blanks(targets, blank_id).gather(1, state.clamp(min=0))  # (B, T)
    return path.masked_fill(state.lt(0), pad_id), feasible


def ctc_best_states(log_probs: Tensor, input_lengths: Tensor, targets: Tensor, target_lengths: Tensor,
                    blank_id: int) -> tuple[Tensor, Tensor]:
    """The most probable CTC path that collapses to each target (Viterbi over the CTC lattice).

    States are the target interleaved with blanks, ``_ y1 _ y2 ... yL _`` (``2L + 1`` of them);
    from state ``s`` a path moves to ``s``, ``s + 1``, or ``s + 2`` when that skips a blank
    between two different tokens (Graves et al. 2006), and ends in one of the last two states.

    Args:
        log_probs: ``(B, T, V)`` per-position log-probabilities; input_lengths: ``(B,)``.
        targets: ``(B, L)`` padded target ids; target_lengths: ``(B,)``.

    Returns:
        ``state (B, T)`` long, the lattice state each position is in on that path (``2j + 1``:
        emitting target token ``j``; even: a blank), -1 past each row's input length; and
        ``feasible (B,)`` bool; a row whose input is too short for its target gets all -1.
    """
    b, t_max, _ = log_probs.shape
    log_probs = log_probs.float()
    states = _interleave_blanks(targets, blank_id)  # (B, 2L + 1)
    n = states.size(1)
    emit = log_probs.gather(2, states.unsqueeze(1).expand(-1, t_max, -1))  # (B, T, 2L + 1)
    can_skip = torch.zeros_like(states, dtype=torch.bool)
    can_skip[:, 2:] = states[:, 2:].ne(blank_id) & states[:, 2:].ne(states[:, :-2])  # (B, 2L + 1)
    ninf = float("-inf")
    alpha = torch.full((b, n), ninf, device=log_probs.device)  # best log-prob ending in each state
    alpha[:, 0] = emit[:, 0, 0]
    if n > 1:
        alpha[:, 1] = emit[:, 0, 1].masked_fill(target_lengths.eq(0), ninf)
    back = torch.zeros(b, t_max, n, dtype=torch.long, device=log_probs.device)  # steps back: 0, 1 or 2
    for t in range(1, t_max):
        stay = alpha
        step = torch.cat([alpha.new_full((b, 1), ninf), alpha[:, :-1]], 1)  # from s - 1
        skip = torch.cat([alpha.new_full((b, 2), ninf), alpha[:, :-2]], 1).masked_fill(~can_skip, ninf)  # s - 2
        best, arg = torch.stack([stay, step, skip], -1).max(-1)  # (B, 2L + 1)
        active = (t < input_lengths).unsqueeze(1)  # (B, 1): rows still inside their input
        alpha = torch.where(active, best + emit[:, t], alpha)
        back[:, t] = arg
    return _backtrack(alpha, back, input_lengths, target_lengths)


def _interleave_blanks(targets: Tensor, blank_id: int) -> Tensor:
    """``(B, L)`` -> ``(B, 2L + 1)``: a blank before, between and after the tokens."""
    b, length = targets.shape
    states = targets.new_full((b, 2 * length + 1), blank_id)
    states[:, 1::2] = targets
    return states


def _backtrack(alpha: Tensor, back: Tensor, input_lengths: Tensor, target_lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Follow the back-pointers from the better of each row's two final states."""
    b, t_max, _ = back.shape
    rows = torch.arange(b, device=alpha.device)
    last = 2 * target_lengths  # (B,): final blank state; last - 1 is the final token
    end_blank = alpha[rows, last]
    end_token = alpha[rows, (last - 1).clamp(min=0)].masked_fill(target_lengths.eq(0), float("-inf"))
    feasible = torch.isfinite(torch.maximum(end_blank, end_token))  # (B,)
    s = torch.where(end_token > end_blank, last - 1, last)  # (B,)
    path = torch.full((b, t_max), -1, dtype=torch.long, device=alpha.device)
    for t in range(t_max - 1, -1, -1):
        active = t < input_lengths  # (B,)
        path[:, t] = torch.where(active, s, path[:, t])
        s = torch.where(active, s - back[rows, t, s], s)
    return path.masked_fill(~feasible.unsqueeze(1), -1), feasible
