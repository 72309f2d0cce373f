"""An ensemble of autoregressive encoder-decoders that search sees as one model.

Each member encodes the source and keeps its own KV cache; at every step the ensemble's
next-token distribution is the mean of the members' probabilities, returned as
log-probabilities: ``log(1/M * sum_m p_m) = logsumexp_m(log p_m) - log M``. Averaging
probabilities (not log-probabilities) is what fairseq and OpenNMT do when given several
checkpoints; it is the usual last step of a translation system (independently trained models
make partly independent errors). Members must share the target vocabulary and special ids;
``TranslationTask.ensemble`` checks that for checkpoints.

Shape legend: B batch, N search rows (sentences × beams), S source length, t tokens passed
to one ``decode_step`` call, V target vocabulary, M members.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor, nn

from transformer.decoding.api import EncoderOutLike, KVCacheLike


@dataclass
class EnsembleEncoderOut:
    """One encoder output per member; ``memory`` / ``src_pad_mask`` are the first member's
    (search reads only the mask's shape and device)."""

    members: tuple[EncoderOutLike, ...]

    @property
    def memory(self) -> Tensor:
        return self.members[0].memory  # (N, S, D)

    @property
    def src_pad_mask(self) -> Tensor:
        return self.members[0].src_pad_mask  # (N, S)

    def index_select(self, indices: Tensor) -> "EnsembleEncoderOut":
        """Rows ``indices (N',)`` of every member's output."""
        return EnsembleEncoderOut(tuple(e.index_select(indices) for e in self.members))


@dataclass
class EnsembleCache:
    """One KV cache per member, moved together."""

    members: tuple[KVCacheLike, ...]

    @property
    def length(self) -> int:
        return self.members[0].length

    def reorder(self, indices: Tensor, cross: bool = True) -> "EnsembleCache":
        return EnsembleCache(tuple(c.reorder(indices, cross=cross) for c in self.members))

    def reorder_(self, indices: Tensor, cross: bool = True) -> "EnsembleCache":
        """In place where a member's cache can (``reorder_``), else a reordered copy."""
        self.members = tuple(c.reorder_(indices, cross=cross) for c in self.members)
        return self

    def expand_beams(self) -> "EnsembleCache":
        self.members = tuple(c.expand_beams() for c in self.members)
        return self

    def reserve(self, steps: int) -> "EnsembleCache":
        for c in self.members:
            c.reserve(steps)
        return self


class EnsembleModel(nn.Module):
    """Members' ``decode_step`` probabilities averaged (see the module docstring).

    Implements ``decoding.api.Seq2SeqModel``, so greedy and beam search take it as they are.
    It has no ``decode_step_logits``: the argmax of averaged probabilities needs them
    normalised, so greedy search always goes through ``decode_step``.
    """

    def __init__(self, models: Sequence[nn.Module]):
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        sizes = {getattr(m, "vocab_size", None) for m in models}
        if len(sizes) > 1:
            raise ValueError(f"ensemble members disagree on the target vocabulary size: {sorted(sizes, key=str)}")
        self.members = nn.ModuleList(models)
        self.vocab_size = sizes.pop()

    def encode(self, src: Tensor) -> EnsembleEncoderOut:
        """``src (B, S)`` -> one encoder output per member."""
        return EnsembleEncoderOut(tuple(m.encode(src) for m in self.members))

    def init_cache(self, enc: EnsembleEncoderOut, beams: int = 1) -> EnsembleCache:
        return EnsembleCache(tuple(m.init_cache(e, beams=beams) for m, e in zip(self.members, enc.members)))

    def decode_step(self, tokens: Tensor, enc: EnsembleEncoderOut, cache: EnsembleCache) -> tuple[Tensor, EnsembleCache]:
        """``tokens (N, t)`` -> log of the members' mean probability ``(N, V)``, and the caches."""
        log_probs, caches = [], []
        for model, e, c in zip(self.members, enc.members, cache.members):
            lp, c = model.decode_step(tokens, e, c)  # (N, V)
            log_probs.append(lp.float())
            caches.append(c)
        if len(log_probs) == 1:
            return log_probs[0], EnsembleCache(tuple(caches))
        stacked = torch.stack(log_probs)  # M x (N, V) -> (M, N, V)
        mean = torch.logsumexp(stacked, dim=0) - math.log(len(log_probs))  # (N, V)
        return mean, EnsembleCache(tuple(caches))
