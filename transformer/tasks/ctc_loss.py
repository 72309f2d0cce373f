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

from transformer.tasks.glancing import ctc_best_states, ctc_required_lengths


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
    """Which target token each input position emits on the most likely CTC path
    (``tasks.glancing.ctc_best_states``, Viterbi over the blank-interleaved target).

    Args:
        log_probs: ``(B, U, V)``; in_lengths: ``(B,)``; target: ``(B, L)``; tgt_lengths: ``(B,)``.

    Returns:
        ``(B, U)`` long: the index (0 .. L-1) of the target token each input position emits on
        that path, -1 where it emits a blank, lies past ``in_lengths``, or the sentence cannot
        be aligned.
    """
    state, _ = ctc_best_states(log_probs, in_lengths, target, tgt_lengths, blank_id)  # (B, U)
    return torch.where(state.ge(0) & state.remainder(2).eq(1), state.div(2, rounding_mode="floor"), -1)
