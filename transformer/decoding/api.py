"""What search needs from a model: the decoding API, written down as ``typing.Protocol``s.

Nothing here is implemented; the protocols document the duck-typed surface that
``greedy.py``, ``beam.py`` and ``nat.py`` call, so that a scripted fake in a test and the real
``transformer.models`` classes are interchangeable (fairseq keeps search apart from models the
same way). Special ids (BOS, EOS, PAD) are arguments of the search functions, never read from
the model.

Shape legend:
    B  sentences in the batch          S  source length
    N  rows being decoded (B, or B*K with K beams / K length candidates)
    t  tokens passed to one ``decode_step`` call
    T  target length                   V  vocabulary size
    L  number of length classes        D  model width
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class EncoderOutLike(Protocol):
    """Encoder output: ``memory (N, S, D)`` and ``src_pad_mask (N, S)`` bool, True = real token."""

    memory: Tensor
    src_pad_mask: Tensor

    def index_select(self, indices: Tensor) -> EncoderOutLike:
        """Rows ``indices (N',)`` of every tensor (batch dim 0): beam expansion and reordering."""
        ...


@runtime_checkable
class KVCacheLike(Protocol):
    """Explicit incremental-decoding state, passed into and returned from ``decode_step``."""

    @property
    def length(self) -> int:
        """Number of target tokens already cached (the position of the next token)."""
        ...

    def reorder(self, indices: Tensor, cross: bool = True) -> KVCacheLike:
        """Rows ``indices (N,)`` of every cached tensor; beam search calls it once per step.

        With ``cross=False`` the caller promises that row ``indices[n]`` comes from the same
        sentence as row ``n``, so per-sentence state (the cross-attention keys/values) may be
        kept as it is.
        """
        ...

    def reorder_(self, indices: Tensor, cross: bool = True) -> KVCacheLike:
        """:meth:`reorder` in place where the cache can (returning itself), else a reordered
        copy; searches call it, since the old state is never reused."""
        ...

    def reserve(self, steps: int) -> KVCacheLike:
        """Search calls it once with the most steps it will feed, so buffers can be sized once
        (a cache that grows as it goes ignores it); returns the cache."""
        ...

    def expand_beams(self) -> KVCacheLike:
        """Beam search decodes its first step once per sentence (``init_cache(enc, beams=K)``,
        then ``B`` rows of BOS); this then gives each of the K beams a copy of its sentence's
        row. A model may instead answer that step with all ``N`` rows (its cache expands
        nothing then)."""
        ...


@runtime_checkable
class Seq2SeqModel(Protocol):
    """An autoregressive encoder-decoder as greedy and beam search see it.

    ``decode_step`` receives only the tokens not yet in the cache (search passes one token per
    row per call, BOS first) and returns log-probabilities for the position after the last of
    them; positions continue from ``cache.length``.
    """

    def encode(self, src: Tensor) -> EncoderOutLike:
        """``src (B, S)`` long -> encoder output for B rows."""
        ...

    def init_cache(self, enc: EncoderOutLike, beams: int = 1) -> KVCacheLike:
        """An empty self-attention cache for ``beams`` decoder rows per row of ``enc`` (rows
        ``b * beams ..``: beam search's K beams of sentence ``b``), which share its
        cross-attention K/V, computed once. ``decode_step`` then gets ``enc`` as it is, one row
        per sentence, and ``reorder`` keeps each sentence's rows together."""
        ...

    def decode_step(
        self, tokens: Tensor, enc: EncoderOutLike, cache: KVCacheLike
    ) -> tuple[Tensor, KVCacheLike]:
        """``tokens (N, t)`` long -> ``(log_probs (N, V), cache)`` for the next position.

        The returned ``log_probs`` belong to the caller: search may change them in place.
        A model may also offer ``decode_step_logits`` (same arguments, unnormalised
        ``(N, V)`` scores); greedy search without scores then uses it. A model that offers
        ``decode_step_states`` (the ``(N, D)`` states before its vocabulary projection),
        ``project`` and ``project_ids`` and computes in bf16 has beam search recompute its
        best candidates' scores in fp32 (``beam._rescored_candidates``).
        """
        ...


@runtime_checkable
class NATModel(Protocol):
    """A non-autoregressive model as one-pass, length-beam and Mask-Predict decoding see it.

    ``predict_length`` returns logits over L length classes; class ``c`` means absolute target
    length ``c`` unless the model also offers ``top_k_lengths(length_logits, k, enc) -> (B, k)``
    absolute lengths, best first (see ``decoding.nat.predict_lengths``).
    ``decode`` predicts all T positions at once (no causal mask); positions holding ``mask_id``
    are the ones to predict. ``mask_id`` is None for models that copy source embeddings and
    ignore ``tgt_tokens`` (such a model supports one-pass and length-beam decoding only).
    """

    mask_id: int | None

    def encode(self, src: Tensor) -> EncoderOutLike:
        """``src (B, S)`` long -> encoder output for B rows."""
        ...

    def predict_length(self, enc: EncoderOutLike) -> Tensor:
        """-> ``length_logits (B, L)``."""
        ...

    def decode(self, enc: EncoderOutLike, tgt_tokens: Tensor, tgt_pad_mask: Tensor) -> Tensor:
        """``tgt_tokens (N, T)`` long, ``tgt_pad_mask (N, T)`` bool (True = real) -> logits ``(N, T, V)``.

        The returned logits belong to the caller: decoding may change them in place."""
        ...
