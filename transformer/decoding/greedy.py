"""Greedy decoding for autoregressive encoder-decoders, batched over sentences with the KV cache.

At every step each sentence still decoding takes the most likely next token (PAD and BOS banned,
as in fairseq, BOS unless the decoder starts from EOS); a sentence stops at its first EOS or at its
length cap and then leaves the batch, so a batch costs what its sentences need rather than
``len(batch)`` x its longest output. Leaving
copies the caches of the rows that go on, so finished rows are dropped together, once the steps
they cost since the last drop reach about what a drop costs.

Shape legend: B sentences, A sentences still decoding, S source length, L longest length cap,
V vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from transformer.decoding.api import EncoderOutLike, KVCacheLike, Seq2SeqModel
from transformer.decoding.common import (ban_tokens, banned_ids, block_maxima, block_size, blocks_log_sum_exp,
                                         encode_source, max_last, max_target_lengths, reserve_steps)

# Finished rows leave the batch once the row-steps they cost reach the active rows / this.
DROP_EVERY_ROWS = 4


@torch.inference_mode()
def greedy_search(
    model: Seq2SeqModel,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    src_lengths: Tensor | None = None,
    max_len: int | None = None,
    return_scores: bool = False,
    start: Tensor | None = None,
) -> list[list[int]] | list[tuple[list[int], float]]:
    """Pick the most likely next token at every step until EOS or the length cap.

    Args:
        model: anything with ``encode / init_cache / decode_step`` (``decoding.api.Seq2SeqModel``),
            in ``eval()`` mode: search does not change the mode.
        src: ``(B, S)`` source ids, right-padded with ``pad_id``, or a front end's frames ``(B, T, F)``.
        bos_id, eos_id, pad_id: special ids; PAD and BOS are never chosen.
        max_len_a, max_len_b: at most ``floor(a * src_len + b)`` tokens are generated per
            sentence (EOS included), ``src_len`` being its real (non-pad) length.
        src_lengths: ``(B,)`` real source lengths, if already known (of frames: needed).
        max_len: hard ceiling on generated tokens (the model's positional range).
        return_scores: also return each output's summed log-probability (EOS included).
        start: ``(B,)`` each sentence's first decoder token (a target tag, ``data.tag_side=decoder``),
            or ``(B, P)`` a start and the tokens forced after it (``data.tag_side=codes``); None: BOS.

    Returns:
        Per sentence, in input order, the generated ids without BOS/EOS; with ``return_scores``,
        ``(ids, sum_logprob)`` pairs.
    """
    max_lens = max_target_lengths(src, pad_id, max_len_a, max_len_b, src_lengths, max_len)  # (B,)
    enc = encode_source(model, src, src_lengths)
    out = _Outputs.empty(src.size(0), int(max_lens.max()), pad_id, src.device)
    last = (torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device) if start is None
            else start.to(src.device, torch.long).view(src.size(0), -1).contiguous())  # (A, P)
    cache = reserve_steps(model.init_cache(enc), int(max_lens.max()) + last.size(1) - 1)
    active = torch.arange(src.size(0), device=src.device)  # (A,) row in the input batch
    caps = max_lens  # (A,) each active row's length cap
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (A,) finished, not yet dropped
    idle = 0  # row-steps spent on finished rows since the last drop
    next_token = _next_token_fn(model, banned_ids(pad_id, bos_id, eos_id), return_scores)
    for step in range(out.tokens.size(1)):
        best_lp, best, cache = next_token(last, enc, cache)  # (A,) or None, (A,)
        finished = out.record(active, step, best, best_lp, eos_id, caps, done, pad_id)  # (A,)
        if bool(finished.all()):
            break
        last = best.unsqueeze(1)  # (A,) -> (A, 1)
        idle += int(finished.sum())  # one row that is not all finished has none finished
        # A drop copies every remaining row's caches, about what a quarter of the rows cost a
        # step: finished rows ride along until the steps they cost reach that much.
        if idle >= max(1, active.size(0) // DROP_EVERY_ROWS):
            keep = (~finished).nonzero().squeeze(1)  # (A',) rows that go on
            active, last, caps, done, idle = active[keep], last[keep], caps[keep], finished[keep], 0
            # In place where the cache can: into the buffers of an earlier drop, no allocation.
            enc, cache = enc.index_select(keep), cache.reorder_(keep)
        else:
            done = finished
    return out.results(return_scores, eos_id, pad_id)


# (last (A, 1), encoder output, cache) -> (log-prob of the choice (A,) or None, choice (A,), cache)
NextTokenFn = Callable[[Tensor, EncoderOutLike, KVCacheLike], "tuple[Tensor | None, Tensor, KVCacheLike]"]


def _next_token_fn(model: Seq2SeqModel, banned: tuple[int, ...], with_scores: bool) -> NextTokenFn:
    """One decoder step and the argmax over the vocabulary, ``banned`` ids excluded.

    Without scores only the argmax matters, and it is the same on unnormalised logits: a model
    that offers them (``decode_step_logits``) saves a log-softmax over V per step. A model that
    compiles a search's step with its decoder step (``search_step``, ``decoding.compiled``)
    runs the step and the choice as one graph.
    """
    compile_step = getattr(model, "search_step", None)
    if compile_step is not None:
        return compile_step(lambda m: _traced_choice(m, banned, with_scores), ("greedy_search", banned, with_scores))
    step_logits = None if with_scores else getattr(model, "decode_step_logits", None)
    if step_logits is not None:
        def argmax_of_logits(last: Tensor, enc: EncoderOutLike, cache: KVCacheLike):
            logits, cache = step_logits(last, enc, cache)  # (A, V)
            _, best = max_last(ban_tokens(logits, banned, inplace=True))  # (A,)
            return None, best, cache
        return argmax_of_logits

    def argmax_of_log_probs(last: Tensor, enc: EncoderOutLike, cache: KVCacheLike):
        log_probs, cache = model.decode_step(last, enc, cache)  # (A, V)
        best_lp, best = max_last(ban_tokens(log_probs, banned, inplace=True))  # (A,), (A,)
        return best_lp, best, cache
    return argmax_of_log_probs


def _traced_choice(model: Seq2SeqModel, banned: tuple[int, ...], with_scores: bool) -> NextTokenFn:
    """The step and its choice as a compiled graph traces them, from the unnormalised scores:
    the largest allowed one and its first index (as ``torch.max`` and ``max_last`` on ties), and
    with scores its log-probability, that score less the log of the normaliser over every id
    (as ``decode_step``'s log-softmax takes it). Written as plain reductions: inductor compiles
    ``max`` with its index, and a log-softmax written out over ``(A, V)``, to slower loops. A
    large vocabulary goes by blocks (``common.block_maxima``): the first block holding the
    largest allowed score, then the first such entry in it (a batch of 63 rows and 8,000 ids,
    one thread: 0.17 ms against 0.59 over whole rows)."""
    banned = tuple(i for i in banned if i is not None)

    def choose(last: Tensor, enc: EncoderOutLike, cache: KVCacheLike):
        logits, cache = model.decode_step_logits(last, enc, cache)  # (A, V)
        logits = logits.float()
        blk = block_size(logits.size(-1))
        if blk is None:
            best_score, best = _first_max(logits + ban_tokens(logits.new_zeros(logits.size(-1)), banned))
            norm = _log_sum_exp(logits) if with_scores else None
        else:
            blocks, tops, allowed, ban = block_maxima(logits, blk, banned)  # (A, V / blk, blk), (A, V / blk) x2
            best_score, first = _first_max(allowed)  # (A, 1), (A,) the first block holding it
            entries = blocks.gather(1, first.view(-1, 1, 1).expand(-1, 1, blk)).squeeze(1) + ban[first]  # (A, blk)
            best = first * blk + _first_max(entries, best_score)[1]  # (A,)
            norm = blocks_log_sum_exp(blocks, tops).unsqueeze(-1) if with_scores else None
        if norm is None:
            return None, best, cache
        return (best_score - norm).squeeze(-1), best, cache
    return choose


def _first_max(x: Tensor, best: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The largest entry of each row of ``x (A, M)`` (or ``best (A, 1)``, known), ``(A, 1)``, and
    the first index holding it, ``(A,)``: the index as the smallest position equal to it."""
    best = x.amax(dim=-1, keepdim=True) if best is None else best
    ids = torch.arange(x.size(-1), device=x.device)
    return best, torch.where(x == best, ids, x.size(-1)).amin(dim=-1).clamp(max=x.size(-1) - 1)


def _log_sum_exp(x: Tensor) -> Tensor:
    """``(A, V) -> (A, 1)``, written out as max + log-sum of exp (a compiled ``logsumexp`` is slower)."""
    top = x.amax(dim=-1, keepdim=True)
    return top + (x - top).exp().sum(dim=-1, keepdim=True).log()


@dataclass
class _Outputs:
    """What every sentence generated so far, in input order."""

    tokens: Tensor  # (B, L) chosen ids, PAD past each sentence's end
    scores: Tensor  # (B,) float64 summed log-prob, EOS included

    @classmethod
    def empty(cls, batch: int, steps: int, pad_id: int, device: torch.device) -> "_Outputs":
        tokens = torch.full((batch, steps), pad_id, dtype=torch.long, device=device)  # (B, L)
        return cls(tokens, torch.zeros(batch, dtype=torch.float64, device=device))

    def record(self, rows: Tensor, step: int, best: Tensor, best_lp: Tensor | None, eos_id: int,
               caps: Tensor, done: Tensor, pad_id: int) -> Tensor:
        """Write step ``step``'s choices ``best (A,)`` of sentences ``rows (A,)``, PAD (and no
        score) for those ``done (A,)`` already; return which are finished ``(A,)``: done, or they
        chose EOS or reached their length cap ``caps (A,)``."""
        if best_lp is not None:
            self.scores[rows] += best_lp.to(torch.float64).masked_fill(done, 0.0)
        self.tokens[rows, step] = best.masked_fill(done, pad_id)
        return done | (best == eos_id) | (step + 1 >= caps)

    def results(self, with_scores: bool, eos_id: int, pad_id: int) -> list[list[int]] | list[tuple[list[int], float]]:
        """Each sentence's tokens up to its EOS (not kept) or its cap: PAD is never chosen, so
        the first EOS or PAD of a row ends it."""
        tokens = [row[:_end(row, eos_id, pad_id)] for row in self.tokens.tolist()]
        return list(zip(tokens, self.scores.tolist())) if with_scores else tokens


def _end(row: list[int], eos_id: int, pad_id: int) -> int:
    for i, token in enumerate(row):
        if token == eos_id or token == pad_id:
            return i
    return len(row)
