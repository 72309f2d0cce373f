"""Scripted fake models for the search tests.

The fakes implement only the decoding API (``transformer.decoding.api``); their outputs come
from hand-written tables, so every search result in the tests can be worked out on paper.

Vocabulary of both fakes: PAD=0, BOS=1, EOS=2, ordinary tokens 3..6, MASK=7 (V=8).
A sentence is identified by its first source token (its "key").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

PAD, BOS, EOS, MASK, V = 0, 1, 2, 7, 8

Dist = dict[int, float]  # token -> probability; unlisted tokens get probability 0


@dataclass
class FakeEncoderOut:
    """``memory (N, S, 1)``: the source ids as floats; row n's key is ``memory[n, 0, 0]``."""

    memory: Tensor
    src_pad_mask: Tensor

    def index_select(self, indices: Tensor) -> FakeEncoderOut:
        return FakeEncoderOut(
            self.memory.index_select(0, indices), self.src_pad_mask.index_select(0, indices)
        )

    def keys(self) -> list[int]:
        return [int(k) for k in self.memory[:, 0, 0].tolist()]


def _encode(src: Tensor) -> FakeEncoderOut:
    return FakeEncoderOut(src.float().unsqueeze(-1), src != PAD)  # (B, S) -> (B, S, 1)


@dataclass
class FakeCache:
    """Holds every row's full prefix ``(N, t)`` (BOS first) and sentence key (the stand-in for
    cross-attention state); ``reorder`` counts its calls and checks ``cross=False``'s promise."""

    prefix: Tensor
    counter: dict
    keys: list

    @property
    def length(self) -> int:
        return self.prefix.size(1)

    def reorder(self, indices: Tensor, cross: bool = True) -> FakeCache:
        self.counter["reorder"] += 1
        rows = indices.tolist()
        if cross:
            keys = [self.keys[i] for i in rows]
        else:
            assert [self.keys[i] for i in rows] == self.keys, "cross=False moved a row to another sentence"
            keys = self.keys
        return FakeCache(self.prefix.index_select(0, indices), self.counter, keys)

    def reorder_(self, indices: Tensor, cross: bool = True) -> FakeCache:
        return self.reorder(indices, cross)

    def reserve(self, steps: int) -> FakeCache:
        return self


class ScriptedSeq2Seq:
    """Autoregressive fake: ``dist(key, generated_prefix) -> Dist`` gives the next-token law.

    Records every ``(key, prefix)`` it is asked to extend in ``self.queries``.
    """

    def __init__(self, dist: Callable[[int, tuple[int, ...]], Dist]):
        self.dist = dist
        self.queries: list[tuple[int, tuple[int, ...]]] = []
        self.counter = {"reorder": 0, "decode_step": 0}

    def encode(self, src: Tensor) -> FakeEncoderOut:
        return _encode(src)

    def init_cache(self, enc: FakeEncoderOut, beams: int = 1) -> FakeCache:
        keys = [key for key in enc.keys() for _ in range(beams)]  # each sentence's beams
        return FakeCache(torch.empty(len(keys), 0, dtype=torch.long), self.counter, keys)

    def decode_step(self, tokens: Tensor, enc: FakeEncoderOut, cache: FakeCache) -> tuple[Tensor, FakeCache]:
        assert tokens.dim() == 2 and tokens.size(1) == 1, "search feeds one new token per row"
        self.counter["decode_step"] += 1
        beams = len(cache.keys) // len(enc.keys())  # decoder rows per encoder row
        if tokens.size(0) != len(cache.keys):  # beam search's first step, once per sentence:
            tokens = tokens.repeat_interleave(beams, dim=0)  # answered for every row
        assert cache.keys == [key for key in enc.keys() for _ in range(beams)], \
            "cache rows and encoder rows belong to different sentences"
        prefix = torch.cat([cache.prefix, tokens], dim=1)  # (N, t) ++ (N, 1)
        log_probs = torch.full((prefix.size(0), V), float("-inf"))
        for row, (key, seq) in enumerate(zip(cache.keys, prefix.tolist())):
            assert seq[0] == BOS
            generated = tuple(seq[1:])
            self.queries.append((key, generated))
            for tok, p in self.dist(key, generated).items():
                log_probs[row, tok] = math.log(p)
        return log_probs, FakeCache(prefix, self.counter, cache.keys)


@dataclass
class NATCall:
    tgt_tokens: Tensor
    tgt_pad_mask: Tensor


class ScriptedNAT:
    """Non-autoregressive fake.

    ``length_probs[key]``: {length: prob} (length classes 0..V-1). ``outputs[(key, L)]``: for
    decoder call c (the c-th ``decode``), a list of (token, prob) per position; the last entry is
    reused for later calls. Rows without a script get seeded random logits. Every call is recorded.
    """

    mask_id = MASK

    def __init__(
        self, length_probs: dict[int, dict[int, float]], outputs: dict | None = None, n_classes: int = 16
    ):
        self.length_probs = length_probs
        self.outputs = outputs or {}
        self.n_classes = n_classes
        self.calls: list[NATCall] = []
        self.gen = torch.Generator().manual_seed(1234)

    def encode(self, src: Tensor) -> FakeEncoderOut:
        return _encode(src)

    def predict_length(self, enc: FakeEncoderOut) -> Tensor:
        logits = torch.full((enc.memory.size(0), self.n_classes), -30.0)
        for row, key in enumerate(enc.keys()):
            for length, p in self.length_probs[key].items():
                logits[row, length] = math.log(p)
        return logits

    def decode(self, enc: FakeEncoderOut, tgt_tokens: Tensor, tgt_pad_mask: Tensor) -> Tensor:
        call = len(self.calls)
        self.calls.append(NATCall(tgt_tokens.clone(), tgt_pad_mask.clone()))
        n, t = tgt_tokens.shape
        logits = torch.randn(n, t, V, generator=self.gen)
        for row, key in enumerate(enc.keys()):
            length = int(tgt_pad_mask[row].sum())
            script = self.outputs.get((key, length))
            if script is None:
                continue
            for pos, (tok, p) in enumerate(script[min(call, len(script) - 1)]):
                rest = (1.0 - p) / (V - 1)
                logits[row, pos] = math.log(rest)
                logits[row, pos, tok] = math.log(p)
        return logits

