"""Joint CTC/attention decoding: greedy or beam search of an encoder-decoder whose every step
scores ``(1 - λ) log p_att(c | g) + λ (log ψ(g c) - log ψ(g))``, where ``ψ(h)`` is the CTC prefix
probability of ``h`` (the probability that the CTC head's output starts with ``h``) over the
encoder positions (Watanabe et al. 2017, "Hybrid CTC/attention", sec. III-B; ESPnet's
``CTCPrefixScorer``). Summed over a hypothesis, the CTC part is ``λ log ψ(h)``, and at EOS
``λ log p_ctc(h)``, the whole output's CTC probability: a hypothesis whose length or order the
CTC alignment contradicts loses, which the attention decoder alone may not see.

``JointCTCDecoding`` wraps a model with a CTC head (``models.JointCTCEncoderDecoder``'s
``ctc_logits``) as ``decoding.api.Seq2SeqModel``, as ``decoding.ensemble.EnsembleModel`` wraps
its members, so greedy and beam search take it as they are. Its cache carries, beside the
decoder's KV cache, each row's CTC forward variables and the prefix scores of its candidates,
and moves them with the rows.

The prefix's forward variables (Graves 2012, sec. 7.3; Watanabe et al. 2017, Algorithm 2):
``r_n(t)`` / ``r_b(t)``, the log-probability that the first ``t + 1`` encoder positions emit the
prefix with their last emission a token / a blank. For ``h = g c``, with
``φ(t) = r_b^g(t) ⊕ [r_n^g(t) unless c is g's last token]`` (⊕: log-add),
``r_n^h(t) = (r_n^h(t - 1) ⊕ φ(t - 1)) + x_t(c)``, ``r_b^h(t) = (r_b^h(t - 1) ⊕ r_n^h(t - 1)) + x_t(blank)``
and ``log ψ(h) = ⊕_t φ(t - 1) + x_t(c)``; the empty prefix has ``φ(-1) = 0`` (log 1).

Shape legend: B sentences, N search rows (sentences × beams), S encoder positions, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from transformer.decoding.api import EncoderOutLike, KVCacheLike

NEG = float("-inf")


@dataclass
class JointEncoderOut:
    """The decoder's encoder output and the CTC head's ``log_probs (B, S, V)`` with the real
    positions of each row, ``lengths (B,)``."""

    inner: EncoderOutLike
    log_probs: Tensor
    lengths: Tensor

    @property
    def memory(self) -> Tensor:
        return self.inner.memory  # (B, S, D)

    @property
    def src_pad_mask(self) -> Tensor:
        return self.inner.src_pad_mask  # (B, S)

    def index_select(self, indices: Tensor) -> "JointEncoderOut":
        idx = indices.to(self.log_probs.device)
        return JointEncoderOut(self.inner.index_select(indices), self.log_probs.index_select(0, idx),
                               self.lengths.index_select(0, idx))


@dataclass
class JointCache:
    """The decoder's KV cache plus, per row, the CTC state of its prefix ``g``: ``r (N, 2, S)``
    (``r_n``, ``r_b``), ``last (N,)`` its last token (-1: none) and ``psi (N, V)`` the prefix
    scores of ``g c`` for every ``c``; ``empty``: ``g`` has no token yet (every row alike). All
    None before the first step."""

    kv: KVCacheLike
    r: Tensor | None = None
    last: Tensor | None = None
    psi: Tensor | None = None
    empty: bool = True

    @property
    def length(self) -> int:
        return self.kv.length

    def _rows(self, indices: Tensor) -> tuple:
        return tuple(None if t is None else t.index_select(0, indices.to(t.device))
                     for t in (self.r, self.last, self.psi))

    def reorder(self, indices: Tensor, cross: bool = True) -> "JointCache":
        return JointCache(self.kv.reorder(indices, cross=cross), *self._rows(indices), self.empty)

    def reorder_(self, indices: Tensor, cross: bool = True) -> "JointCache":
        self.kv = self.kv.reorder_(indices, cross=cross)
        self.r, self.last, self.psi = self._rows(indices)
        return self

    def expand_beams(self) -> "JointCache":
        group = self.kv.group
        self.kv = self.kv.expand_beams()
        self.r, self.last, self.psi = (None if t is None else t.repeat_interleave(group, dim=0)
                                       for t in (self.r, self.last, self.psi))
        return self

    def reserve(self, steps: int) -> "JointCache":
        if hasattr(self.kv, "reserve"):
            self.kv.reserve(steps)
        return self


def empty_prefix(x: Tensor, blank: int) -> Tensor:
    """The forward variables ``(N, 2, S)`` of the empty prefix: no token (``r_n = -inf``), every
    position a blank (``r_b(t)``: the blanks' summed log-probs up to ``t``). ``x (N, S, V)``."""
    r_b = torch.cumsum(x[:, :, blank], dim=1)  # (N, S)
    return torch.stack([torch.full_like(r_b, NEG), r_b], dim=1)


def _phi(r: Tensor, last: Tensor, c: Tensor) -> Tensor:
    """``φ (N, C, S)`` of ``g`` (``r (N, 2, S)``, ``last (N,)``) for the candidates ``c (N, C)``:
    after a blank, or after ``g``'s last token unless ``c`` repeats it (CTC would merge them)."""
    n, s = r.size(0), r.size(2)
    both = torch.logaddexp(r[:, 0], r[:, 1]).unsqueeze(1).expand(n, c.size(1), s)  # (N, C, S)
    repeat = (c == last.unsqueeze(1)).unsqueeze(-1)  # (N, C, 1)
    return torch.where(repeat, r[:, 1].unsqueeze(1).expand(n, c.size(1), s), both)


def _phi_before(phi: Tensor, empty: bool) -> Tensor:
    """``φ(t - 1)`` at every ``t``: ``φ (N, C, S)`` shifted by one, ``φ(-1)`` = log 1 for the empty
    prefix (nothing emitted before the first position), -inf otherwise."""
    start = phi.new_full((*phi.shape[:2], 1), 0.0 if empty else NEG)
    return torch.cat([start, phi[:, :, :-1]], dim=2)


def extend_prefix(r: Tensor, last: Tensor, c: Tensor, x: Tensor, blank: int, empty: bool) -> Tensor:
    """The forward variables ``(N, 2, S)`` of ``g c`` from those of ``g`` (``r (N, 2, S)``, its last
    token ``last (N,)``; ``empty``: ``g`` has none) and ``c (N,)``, over ``x (N, S, V)``."""
    n, s, _ = x.shape
    x_c = x.gather(2, c.view(n, 1, 1).expand(n, s, 1)).squeeze(2)  # (N, S)
    x_blank = x[:, :, blank]  # (N, S)
    phi_prev = _phi_before(_phi(r, last, c.unsqueeze(1)), empty).squeeze(1)  # (N, S): φ(t - 1)
    r_n, r_b = [], []
    prev_n = prev_b = x.new_full((n,), NEG)
    for t in range(s):
        prev_n, prev_b = (torch.logaddexp(prev_n, phi_prev[:, t]) + x_c[:, t],
                          torch.logaddexp(prev_b, prev_n) + x_blank[:, t])
        r_n.append(prev_n)
        r_b.append(prev_b)
    return torch.stack([torch.stack(r_n, 1), torch.stack(r_b, 1)], dim=1)  # (N, 2, S)


def prefix_scores(r: Tensor, last: Tensor, x: Tensor, lengths: Tensor, eos_id: int, empty: bool) -> Tensor:
    """``log ψ(g c) (N, V)`` for every ``c``; ``c = eos_id`` scores ``g`` as the whole output
    (``r_n ⊕ r_b`` at its last real position). ``x (N, S, V)``, ``lengths (N,)`` real positions."""
    n, s, v = x.shape
    phi_prev = _phi_before(_phi(r, last, torch.arange(v, device=x.device).expand(n, v)), empty)  # (N, V, S)
    real = torch.arange(s, device=x.device) < lengths.unsqueeze(1)  # (N, S)
    terms = (phi_prev + x.transpose(1, 2)).masked_fill(~real.unsqueeze(1), NEG)  # (N, V, S)
    psi = torch.logsumexp(terms, dim=2)  # (N, V)
    whole = torch.logaddexp(r[:, 0], r[:, 1]).gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)  # (N,)
    psi[:, eos_id] = whole
    return psi


class JointCTCDecoding(nn.Module):
    """A model with a CTC head decoded jointly (see the module docstring), as
    ``decoding.api.Seq2SeqModel``.

    Args:
        model: an encoder-decoder with ``ctc_logits(enc) -> (B, S, V)`` and ``blank_id``
            (``models.JointCTCEncoderDecoder``).
        weight: λ in (0, 1], the CTC prefix score's share of every step's score.
        eos_id: the EOS id, whose CTC score is the whole output's.
    """

    def __init__(self, model: nn.Module, weight: float, eos_id: int):
        super().__init__()
        if not hasattr(model, "ctc_logits"):
            raise ValueError(f"decode.ctc_weight={weight} needs a model with a CTC head "
                             f"(trained with task.ctc_weight > 0); this one is a {type(model).__name__}")
        if not 0.0 < weight <= 1.0:
            raise ValueError(f"decode.ctc_weight must be in (0, 1], got {weight}")
        self.model, self.weight, self.eos_id = model, float(weight), eos_id
        self.blank_id = model.blank_id
        self.vocab_size = model.vocab_size

    def encode(self, src: Tensor, src_lengths: Tensor | None = None) -> JointEncoderOut:
        enc = self.model.encode(src) if src_lengths is None else self.model.encode(src, src_lengths)
        log_probs = torch.log_softmax(self.model.ctc_logits(enc).float(), dim=-1)  # (B, S, V)
        return JointEncoderOut(enc, log_probs, enc.src_pad_mask.sum(1))

    def init_cache(self, enc: JointEncoderOut, beams: int = 1, **kw) -> JointCache:
        return JointCache(self.model.init_cache(enc.inner, beams=beams, **kw))

    def decode_step(self, tokens: Tensor, enc: JointEncoderOut, cache: JointCache) -> tuple[Tensor, JointCache]:
        """``tokens (N, t)`` -> joint scores ``(N, V)`` of the next token, and the cache. The first
        call (BOS, or a start and its forced tokens) leaves the CTC prefix empty; each later call
        adds its one token to it."""
        att, kv = self.model.decode_step(tokens, enc.inner, cache.kv)  # (N, V)
        n = tokens.size(0)
        group = n // enc.log_probs.size(0)  # rows per sentence: the beams, or 1
        x = enc.log_probs.repeat_interleave(group, dim=0) if group > 1 else enc.log_probs  # (N, S, V)
        lengths = enc.lengths.repeat_interleave(group) if group > 1 else enc.lengths  # (N,)
        if cache.r is None:  # the first step: the empty prefix
            r, last, empty = empty_prefix(x, self.blank_id), x.new_full((n,), -1, dtype=torch.long), True
            before = x.new_zeros(n)  # log ψ of the empty prefix: log 1
        else:  # the token each row chose last step joins its prefix
            c = tokens[:, -1]  # (N,)
            r = extend_prefix(cache.r, cache.last, c, x, self.blank_id, cache.empty)
            last, empty, before = c, False, cache.psi.gather(1, c.unsqueeze(1)).squeeze(1)  # (N,)
        psi = prefix_scores(r, last, x, lengths, self.eos_id, empty)  # (N, V)
        ctc = torch.nan_to_num(psi - before.unsqueeze(1), nan=NEG)  # (N, V): -inf - -inf is no prefix
        # at weight 1 the decoder's scores are left out, not multiplied by 0 (0 * -inf is NaN)
        scores = ctc if self.weight == 1.0 else (1.0 - self.weight) * att.float() + self.weight * ctc
        return scores, JointCache(kv, r, last, psi, empty)
