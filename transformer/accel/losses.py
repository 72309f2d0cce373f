"""The translation loss over the real target positions only: a CPU speed-up for eager training.

Shape legend: B sentences, T target positions, D = d_model, V vocabulary, N real positions.

The reference loss (``tasks.translation.translation_loss``) projects every position to the
vocabulary and lets the loss ignore padding, so its shapes never depend on the data (what a
compiled GPU step needs). On a CPU the ``D -> V`` product, its softmax and their backward are
the costliest per-position work, padding needs none of it, and a boolean index costs no device
sync: this variant projects the N real positions alone. Same loss and gradients
(``tests/accel/test_real_positions_loss.py``).
"""

from __future__ import annotations

import torch

from transformer.tasks.losses import label_smoothed_nll


def real_positions_loss(model: torch.nn.Module, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                        label_smoothing: float, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``translation_loss`` with only the real target positions projected to the vocabulary."""
    real = tgt_out.ne(pad_id)  # (B, T)
    states = model.decoder_states(src, tgt_in)[real]  # (B, T, D) -> (N, D)
    logits = model.decoder.output_proj(states)  # (N, V)
    return label_smoothed_nll(logits, tgt_out[real], label_smoothing, pad_id)
