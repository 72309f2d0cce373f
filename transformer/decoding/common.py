"""Helpers shared by the search functions.

Shape legend: B sentences, S source length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer.decoding.api import KVCacheLike


def source_lengths(src: Tensor, pad_id: int, src_lengths: Tensor | None = None) -> Tensor:
    """Real (non-pad) length of each source sentence: ``src (B, S)`` -> ``(B,)`` long."""
    if src_lengths is not None:
        return torch.as_tensor(src_lengths, dtype=torch.long, device=src.device)
    return (src != pad_id).sum(dim=1)


def encode_source(model, src: Tensor, src_lengths: Tensor | None = None):
    """``model.encode`` of a batch. Token ids ``(B, S)`` say their lengths by their padding; an
    input kind with a front end (``transformer.kinds``: audio frames ``(B, T, F)``, float) needs
    its real lengths ``src_lengths (B,)`` too."""
    if src.is_floating_point():
        return model.encode(src, src_lengths)
    return model.encode(src)


def max_target_lengths(
    src: Tensor,
    pad_id: int,
    max_len_a: float,
    max_len_b: int,
    src_lengths: Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Per-sentence cap on generated tokens, ``floor(a * src_len + b)``, at least 1: ``(B,)`` long.

    The cap counts every generated token including a final EOS, excluding BOS (fairseq's
    ``max_len_a``/``max_len_b``); a hypothesis that reaches it without EOS is cut there.
    ``max_len`` is a hard ceiling on top (the decoder's positional range: a learned table has
    no positions past it).
    """
    lengths = source_lengths(src, pad_id, src_lengths).to(torch.float64)
    caps = torch.floor(lengths * max_len_a + max_len_b).to(torch.long)
    if max_len is not None:
        caps = caps.clamp(max=max_len)
    return caps.clamp(min=1)


def banned_ids(pad_id: int, bos_id: int, eos_id: int) -> tuple[int, ...]:
    """The ids search never generates: PAD and BOS (fairseq), BOS only where it is not EOS (the
    decoder of M2M100, NLLB and mBART-50 starts from EOS, which must stay a choice)."""
    return (pad_id,) if bos_id == eos_id else (pad_id, bos_id)


def ban_tokens(log_probs: Tensor, ids: tuple[int | None, ...], inplace: bool = False) -> Tensor:
    """``log_probs (..., V)`` with the given ids at -inf, so search never picks them.

    A copy unless ``inplace``: search passes ``inplace=True`` for the log-probabilities that
    ``decode_step`` hands over (they are the caller's to change, see ``api.Seq2SeqModel``),
    which saves copying a ``(N, V)`` tensor at every step.
    """
    banned = [i for i in ids if i is not None]
    if not banned:
        return log_probs
    out = log_probs if inplace else log_probs.clone()
    out[..., banned] = float("-inf")
    return out


def max_last(x: Tensor) -> tuple[Tensor, Tensor]:
    """``(values, indices)`` of the largest entry along the last dim, ``(..., V) -> (...)``;
    the first index on ties, as ``torch.max``.

    On a CPU the index comes from NumPy's ``argmax``: for ``(128, 8000)`` float32 scores on one
    thread ``torch.max(dim=-1)`` took ~1.3 ms and ``torch.argmax`` ~2.4 ms, NumPy 0.16 ms (it
    vectorises the reduction along a contiguous last dim), which is ~5 % of a greedy step at
    that batch. Elsewhere, and for tensors autograd tracks, ``torch.max``.
    """
    if x.device.type != "cpu" or x.requires_grad or x.dtype not in (torch.float32, torch.float64) or x.numel() == 0:
        return x.max(dim=-1)
    idx = torch.from_numpy(x.detach().contiguous().numpy().argmax(axis=-1)).to(torch.long)  # (...)
    return x.gather(-1, idx.unsqueeze(-1)).squeeze(-1), idx


# Reductions over a large vocabulary go by blocks of this many entries (``block_size``):
# vocabularies smaller than MIN_BLOCKED_VOCAB, or with no divisor in BLOCK_SIZES, take the
# plain path.
BLOCK_SIZES = (64, 50, 80, 40, 100, 32, 125, 128, 48, 96, 16)
MIN_BLOCKED_VOCAB = 1024


def block_size(vocab: int) -> int | None:
    if vocab < MIN_BLOCKED_VOCAB:
        return None
    return next((b for b in BLOCK_SIZES if vocab % b == 0), None)


def block_maxima(scores: Tensor, blk: int, banned: tuple[int | None, ...]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``scores (N, V)`` as blocks ``(N, V / blk, blk)``; each block's maximum ``(N, V / blk)``,
    and its largest allowed score (the blocks that hold a ``banned`` id taken again without it);
    the ban as a ``(V / blk, blk)`` table of 0 and -inf. One pass over the scores, vectorised
    along their contiguous blocks, where a compiled reduction with an index over a whole row is
    a scalar loop (docs/experiments.md); a chosen block's entries are then few to read."""
    n, vocab = scores.shape
    blocks = scores.view(n, vocab // blk, blk)
    tops = allowed = blocks.amax(dim=-1)  # (N, V / blk)
    ban = ban_tokens(scores.new_zeros(vocab), banned).view(vocab // blk, blk)  # (V / blk, blk)
    held = sorted({i // blk for i in banned if i is not None and 0 <= i < vocab})  # blocks holding a banned id
    if held:
        rows = torch.tensor(held, device=scores.device)
        allowed = tops.index_copy(1, rows, (blocks.index_select(1, rows) + ban.index_select(0, rows)).amax(dim=-1))
    return blocks, tops, allowed, ban


def blocks_log_sum_exp(blocks: Tensor, tops: Tensor) -> Tensor:
    """Each row's log-sum-exp from its ``blocks (N, V / blk, blk)`` and their maxima ``tops
    (N, V / blk)``: each block's sum of exponentials, then the blocks' (the log-softmax's
    normaliser, summed in another order: equal to float32 rounding). ``(N,)``."""
    sums = (blocks - tops.unsqueeze(-1)).exp().sum(dim=-1)  # (N, V / blk)
    top = tops.amax(dim=-1, keepdim=True)  # (N, 1)
    return top.squeeze(-1) + (sums * (tops - top).exp()).sum(dim=-1).log()


def reserve_steps(cache: KVCacheLike, steps: int) -> KVCacheLike:
    """Tell ``cache`` how many steps search will feed (``reserve``); returns it."""
    if steps > 0:
        cache.reserve(steps)
    return cache
