"""Training losses shared by the tasks.

Shape legend: B batch, T target positions, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_nll(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed cross-entropy averaged over non-pad target tokens.

    The target distribution puts ``1 - epsilon`` on the gold token and spreads ``epsilon``
    uniformly over every class except PAD (Szegedy et al. 2016, as used by Vaswani et al.
    2017): PAD is never a prediction, so it gets no smoothing mass.

    Args:
        logits: (B, T, V) unnormalised scores.
        target: (B, T) gold ids; positions equal to ``pad_id`` (or -100) are ignored.
        epsilon: smoothing mass in [0, 1).
        pad_id: the padding id, excluded from the smoothing distribution; None if no PAD class.

    Returns:
        ``(loss, nll)``: the smoothed loss and the plain NLL, both means over real tokens.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    n_classes = lprobs.size(-1)
    real = target.ne(-100)
    if pad_id is not None:
        real &= target.ne(pad_id)
    safe_target = target.masked_fill(~real, 0)
    nll = -lprobs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    smooth_sum = -lprobs.sum(-1)  # (B, T)
    n_smooth = n_classes
    if pad_id is not None:
        smooth_sum = smooth_sum + lprobs[..., pad_id]
        n_smooth -= 1
    smooth = smooth_sum / n_smooth
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    n_real = real.sum().clamp_min(1)
    return (loss * real).sum() / n_real, (nll * real).sum() / n_real


def all_positions_loss(model: torch.nn.Module, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                       label_smoothing: float, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced ``(loss, nll)`` of one translation batch, means over the real target tokens.

    ``src (B, S)``, ``tgt_in``/``tgt_out (B, T)``. Every position goes through the model and the
    vocabulary projection and padded positions are ignored by the loss, so shapes depend only on
    ``(B, S, T)``: no boolean indexing, no host sync, one compiled graph per batch shape (what a
    GPU and ``torch.compile`` want).
    """
    logits = model(src, tgt_in)  # (B, T, V)
    return label_smoothed_nll(logits, tgt_out, label_smoothing, pad_id)


def real_positions_loss(model: torch.nn.Module, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                        label_smoothing: float, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``all_positions_loss`` with only the N real target positions projected to the vocabulary.

    On a CPU the ``D -> V`` product, its softmax and their backward are the costliest
    per-position work and padding needs none of it; a boolean index costs no device sync there.
    The shapes depend on the data, so it suits eager CPU training, not a compiled step. Same
    loss and gradients as ``all_positions_loss``.
    """
    real = tgt_out.ne(pad_id)  # (B, T)
    states = model.decoder_states(src, tgt_in)[real]  # (B, T, D) -> (N, D)
    return label_smoothed_nll(model.project(states), tgt_out[real], label_smoothing, pad_id)  # (N, V)


# The translation losses by the name ``task.loss`` gives.
TRANSLATION_LOSSES = {"all_positions": all_positions_loss, "real_positions": real_positions_loss}
