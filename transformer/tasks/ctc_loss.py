"""What the tasks that train a CTC output share: their targets, the data module's ``tgt_in``
without its first token (BOS, or a target tag), which the Mask-Predict task predicts too, and the
CTC loss. The CTC task's decoder (``tasks.ctc``) and the CTC head of joint CTC-attention
training (``tasks.translation``, ``task.ctc_weight``) are scored by the same code.

Shape legend: B sentences, T target positions, U CTC input positions, L target tokens, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer.tasks.glancing import ctc_required_lengths


def nat_targets(tgt_in: Tensor, pad_id: int) -> tuple[Tensor, Tensor]:
    """The NAT target (no BOS, no EOS) and its padding mask from the data module's ``tgt_in``.

    Args:
        tgt_in: ``(B, T + 1)`` BOS + target, right-padded with ``pad_id``.

    Returns:
        ``target (B, T)`` (PAD after each sentence) and ``tgt_pad_mask (B, T)`` (True = real).
    """
    target = tgt_in[:, 1:]  # (B, T + 1) -> (B, T): drop the BOS column
    real = target.ne(pad_id)  # (B, T)
    return target, real


def ctc_losses(log_probs: Tensor, in_lengths: Tensor, target: Tensor, tgt_lengths: Tensor,
               blank_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """Summed CTC loss, the target tokens it covers, and the sentences it cannot align.

    Args:
        log_probs: ``(B, U, V)`` fp32; in_lengths: ``(B,)``; target: ``(B, L)``; tgt_lengths: ``(B,)``.

    Returns:
        ``(loss_sum, n_tokens, n_infeasible)``, scalars; infeasible sentences add 0 and no tokens.
    """
    losses = F.ctc_loss(log_probs.transpose(0, 1), target, in_lengths, tgt_lengths, blank=blank_id,
                        reduction="none", zero_infinity=True)  # (U, B, V) -> (B,)
    feasible = in_lengths >= ctc_required_lengths(target, tgt_lengths)  # (B,)
    return losses.sum(), (tgt_lengths * feasible).sum(), (~feasible).sum()


@torch.no_grad()
def ctc_alignment(log_probs: Tensor, in_lengths: Tensor, target: Tensor, tgt_lengths: Tensor,
                  blank_id: int) -> Tensor:
    """The most likely CTC path of each sentence (Viterbi over the blank-interleaved target).

    Args:
        log_probs: ``(B, U, V)``; in_lengths: ``(B,)``; target: ``(B, L)``; tgt_lengths: ``(B,)``.

    Returns:
        ``(B, U)`` long: the index (0 .. L-1) of the target token each input position emits on
        that path, -1 where it emits a blank, lies past ``in_lengths``, or the sentence cannot
        be aligned (fewer positions than ``ctc_required_lengths``).
    """
    b, u_max, _ = log_probs.shape
    n_states = 2 * target.size(1) + 1
    ext = target.new_full((b, n_states), blank_id)  # (B, 2L+1): blank, y0, blank, y1, ..., blank
    ext[:, 1::2] = target
    emit = log_probs.float().gather(2, ext.unsqueeze(1).expand(b, u_max, n_states))  # (B, U, 2L+1)
    # A token may be reached from two states back (skipping a blank) unless it repeats that token.
    skip = torch.zeros_like(ext, dtype=torch.bool)
    skip[:, 2:] = ext[:, 2:].ne(blank_id) & ext[:, 2:].ne(ext[:, :-2])
    neg = torch.tensor(float("-inf"), device=emit.device)
    score = torch.full((b, n_states), float("-inf"), device=emit.device)  # best path score per state
    score[:, :2] = emit[:, 0, :2]
    back = torch.zeros((b, u_max, n_states), dtype=torch.long, device=emit.device)  # 0 stay, 1 or 2 back
    for u in range(1, u_max):
        one = F.pad(score[:, :-1], (1, 0), value=float("-inf"))  # (B, 2L+1): from state s-1
        two = torch.where(skip, F.pad(score[:, :-2], (2, 0), value=float("-inf")), neg)
        best, step = torch.stack([score, one, two], dim=-1).max(dim=-1)  # (B, 2L+1)
        active = (u < in_lengths).unsqueeze(1)  # (B, 1): positions past a sentence's end keep its path
        score = torch.where(active, best + emit[:, u], score)
        back[:, u] = torch.where(active, step, 0)
    rows = torch.arange(b, device=emit.device)
    last_blank, last_token = 2 * tgt_lengths, (2 * tgt_lengths - 1).clamp(min=0)
    end_score = torch.maximum(score[rows, last_token], score[rows, last_blank])  # (B,)
    state = torch.where(score[rows, last_token] > score[rows, last_blank], last_token, last_blank)  # (B,)
    path = torch.empty((b, u_max), dtype=torch.long, device=emit.device)
    for u in range(u_max - 1, -1, -1):
        path[:, u] = state
        state = state - back[rows, u, state]
    feasible = (in_lengths >= ctc_required_lengths(target, tgt_lengths)) & end_score.isfinite()
    token = torch.where(path % 2 == 1, (path - 1) // 2, -1)  # (B, U)
    inside = torch.arange(u_max, device=emit.device).unsqueeze(0) < in_lengths.unsqueeze(1)
    return token.masked_fill(~(inside & feasible.unsqueeze(1)), -1)
