"""Decoding for non-autoregressive models: one pass, length beam, and Mask-Predict.

All three share one routine: predict the top-``k`` target lengths of each sentence, decode the
``B * k`` length candidates as one batch (row ``b * k + j`` is candidate ``j`` of sentence
``b``), optionally refine them with Mask-Predict, and keep each sentence's candidate with the
best mean token log-probability (Ghazvininejad et al., 2019, "Mask-Predict", sec. 3.3).

Mask-Predict (ibid., sec. 3.2): iteration 0 predicts every position from an all-mask input;
iteration ``t`` in ``1..T-1`` re-masks the ``n = floor(L * (T - t) / T)`` positions of lowest
confidence (L = candidate length) and predicts only those. Positions that are not re-masked
keep their token and their confidence; a confidence changes only when its position is
re-predicted. With ``T = 1`` Mask-Predict is one-pass decoding.

PAD and the model's ``mask_id`` are never predicted (their log-probability is set to -inf
before the argmax). Confidences are log-probabilities under the model's full distribution.

Shape legend:
    B sentences     k length candidates per sentence     N = B * k rows
    T longest candidate length     V vocabulary size     L length classes
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer.decoding.api import EncoderOutLike, NATModel
from transformer.decoding.common import ban_tokens, max_last


@dataclass(frozen=True)
class NATStats:
    """Per sentence, in input order: chosen length, its mean token log-prob, decoder passes.

    ``iterations`` counts the decoder passes that changed something for the sentence (1 for
    one-pass decoding); with a length beam it is the most any of its candidates needed, since
    they are decoded side by side.
    """

    lengths: list[int]
    scores: list[float]
    iterations: list[int]

    @property
    def mean_iterations(self) -> float:
        """Average decoder passes per sentence (the usual NAT speed statistic)."""
        return sum(self.iterations) / max(len(self.iterations), 1)


NATResult = list[list[int]] | tuple[list[list[int]], NATStats]


def top_k_lengths(length_logits: Tensor, k: int, min_length: int = 1) -> tuple[Tensor, Tensor]:
    """The ``k`` most likely absolute lengths, best first, class ``c`` meaning length ``c``.

    Classes below ``min_length`` are excluded (rather than clamped, so candidates stay
    distinct); ``k`` shrinks to the fewest classes of finite logit left in any row.

    Args:
        length_logits: ``(B, L)``.
    Returns:
        ``lengths (B, k)`` long and their log-probabilities ``(B, k)``.
    """
    log_probs = F.log_softmax(length_logits.float(), dim=-1)  # (B, L)
    log_probs[:, :min_length] = float("-inf")
    available = int(torch.isfinite(log_probs).sum(dim=-1).min())
    top, lengths = log_probs.topk(max(1, min(k, available)), dim=-1)  # (B, k)
    return lengths.clamp(min=min_length), top


def predict_lengths(model: NATModel, enc: EncoderOutLike, k: int) -> Tensor:
    """Top-``k`` absolute target lengths ``(B, k)``, best first.

    Uses the model's own ``top_k_lengths(length_logits, k, enc) -> (B, k)`` when it has one (a
    model that predicts offsets from the source length knows how to turn classes into lengths,
    as ``models.NonAutoregressiveModel`` does); otherwise class ``c`` of ``predict_length``
    means length ``c`` (``top_k_lengths`` above).
    """
    length_logits = model.predict_length(enc)  # (B, L)
    own = getattr(model, "top_k_lengths", None)
    if callable(own):
        return own(length_logits, k, enc).long().clamp(min=1)
    return top_k_lengths(length_logits, k)[0]


@torch.inference_mode()
def nat_one_pass(
    model: NATModel,
    src: Tensor,
    pad_id: int,
    eos_id: int | None = None,
    ban_ids: Sequence[int] = (),
    return_stats: bool = False,
    collapse_repeats: bool = False,
) -> NATResult:
    """Argmax at every position of the single most likely length, in one decoder pass.

    Args:
        model: ``decoding.api.NATModel``, in ``eval()`` mode.
        src: ``(B, S)`` source ids, right-padded with ``pad_id``.
        pad_id: padding id.
        eos_id: if given, each output is cut at its first ``eos_id``.
        ban_ids: further ids never to predict (e.g. BOS).
        return_stats: also return ``NATStats``.
        collapse_repeats: replace each run of one id repeated at consecutive positions by a
            single copy in the returned ids (after the EOS cut). Parallel decoding's typical
            error is the same token at neighbouring positions ("a man man is"); collapsing is a
            common post-processing step for NAT outputs. The statistics still describe
            the decoded candidate (its length and mean log-prob before collapsing).

    Returns:
        Per sentence, in input order, the predicted ids; ``(ids, NATStats)`` with stats.
    """
    return _decode(model, src, pad_id, 1, 1, eos_id, ban_ids, return_stats, collapse_repeats)


@torch.inference_mode()
def nat_length_beam(
    model: NATModel,
    src: Tensor,
    pad_id: int,
    length_beam: int = 3,
    eos_id: int | None = None,
    ban_ids: Sequence[int] = (),
    return_stats: bool = False,
    collapse_repeats: bool = False,
) -> NATResult:
    """One pass for each of the ``length_beam`` most likely lengths (batched as B * k rows);
    per sentence the candidate with the best mean token log-probability wins.

    Arguments and return value as ``nat_one_pass``.
    """
    return _decode(model, src, pad_id, length_beam, 1, eos_id, ban_ids, return_stats, collapse_repeats)


@torch.inference_mode()
def mask_predict(
    model: NATModel,
    src: Tensor,
    pad_id: int,
    iterations: int = 10,
    length_beam: int = 1,
    eos_id: int | None = None,
    ban_ids: Sequence[int] = (),
    return_stats: bool = False,
    collapse_repeats: bool = False,
) -> NATResult:
    """Mask-Predict with ``iterations`` (T) passes over ``length_beam`` length candidates.

    Needs a model that reads ``tgt_tokens`` (``model.mask_id`` not None). Stops early once no
    row has anything left to re-mask (``floor(L * (T - t) / T) == 0`` for every row); the
    passes actually used per sentence are in ``NATStats.iterations``. Other arguments and the
    return value as ``nat_one_pass``; ``collapse_repeats`` touches only the returned ids, never
    the tokens the refinement iterations see.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if iterations > 1 and model.mask_id is None:
        raise ValueError("mask_predict needs a model with a mask_id (one that reads tgt_tokens)")
    return _decode(
        model, src, pad_id, length_beam, iterations, eos_id, ban_ids, return_stats, collapse_repeats
    )


def _decode(
    model: NATModel,
    src: Tensor,
    pad_id: int,
    length_beam: int,
    iterations: int,
    eos_id: int | None,
    ban_ids: Sequence[int],
    return_stats: bool,
    collapse_repeats: bool = False,
) -> NATResult:
    """Shared driver: length candidates -> first pass -> refinement -> pick best -> lists."""
    mask_id = model.mask_id
    banned = (pad_id, mask_id, *ban_ids)
    enc, lengths, real = _length_candidates(model, src, length_beam)
    placeholder = pad_id if mask_id is None else mask_id  # copy-mode models ignore tokens
    tokens = torch.full(real.shape, pad_id, dtype=torch.long, device=src.device)  # (N, T)
    tokens = tokens.masked_fill(real, placeholder)
    tokens, conf = _predict(model, enc, tokens, real, pad_id, banned)
    passes = torch.ones_like(lengths)  # (N,)
    for t in range(1, iterations):
        n_mask = lengths * (iterations - t) // iterations  # (N,)
        if not bool((n_mask > 0).any()):
            break
        tokens, conf = _refine(model, enc, tokens, conf, real, n_mask, mask_id, pad_id, banned)
        passes += (n_mask > 0).long()
    return _pick_best(
        src.size(0), tokens, conf, real, lengths, passes, eos_id, return_stats, collapse_repeats
    )


def _length_candidates(model: NATModel, src: Tensor, k: int) -> tuple[EncoderOutLike, Tensor, Tensor]:
    """Encode, predict k lengths, repeat the encoder output per candidate (row b*k + j).

    Returns the expanded encoder output, ``lengths (N,)`` and ``real (N, T)`` (True = inside the
    candidate's length).
    """
    enc = model.encode(src)
    lengths = predict_lengths(model, enc, k)  # (B, k')
    batch, k = lengths.shape
    if k > 1:  # with one candidate per sentence, row b is already sentence b
        rows = torch.arange(batch, device=src.device).repeat_interleave(k)  # (N,)
        enc = enc.index_select(rows)
    lengths = lengths.reshape(batch * k).to(src.device)  # (B, k) -> (N,)
    positions = torch.arange(int(lengths.max()), device=src.device)  # (T,)
    real = positions.unsqueeze(0) < lengths.unsqueeze(1)  # (1, T) < (N, 1) -> (N, T)
    return enc, lengths, real


def _predict(
    model: NATModel,
    enc: EncoderOutLike,
    tokens: Tensor,
    real: Tensor,
    pad_id: int,
    banned: tuple[int | None, ...],
) -> tuple[Tensor, Tensor]:
    """One decoder pass: argmax ids ``(N, T)`` (PAD outside the length) and their log-probs
    ``(N, T)`` (+inf outside the length, so padding is never chosen for re-masking)."""
    # Normalised over the whole vocabulary, banned ids included, then the banned ids set to
    # -inf so the argmax skips them. On a CPU one fused log-softmax is about twice as fast as
    # torch.logsumexp (which subtracts the max and exponentiates in separate passes): ~50 vs
    # ~95 us at (1, 14, 8000), 22 vs 29 ms at (64, 20, 8000), one thread.
    log_probs = F.log_softmax(model.decode(enc, tokens, real).float(), dim=-1)  # (N, T, V)
    conf, ids = max_last(ban_tokens(log_probs, banned, inplace=True))  # (N, T)
    ids = ids.masked_fill(~real, pad_id)
    conf = conf.masked_fill(~real, float("inf"))
    return ids, conf


def _refine(
    model: NATModel,
    enc: EncoderOutLike,
    tokens: Tensor,
    conf: Tensor,
    real: Tensor,
    n_mask: Tensor,
    mask_id: int,
    pad_id: int,
    banned: tuple[int | None, ...],
) -> tuple[Tensor, Tensor]:
    """One Mask-Predict iteration: re-mask the ``n_mask (N,)`` least confident positions of each
    row, re-predict them, and leave every other position (token and confidence) as it was."""
    order = conf.argsort(dim=-1, stable=True)  # (N, T) positions, least confident first
    ranks = torch.empty_like(order).scatter_(
        1, order, torch.arange(order.size(1), device=order.device).expand_as(order)
    )  # (N, T): rank of each position in that order
    remask = ranks < n_mask.unsqueeze(1)  # (N, T) < (N, 1) -> (N, T)
    new_tokens, new_conf = _predict(model, enc, tokens.masked_fill(remask, mask_id), real, pad_id, banned)
    return torch.where(remask, new_tokens, tokens), torch.where(remask, new_conf, conf)


def _pick_best(
    batch: int,
    tokens: Tensor,
    conf: Tensor,
    real: Tensor,
    lengths: Tensor,
    passes: Tensor,
    eos_id: int | None,
    return_stats: bool,
    collapse_repeats: bool = False,
) -> NATResult:
    """Per sentence, the candidate with the best mean log-prob, as id lists (cut at EOS,
    consecutive repeats collapsed if asked)."""
    mean = conf.masked_fill(~real, 0.0).sum(-1) / lengths  # (N,)
    k = mean.numel() // batch
    best = mean.view(batch, k).argmax(dim=-1)  # (N,) -> (B, k) -> (B,)
    rows = torch.arange(batch, device=best.device) * k + best  # (B,)
    outputs = []
    for row, n in zip(tokens[rows].tolist(), lengths[rows].tolist()):
        row = row[:n]
        if eos_id is not None and eos_id in row:
            row = row[: row.index(eos_id)]
        if collapse_repeats:
            row = [tok for i, tok in enumerate(row) if i == 0 or tok != row[i - 1]]
        outputs.append(row)
    if not return_stats:
        return outputs
    stats = NATStats(
        lengths=lengths[rows].tolist(),
        scores=mean[rows].tolist(),
        iterations=passes.view(batch, k).max(dim=-1).values.tolist(),  # (N,) -> (B, k) -> (B,)
    )
    return outputs, stats
