"""Label-smoothed cross-entropy over a large vocabulary, a few rows at a time, for CPU training.

``tasks.translation.label_smoothed_nll`` is the definition: ``log_softmax`` of the ``(N, V)``
scores in fp32, a gather for the gold token, a sum for the smoothing term. Run eagerly on a CPU,
every one of those steps writes or reads a whole ``(N, V)`` fp32 tensor, forward and backward
(the fp32 copy of bf16 scores, the log-probabilities, the zeros the gather's and the PAD column's
gradients scatter into, the log-softmax's gradient, its cast back to bf16): with 8,000 classes
and 3,000 target tokens each is 96 MB that leaves the caches and, freshly allocated, faults in
its pages. That was 25 % of a bf16 training step of the CPU recipe.

Here the same loss and the same gradients are computed over blocks of rows small enough to stay
in the core's cache, with torch's fused log-softmax and softmax kernels. Forward keeps two
numbers a row (the gold log-probability and the sum of the smoothed ones) and the scores
themselves, which the output layer's product wrote anyway. Backward recomputes the softmax a
block at a time and writes the gradient once, in the scores' dtype::

    d loss / d x_j = p_j - q_j,   p = softmax(x),   q = (1 - eps) one_hot(gold) + eps / (V - 1) [j != PAD]

(``eps / V`` on every class when there is no PAD class). Used by ``task.loss=real_positions``
(eager CPU training) for fp32 and bf16 scores on a CPU (``runs_on``); elsewhere that loss calls
``label_smoothed_nll`` itself.

Shape legend: N rows (target tokens), V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Rows per block: one block's fp32 scores (rows x V x 4 bytes) about 512 KB, inside a core's L2.
BLOCK_BYTES = 1 << 19


def block_rows(vocab_size: int) -> int:
    """Rows of one block for a vocabulary of ``vocab_size`` classes."""
    return max(1, BLOCK_BYTES // (4 * vocab_size))


def _smoothing(epsilon: float, vocab_size: int, pad_id: int | None) -> float:
    """The mass each non-gold, non-PAD class gets in the target distribution."""
    return epsilon / (vocab_size - 1 if pad_id is not None else vocab_size)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row ``(smoothed loss, nll)`` of ``(N, V)`` scores, in fp32; gradients by blocks."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, pad_id: int | None):
        n, v = logits.shape
        rows = block_rows(v)
        nll = torch.empty(n, dtype=torch.float32)
        smooth = torch.empty(n, dtype=torch.float32)  # minus the summed log-probabilities of the smoothed classes
        for start in range(0, n, rows):
            block = slice(start, start + rows)
            lprobs = torch.log_softmax(logits[block], dim=-1, dtype=torch.float32)  # (r, V)
            nll[block] = -lprobs.gather(1, target[block].unsqueeze(1)).squeeze(1)
            smooth[block] = -lprobs.sum(-1)
            if pad_id is not None:
                smooth[block] += lprobs[:, pad_id]
        smooth /= v - 1 if pad_id is not None else v
        ctx.save_for_backward(logits, target)
        ctx.epsilon, ctx.pad_id = epsilon, pad_id
        return (1.0 - epsilon) * nll + epsilon * smooth, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        logits, target = ctx.saved_tensors
        eps, pad_id = ctx.epsilon, ctx.pad_id
        n, v = logits.shape
        rows = block_rows(v)
        spread = grad_loss * _smoothing(eps, v, pad_id)  # (N,) every class's share of q
        on_gold = grad_loss * (1.0 - eps) + grad_nll  # (N,) the gold class's extra share
        on_all = (grad_loss + grad_nll).unsqueeze(1)  # (N, 1) the softmax term's weight
        grad = torch.empty_like(logits)
        for start in range(0, n, rows):
            block = slice(start, start + rows)
            g = torch.softmax(logits[block], dim=-1, dtype=torch.float32).mul_(on_all[block])  # (r, V)
            g.sub_(spread[block].unsqueeze(1))
            if pad_id is not None:
                g[:, pad_id] += spread[block]
            g.scatter_add_(1, target[block].unsqueeze(1), -on_gold[block].unsqueeze(1))
            grad[block] = g
        return grad, None, None, None


def runs_on(logits: Tensor) -> bool:
    """Whether ``smoothed_cross_entropy`` takes these scores: fp32 or bf16 on a CPU."""
    return logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.bfloat16)


def smoothed_cross_entropy(logits: Tensor, target: Tensor, epsilon: float, pad_id: int | None
                           ) -> tuple[Tensor, Tensor]:
    """``label_smoothed_nll(logits, target, epsilon, pad_id)``: the same ``(loss, nll)``, means
    over the real target tokens (not ``-100``, not ``pad_id``), and the same gradients, by
    blocks of rows (``logits (..., V)`` with ``runs_on(logits)``, ``target (...)``)."""
    logits = logits.reshape(-1, logits.size(-1))  # (N, V)
    target = target.reshape(-1)  # (N,)
    real = target.ne(-100)
    if pad_id is not None:
        real &= target.ne(pad_id)
    with torch.autocast("cpu", enabled=False):
        loss, nll = _SmoothedCrossEntropy.apply(logits, target.masked_fill(~real, 0), epsilon, pad_id)
        n_real = real.sum().clamp_min(1)
        return (loss * real).sum() / n_real, (nll * real).sum() / n_real
