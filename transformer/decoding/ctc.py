"""Decoding for CTC non-autoregressive models: one pass, no length prediction.

The decoder scores a token or the blank at every upsampled position; the output is the argmax
path with runs of one id merged and blanks dropped (Graves et al. 2006, "best path" decoding;
Libovický & Helcl 2018 and Gu & Kong 2021 decode their CTC NAT models this way).

Shape legend: B sentences, U upsampled (decoder) positions, V vocabulary (blank included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer.decoding.api import EncoderOutLike
from transformer.decoding.common import ban_tokens, max_last
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


@torch.inference_mode()
def ctc_one_pass(
    model: CTCModel,
    src: Tensor,
    pad_id: int,
    eos_id: int | None = None,
    ban_ids: Sequence[int] = (),
    return_stats: bool = False,
) -> NATResult:
    """Argmax at every upsampled position, repeats merged, blanks dropped; one decoder pass.

    Args:
        model: a ``CTCModel`` in ``eval()`` mode.
        src: ``(B, S)`` source ids, right-padded with ``pad_id``.
        pad_id: never predicted.
        eos_id: if given, each output is cut at its first ``eos_id``.
        ban_ids: further ids never to predict (e.g. BOS). The blank is always allowed.
        return_stats: also return ``NATStats``: output length, mean log-probability of the
            path over the real positions, and 1 decoder pass per sentence.

    Returns:
        Per sentence, in input order, the output ids; ``(ids, NATStats)`` with stats.
    """
    enc = model.encode(src)
    real = model.decoder_mask(enc)  # (B, U)
    scores = model.decode(enc).float()  # (B, U, V), or (B, U, K) over a shortlist's columns
    vocab = getattr(model, "output_ids", None)  # (K,) column -> id, or None
    banned = [i for i in (pad_id, *ban_ids) if i is not None and i != model.blank_id]
    if vocab is not None:  # ids -> the columns that hold them
        banned = torch.isin(vocab, torch.tensor(banned, dtype=vocab.dtype, device=vocab.device)).nonzero().flatten().tolist()
    # The argmax of the scores is the argmax of the log-probabilities: the softmax is only
    # computed (as one logsumexp) when the path's score is asked for.
    best, path = max_last(ban_tokens(scores, tuple(banned), inplace=True))  # (B, U)
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
