"""Decoding for CTC non-autoregressive models: one pass, no length prediction.

The decoder scores a token or the blank at every upsampled position; the output is the argmax
path with runs of one id merged and blanks dropped (Graves et al. 2006, "best path" decoding;
Libovický & Helcl 2018 and Gu & Kong 2021 decode their CTC NAT models this way). ``ctc_beam``
searches instead for the most probable output, summed over its paths (prefix beam search,
Graves 2012), after the same single pass.

Shape legend: B sentences, U upsampled (decoder) positions, V vocabulary (blank included).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from transformer.decoding.api import EncoderOutLike
from transformer.decoding.common import ban_tokens, encode_source, max_last
from transformer.decoding.nat import NATResult, NATStats


class CTCModel(Protocol):
    """A CTC model as ``ctc_one_pass`` sees it (``models.CTCNonAutoregressiveModel``)."""

    blank_id: int
    # ``(K,)`` vocabulary id of each score column (``models.ctc.restrict_output``), or None.
    output_ids: Tensor | None

    def encode(self, src: Tensor) -> EncoderOutLike:
        """``src (B, S)`` long -> encoder output."""
        ...

    def decoder_mask(self, enc: EncoderOutLike) -> Tensor:
        """``(B, U)`` bool, True = real upsampled position."""
        ...

    def decode(self, enc: EncoderOutLike) -> Tensor:
        """-> logits ``(B, U, V)``, or ``(B, U, K)`` when ``output_ids`` is set."""
        ...


def ctc_collapse(ids: Sequence[int], blank_id: int) -> list[int]:
    """One CTC path -> its output: merge each run of one id into one copy, then drop blanks.

    A blank between two equal ids keeps both (``a _ a`` -> ``a a``), which is how CTC
    spells a repeated token.
    """
    out: list[int] = []
    prev = None
    for tok in ids:
        if tok != prev and tok != blank_id:
            out.append(tok)
        prev = tok
    return out


def collapse_paths(paths: Tensor, real: Tensor, blank_id: int) -> list[list[int]]:
    """``ctc_collapse`` for every row of ``paths (B, U)`` over its ``real (B, U)`` positions.

    The merge is done on the tensor (keep a position when it differs from the one before and is
    not a blank), so only the kept ids travel to Python lists.
    """
    prev = torch.cat([torch.full_like(paths[:, :1], -1), paths[:, :-1]], dim=1)  # (B, U)
    keep = real & paths.ne(prev) & paths.ne(blank_id)  # (B, U)
    return [row[k].tolist() for row, k in zip(paths, keep)]


def banned_scores(model: CTCModel, src: Tensor, pad_id: int, ban_ids: Sequence[int] = (),
                  blank_penalty: float = 0.0,
                  src_lengths: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """One decoder pass: fp32 scores ``(B, U, K)`` with ``pad_id`` and ``ban_ids`` at -inf (never
    the blank), the real positions ``(B, U)``, and the column -> id map ``(K,)`` of a shortlisted
    model (None: K = V, column i is id i).

    ``blank_penalty`` is subtracted from the blank's score at every position (a logit, so a
    penalty p divides the blank's probability odds by e^p): positive values give longer outputs.
    ``src_lengths``: of frames ``src (B, T, F)`` (``common.encode_source``).
    """
    enc = encode_source(model, src, src_lengths)
    real = model.decoder_mask(enc)  # (B, U)
    scores = model.decode(enc).float()  # (B, U, V), or (B, U, K) over a shortlist's columns
    vocab = model.output_ids  # (K,) column -> id, or None
    banned = [i for i in (pad_id, *ban_ids) if i is not None and i != model.blank_id]
    if vocab is not None:  # ids -> the columns that hold them
        wanted = torch.tensor(banned, dtype=vocab.dtype, device=vocab.device)
        banned = torch.isin(vocab, wanted).nonzero().flatten().tolist()
    if blank_penalty:
        blank = model.blank_id if vocab is None else (vocab == model.blank_id).nonzero()[0, 0]
        scores[..., blank] -= blank_penalty
    return ban_tokens(scores, tuple(banned), inplace=True), real, vocab


@torch.inference_mode()
def ctc_one_pass(
    model: CTCModel,
    src: Tensor,
    pad_id: int,
    eos_id: int | None = None,
    ban_ids: Sequence[int] = (),
    return_stats: bool = False,
    blank_penalty: float = 0.0,
    src_lengths: Tensor | None = None,
) -> NATResult:
    """Argmax at every upsampled position, repeats merged, blanks dropped; one decoder pass.

    Args:
        model: a ``CTCModel`` in ``eval()`` mode.
        src: ``(B, S)`` source ids, right-padded with ``pad_id``.
        pad_id: never predicted.
        eos_id: if given, each output is cut at its first ``eos_id``.
        ban_ids: further ids never to predict (e.g. BOS). The blank is always allowed.
        blank_penalty: subtracted from the blank's score at every position (see ``banned_scores``).
        src_lengths: ``(B,)`` real frames of a front end's ``src (B, T, F)``; None for token ids.
        return_stats: also return ``NATStats``: output length, mean log-probability of the
            path over the real positions, and 1 decoder pass per sentence.

    Returns:
        Per sentence, in input order, the output ids; ``(ids, NATStats)`` with stats.
    """
    scores, real, vocab = banned_scores(model, src, pad_id, ban_ids, blank_penalty, src_lengths)  # (B, U, K), (B, U), (K,) | None
    # The argmax of the scores is the argmax of the log-probabilities: the softmax is only
    # computed (as one logsumexp) when the path's score is asked for.
    best, path = max_last(scores)  # (B, U)
    if vocab is not None:
        path = vocab[path]  # (B, U) columns -> vocabulary ids
    outputs = collapse_paths(path, real, model.blank_id)
    if eos_id is not None:
        outputs = [row[: row.index(eos_id)] if eos_id in row else row for row in outputs]
    if not return_stats:
        return outputs
    conf = best - torch.logsumexp(scores, dim=-1)  # (B, U) log-probability of each path step
    mean = conf.masked_fill(~real, 0.0).sum(-1) / real.sum(-1).clamp(min=1)  # (B,)
    stats = NATStats(lengths=[len(row) for row in outputs], scores=mean.tolist(), iterations=[1] * len(outputs))
    return outputs, stats


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    hi, lo = (a, b) if a > b else (b, a)
    return hi + math.log1p(math.exp(lo - hi))


def prefix_beam(log_probs: np.ndarray, blank: int, beam_size: int, top_k: int) -> tuple[list[int], float]:
    """CTC prefix beam search over one sentence's ``log_probs (U, K)`` (Graves 2012, sec. 7.5;
    no language model): the most probable *output* (summed over every path that collapses to
    it), not the most probable path.

    Each prefix keeps two log-probabilities, of the paths so far that end in a blank and of those
    that end in its last token: a token equal to the last one extends the prefix only after a
    blank, and otherwise repeats into it. At each position only the ``top_k`` best tokens and the
    blank are tried, and the ``beam_size`` most probable prefixes are kept.

    Returns:
        ``(columns, log-probability)`` of the best prefix (columns of ``log_probs``).
    """
    neg = -math.inf
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, neg)}  # prefix -> (blank end, token end)
    k = min(top_k, log_probs.shape[1])
    candidates = np.argpartition(-log_probs, k - 1, axis=1)[:, :k]  # (U, k)
    for t in range(log_probs.shape[0]):
        row = log_probs[t]
        nxt: dict[tuple[int, ...], list[float]] = {}

        def add(prefix: tuple[int, ...], blank_end: float, token_end: float) -> None:
            cur = nxt.setdefault(prefix, [neg, neg])
            cur[0], cur[1] = _logaddexp(cur[0], blank_end), _logaddexp(cur[1], token_end)

        blank_lp = float(row[blank])
        for prefix, (pb, pt) in beams.items():
            total = _logaddexp(pb, pt)
            add(prefix, total + blank_lp, neg)  # a blank keeps the prefix
            for c in candidates[t].tolist():
                if c == blank:
                    continue
                lp = float(row[c])
                if lp == neg:
                    continue
                if prefix and prefix[-1] == c:
                    add(prefix, neg, pt + lp)  # the last token again: merged into it
                    add(prefix + (c,), neg, pb + lp)  # after a blank: a new copy
                else:
                    add(prefix + (c,), neg, total + lp)
        ranked = sorted(nxt.items(), key=lambda kv: _logaddexp(*kv[1]), reverse=True)[:beam_size]
        beams = {prefix: (v[0], v[1]) for prefix, v in ranked}
    best, (pb, pt) = max(beams.items(), key=lambda kv: _logaddexp(*kv[1]))
    return list(best), _logaddexp(pb, pt)


@torch.inference_mode()
def ctc_beam(
    model: CTCModel,
    src: Tensor,
    pad_id: int,
    beam_size: int = 5,
    top_k: int = 8,
    eos_id: int | None = None,
    ban_ids: Sequence[int] = (),
    blank_penalty: float = 0.0,
    src_lengths: Tensor | None = None,
) -> NATResult:
    """One decoder pass, then ``prefix_beam`` on each sentence's real positions (on the CPU).

    The network runs once for the whole batch, as in ``ctc_one_pass``; the search is per
    sentence, over at most ``beam_size x (top_k + 1)`` extensions a position.

    Returns:
        ``(ids, NATStats)``: per sentence the output ids, and as its score the output's
        log-probability divided by the number of real positions.
    """
    scores, real, vocab = banned_scores(model, src, pad_id, ban_ids, blank_penalty, src_lengths)  # (B, U, K)
    log_probs = torch.log_softmax(scores, dim=-1).cpu().numpy()  # (B, U, K)
    blank = model.blank_id if vocab is None else int((vocab == model.blank_id).nonzero()[0, 0])
    columns = vocab.tolist() if vocab is not None else None
    outputs, means = [], []
    for b, n in enumerate(real.sum(1).tolist()):
        cols, lp = prefix_beam(log_probs[b, :n], blank, beam_size, top_k)
        ids = [columns[c] for c in cols] if columns is not None else cols
        if eos_id is not None and eos_id in ids:
            ids = ids[: ids.index(eos_id)]
        outputs.append(ids)
        means.append(lp / max(n, 1))
    stats = NATStats(lengths=[len(r) for r in outputs], scores=means, iterations=[1] * len(outputs))
    return outputs, stats
