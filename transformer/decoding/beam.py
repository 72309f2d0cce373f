"""Beam search for autoregressive encoder-decoders, batched over sentences x beams.

All ``B * K`` hypotheses are decoded as one batch of ``N`` rows (row ``b * K + k`` is beam
``k`` of sentence ``b``); after each step the KV cache follows the surviving beams with a single
``cache.reorder``. The encoder output stays one row per sentence: the cache is made for K beams
a sentence (``init_cache(enc, beams=K)``), which share their sentence's cross-attention state.
The first step, where every beam of a sentence starts from BOS alike, is decoded once per
sentence in a batch; ``cache.expand_beams()`` then copies that row to the sentence's K beams (a
single sentence decodes its K beams from the first step, see ``_start``).
A step is the decoder step, the best 2K candidates of each sentence and the K that survive
(``_step_fns``); a compiled model (``decoding.compiled``) runs each step after the first as one
graph, and the bookkeeping of finished hypotheses stays here, in Python.

Scoring follows fairseq: a finished hypothesis scores ``logprob / length ** length_penalty``,
where ``logprob`` sums the log-probabilities of its tokens *and* of its EOS and ``length``
counts the EOS. A hypothesis cut at the length cap has no EOS; its length is its token count.
Tokens forced after the start (``start (B, P)``: a language code that ``generate`` forces as
the first output, M2M100's) count in the length, as ``generate`` counts them, and add nothing
to the log-probability.

Stopping rule (``early_stopping=True``, the default, as in fairseq): a sentence is done as soon
as it has ``beam_size`` finished hypotheses, or when it reaches its length cap (its live beams
are then finalised as they are). With ``early_stopping=False`` a sentence with ``beam_size``
finished hypotheses keeps searching while some live beam could still beat the worst of the best
``beam_size`` finished ones; the bound assumes log-probabilities <= 0 (a live beam's log-prob
can only fall), so the n-best list is then exactly what running every beam to the cap would give.

Shape legend:
    B sentences     K beam size     N = B * K rows     V vocabulary size
    t tokens generated so far (BOS excluded)           C = 2 * K candidates per sentence
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from transformer.decoding.api import EncoderOutLike, KVCacheLike, Seq2SeqModel
from transformer.decoding.common import (ban_tokens, banned_ids, block_maxima, block_size, blocks_log_sum_exp,
                                         encode_source, max_target_lengths, reserve_steps)
from transformer.decoding.precision import compute_dtype


@dataclass(frozen=True)
class Hypothesis:
    """A finished hypothesis: ids without BOS/EOS, normalised score and summed log-prob."""

    tokens: list[int]
    score: float
    logprob: float


def normalized_score(logprob: float, length: int, length_penalty: float) -> float:
    """fairseq's length normalisation: ``logprob / length ** length_penalty``."""
    return logprob / (length**length_penalty)


@dataclass
class _Beams:
    """Search state of all sentences: live beams plus the finished hypotheses of each."""

    tokens: Tensor  # (B, K, t) generated ids of the live beams
    scores: Tensor  # (B, K) summed log-prob of each live beam, -inf = no beam
    max_lens: list[int]  # per sentence, cap on generated tokens (EOS included)
    finished: list[list[Hypothesis]] = field(default_factory=list)
    done: list[bool] = field(default_factory=list)
    forced: int = 0  # tokens forced after the start, counted in every length (M2M100's language code)


@dataclass
class _Candidates:
    """The best C = 2K extensions of each sentence's live beams, best first."""

    scores: Tensor  # (B, C) summed log-prob after the extension
    beams: Tensor  # (B, C) parent beam index in 0..K-1
    tokens: Tensor  # (B, C) the appended token
    ends: Tensor | None = None  # (B, K) bool: the K best that append EOS to a live beam (``_choose``)


@torch.inference_mode()
def beam_search(
    model: Seq2SeqModel,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    n_best: int = 1,
    src_lengths: Tensor | None = None,
    max_len: int | None = None,
    early_stopping: bool = True,
    start: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Beam search over ``beam_size`` hypotheses per sentence (see the module docstring).

    Args:
        model: anything with ``encode / init_cache / decode_step`` (``decoding.api.Seq2SeqModel``),
            in ``eval()`` mode. src: ``(B, S)`` ids padded with ``pad_id``, or frames ``(B, T, F)``.
        bos_id, eos_id, pad_id: special ids; PAD and BOS are never generated.
        beam_size: K, live hypotheses per sentence.
        length_penalty: exponent of the length normaliser (0 = raw log-prob, favours short).
        max_len_a, max_len_b: at most ``floor(a * src_len + b)`` generated tokens per sentence, EOS included.
        n_best: hypotheses returned per sentence (<= beam_size); src_lengths: ``(B,)`` real
            source lengths, if already known (of frames: needed).
        max_len: hard ceiling on generated tokens (the model's positional range).
        early_stopping: the stopping rule, see the module docstring.
        start: ``(B,)`` first decoder tokens (a target tag, ``data.tag_side=decoder``), or ``(B, P)``
            a start and tokens forced after it (``data.tag_side=codes``), counted in the length; None: BOS.

    Returns:
        For each sentence in input order, ``n_best`` ``Hypothesis`` sorted by score, best first.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"need 1 <= n_best <= beam_size, got n_best={n_best}, beam_size={beam_size}")
    max_lens = max_target_lengths(src, pad_id, max_len_a, max_len_b, src_lengths, max_len).tolist()
    enc, cache, beams, last = _start(model, src, beam_size, max_lens, bos_id, start, src_lengths)
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    sent_ids = list(range(src.size(0)))  # input position of each sentence still searched
    first_step, later_step = _step_fns(model, beam_size, banned_ids(pad_id, bos_id, eos_id), eos_id)
    for step in range(max(max_lens)):
        once = step == 0 and last.size(0) != beams.scores.numel()  # a row per sentence, not per beam
        cands, survivors, cache = (first_step if once else later_step)(last, enc, cache, beams.scores)
        reorder = _extend(beams, _Candidates(*cands), survivors, eos_id, length_penalty, early_stopping)  # (N,)
        if all(beams.done):
            break
        dropped = any(beams.done)
        if dropped:
            # Done sentences leave the batch: later steps cost only what live beams need.
            beams, kept, rows, sent_ids = _drop_done(beams, sent_ids, results)
            reorder, enc = reorder[rows], enc.index_select(kept)  # (N',), B' sentences
        # Without a dropped sentence every row keeps its sentence, so the cache can keep the
        # per-sentence cross-attention keys/values instead of copying them every step.
        # A cache that can reorder in place (``KVCache.reorder_``) reuses its buffers.
        cache = cache.reorder_(reorder, cross=dropped)
        # Contiguous: a view's stride would change every step, and a compiled step recompile.
        last = beams.tokens[:, :, -1].reshape(-1, 1).contiguous()  # (B, K) -> (N, 1)
    return _n_best(results, beams, sent_ids, n_best)


def _start(model: Seq2SeqModel, src: Tensor, k: int, max_lens: list[int],
           bos_id: int, start: Tensor | None = None,
           src_lengths: Tensor | None = None) -> tuple[EncoderOutLike, KVCacheLike, _Beams, Tensor]:
    """Encode once, set up the cache for K beams a sentence (rows ``b * K + k``) and
    ``max(max_lens)`` steps, the beams, and the first input (BOS, or ``start``: ``(B,)`` or a
    start and its forced tokens ``(B, P)``, decoded in one step). In a batch the
    first step is decoded once per sentence ``(B, 1)``, since all its beams start alike
    (CTranslate2 does the same; on a CPU that step was about 5 % of beam 5's products). A
    single sentence's first step decodes its K beams ``(K, 1)`` like every later step: a step
    of a few rows costs what reading the weights costs, whatever the rows, and the first step
    is then a later one (one compiled step, no copy of its row to the beams): on a CPU, beam 5's
    first step took 2.2 ms a sentence decoded once and copied, against 1.5 for a later step."""
    batch = src.size(0)
    enc = encode_source(model, src, src_lengths)  # B rows: the beams of a sentence share it
    last = (torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device) if start is None
            else start.to(src.device, torch.long).view(batch, -1))  # (B, P)
    cache = reserve_steps(model.init_cache(enc, beams=k), max(max_lens) + last.size(1) - 1)
    rows = k if batch == 1 else 1  # first-step rows per sentence
    last = last.repeat_interleave(rows, dim=0).contiguous()  # (B * rows, P)
    beams = _init_beams(batch, k, max_lens, src.device)
    beams.forced = last.size(1) - 1
    return enc, cache, beams, last


def _per_beam(rows: tuple[Tensor, ...], cache: KVCacheLike, n_rows: int) -> tuple[tuple[Tensor, ...], KVCacheLike]:
    """The first step's outputs ``rows`` for ``n_rows`` = N hypotheses. The first step runs
    once per sentence (its K beams all start from BOS alike); each beam then gets a copy of its
    sentence's row, in the cache too."""
    if rows[0].size(0) == n_rows:
        return rows, cache
    k = n_rows // rows[0].size(0)
    return tuple(r.repeat_interleave(k, dim=0) for r in rows), cache.expand_beams()


# (last, encoder output, cache, live scores (B, K)) -> (candidates, survivors, cache)
StepFn = Callable[[Tensor, EncoderOutLike, KVCacheLike, Tensor], "tuple[tuple, tuple, KVCacheLike]"]


def _step_fns(model: Seq2SeqModel, k: int, banned: tuple[int, ...], eos_id: int) -> tuple[StepFn, StepFn]:
    """The first step and every later one: the decoder step, its candidates and the beams that
    survive (``_choose``). The first decodes one row per sentence (``_per_beam``). A model that
    compiles a search's step with the decoder step it calls (``search_step``:
    ``decoding.compiled``) runs a later step as one graph: one sentence at a time, the choice's
    dozen small operations cost more as separate calls than the graph spends on them."""
    def first(last: Tensor, enc: EncoderOutLike, cache: KVCacheLike, scores: Tensor):
        if _rescores(model):
            states, cache = model.decode_step_states(last, enc, cache)  # (B, D), or (N, D)
            (states, logits), cache = _per_beam((states, model.project(states)), cache, scores.numel())
            cands = _rescored_candidates(scores, states, logits, model, k, banned)
        else:
            log_probs, cache = model.decode_step(last, enc, cache)  # (B, V), or (N, V)
            (log_probs,), cache = _per_beam((log_probs,), cache, scores.numel())
            cands = _top_candidates(scores, _next_log_probs(log_probs, k, banned))
        return (*_choose(cands, k, eos_id), cache)

    def make(model: Seq2SeqModel, raw: bool = False) -> StepFn:
        rescore = _rescores(model)

        def later(last: Tensor, enc: EncoderOutLike, cache: KVCacheLike, scores: Tensor):
            if rescore:  # scores rounded to bf16: the best recomputed in fp32
                states, cache = model.decode_step_states(last, enc, cache)  # (N, D)
                cands = _rescored_candidates(scores, states, model.project(states), model, k, banned)
            elif raw:  # the unnormalised scores: the candidates from their blocks
                logits, cache = model.decode_step_logits(last, enc, cache)  # (N, V)
                cands = _raw_candidates(scores, logits.float(), k, banned)
            else:
                log_probs, cache = model.decode_step(last, enc, cache)  # (N, V)
                cands = _top_candidates(scores, _next_log_probs(log_probs, k, banned))
            return (*_choose(cands, k, eos_id), cache)
        return later

    def make_compiled(model: Seq2SeqModel) -> StepFn:
        return make(model, raw=hasattr(model, "decode_step_logits"))
    compile_step = getattr(model, "search_step", None)
    if compile_step is None:
        return first, make(model)
    return first, compile_step(make_compiled, ("beam_search", k, banned, eos_id))


def _choose(cands: _Candidates, k: int, eos_id: int):
    """The candidates and the survivors among them, as tuples of tensors (``_Candidates`` and
    ``_survivors``'s fields). Which of the K best candidates end a hypothesis is worked out
    here too, in the compiled step where there is one: as separate calls, those few operations
    on a ``(B, K)`` tensor cost a sentence's step about 40 microseconds on a CPU."""
    ends = (cands.tokens[:, :k] == eos_id) & torch.isfinite(cands.scores[:, :k])  # (B, K)
    return (cands.scores, cands.beams, cands.tokens, ends), _survivors(cands, eos_id, k)


def _rescores(model: Seq2SeqModel) -> bool:
    """Whether a step's best candidates are recomputed in fp32 (``_rescored_candidates``): a
    model that offers its output states (``decode_step_states``, ``project``, ``project_ids``)
    and computes in a narrower format (``decode.dtype=bf16``)."""
    return hasattr(model, "project_ids") and compute_dtype(model) != torch.float32


def _next_log_probs(log_probs: Tensor, k: int, banned: tuple[int, ...]) -> Tensor:
    """A step's ``log_probs (N, V)`` as float32 ``(B, K, V)`` with the ``banned`` ids at -inf."""
    log_probs = ban_tokens(log_probs.float(), banned, inplace=True)
    return log_probs.view(log_probs.size(0) // k, k, -1)  # (N, V) -> (B, K, V)


def _extend(beams: _Beams, cands: _Candidates, survivors: tuple[Tensor, Tensor, Tensor, Tensor],
            eos_id: int, length_penalty: float, early_stopping: bool) -> Tensor:
    """One step of bookkeeping: finish EOS candidates, make the survivors (the K best others)
    the live beams, finish sentences at their cap, apply the stopping rule; return the cache
    rows ``(N,)``."""
    _finalize_eos(beams, cands, eos_id, length_penalty)
    reorder = _advance(beams, *survivors)  # (N,)
    _finalize_at_cap(beams, length_penalty)
    _update_done(beams, length_penalty, early_stopping)
    return reorder


def _drop_done(beams: _Beams, sent_ids: list[int], results: list[list[Hypothesis]]):
    """Move done sentences' hypotheses to ``results``; keep the rest.

    Returns the shrunk beams, the kept sentences ``(B',)``, their rows ``(N',)`` of the old
    ``N = B * K`` layout, and the kept sentences' input positions.
    """
    k = beams.scores.size(1)
    keep = [b for b, done in enumerate(beams.done) if not done]
    for b, done in enumerate(beams.done):
        if done:
            results[sent_ids[b]] = beams.finished[b]
    idx = torch.tensor(keep, dtype=torch.long, device=beams.scores.device)  # (B',)
    rows = (idx.unsqueeze(1) * k + torch.arange(k, device=idx.device)).view(-1)  # (B', K) -> (N',)
    kept = _Beams(
        beams.tokens.index_select(0, idx), beams.scores.index_select(0, idx),
        [beams.max_lens[b] for b in keep], [beams.finished[b] for b in keep], [False] * len(keep), beams.forced,
    )
    return kept, idx, rows, [sent_ids[b] for b in keep]


def _n_best(results: list[list[Hypothesis]], beams: _Beams, sent_ids: list[int],
            n_best: int) -> list[list[Hypothesis]]:
    """Every sentence's ``n_best`` finished hypotheses, best first, in input order: ``results``
    holds those of the sentences that left the batch, ``beams`` the rest (at ``sent_ids``)."""
    for b, sid in enumerate(sent_ids):
        results[sid] = beams.finished[b]
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in results]


def _init_beams(batch: int, k: int, max_lens: list[int], device: torch.device) -> _Beams:
    """Only beam 0 is live at the start (the others -inf), so the K beams never duplicate."""
    scores = torch.full((batch, k), float("-inf"), device=device)  # (B, K)
    scores[:, 0] = 0.0
    tokens = torch.empty(batch, k, 0, dtype=torch.long, device=device)  # (B, K, 0)
    return _Beams(tokens, scores, max_lens, [[] for _ in range(batch)], [False] * batch)


def _top_candidates(scores: Tensor, log_probs: Tensor) -> _Candidates:
    """Best 2K extensions per sentence of ``scores (B, K)`` by ``log_probs (B, K, V)``.

    2K is enough: each beam has one EOS extension, so at least K candidates are not EOS.

    With a large vocabulary the search does not add ``scores`` to all ``K * V`` entries and
    rank them (on a CPU that add and the top-k over ``(B, K * V)`` were a sixth of beam
    search's time). It cuts each beam's vocabulary into blocks of ``blk`` entries, takes each
    block's maximum plus the beam's score, keeps the C best blocks and ranks only their
    ``C * blk`` entries. Exact: there are C blocks whose maxima are all >= the C-th best block
    maximum, so at least C entries reach it and every one of the C best entries does too, which
    puts its block among the C best blocks (exact ties aside, whose order topk leaves open).
    """
    batch, k, vocab = log_probs.shape
    n_cands = min(2 * k, k * vocab)
    blk = block_size(vocab)
    if blk is None or n_cands * blk >= k * vocab:
        total = scores.unsqueeze(-1) + log_probs  # (B, K, 1) + (B, K, V) -> (B, K, V)
        top, flat = total.view(batch, k * vocab).topk(n_cands, dim=-1)  # (B, C)
        return _Candidates(top, flat // vocab, flat % vocab)
    n_blocks = k * vocab // blk  # blocks per sentence, beam-major: block j is beam j // (V / blk)
    blocks = log_probs.reshape(batch, n_blocks, blk)  # (B, K, V) -> (B, K * V / blk, blk)
    block_beam = torch.arange(n_blocks, device=log_probs.device) // (vocab // blk)  # (K * V / blk,)
    beam_scores = scores.index_select(1, block_beam)  # (B, K * V / blk)
    best_blocks = (blocks.amax(-1) + beam_scores).topk(n_cands, dim=-1).indices  # (B, C)
    entries = blocks.gather(1, best_blocks.unsqueeze(-1).expand(-1, -1, blk))  # (B, C, blk)
    entries = beam_scores.gather(1, best_blocks).unsqueeze(-1) + entries  # (B, C, 1) + (B, C, blk)
    top, pos = entries.view(batch, n_cands * blk).topk(n_cands, dim=-1)  # (B, C)
    flat = best_blocks.gather(1, pos // blk) * blk + pos % blk  # (B, C) index into K * V
    return _Candidates(top, flat // vocab, flat % vocab)


def _raw_candidates(scores: Tensor, logits: Tensor, k: int, banned: tuple[int, ...]) -> _Candidates:
    """``_top_candidates`` from unnormalised scores ``logits (N, V)``, as a compiled step runs it:
    one pass over them gives each block's maximum and sum of exponentials, hence each row's
    log-sum-exp; the blocks holding a banned id get their maximum again without it; the best
    blocks' entries are gathered from the scores with the ban added, less the log-sum-exp. The
    ``(N, V)`` log-probabilities are never written out: a compiled beam-5 step of 750 rows
    spent 15.5 ms on them and the blocked search, 7.1 this way (docs/experiments.md). Same
    candidates; the normaliser is summed by blocks, so scores move in the last digits."""
    vocab = logits.size(-1)
    blk = block_size(vocab)
    if blk is None:
        return _top_candidates(scores, _next_log_probs(torch.log_softmax(logits, dim=-1), k, banned))
    batch, n_blocks = scores.size(0), vocab // blk
    blocks, tops, allowed, ban = block_maxima(logits, blk, banned)  # (N, V / blk, blk), (N, V / blk) x2
    norm = blocks_log_sum_exp(blocks, tops)  # (N,)
    live = scores - norm.view(batch, k)  # (B, K): the beam's score less its row's normaliser
    n_cands = min(2 * k, k * vocab)
    block_beam = torch.arange(k * n_blocks, device=logits.device) // n_blocks  # (K * V / blk,)
    beam_scores = live.index_select(1, block_beam)  # (B, K * V / blk)
    best_blocks = (allowed.view(batch, k * n_blocks) + beam_scores).topk(n_cands, dim=-1).indices  # (B, C)
    entries = logits.view(batch, k * n_blocks, blk).gather(1, best_blocks.unsqueeze(-1).expand(-1, -1, blk))
    entries = entries + ban.index_select(0, (best_blocks % n_blocks).view(-1)).view(batch, n_cands, blk)
    entries = beam_scores.gather(1, best_blocks).unsqueeze(-1) + entries  # (B, C, blk)
    best, pos = entries.view(batch, n_cands * blk).topk(n_cands, dim=-1)  # (B, C)
    flat = best_blocks.gather(1, pos // blk) * blk + pos % blk  # (B, C) index into K * V
    return _Candidates(best, flat // vocab, flat % vocab)


def _rescored_candidates(scores: Tensor, states: Tensor, logits: Tensor, model: Seq2SeqModel, k: int,
                         banned: tuple[int, ...]) -> _Candidates:
    """``_raw_candidates`` of a model whose vocabulary scores ``logits (N, V)`` are rounded to
    bf16, then each candidate's score recomputed in fp32 from the output ``states (N, D)``
    (``model.project_ids``), its row's normaliser corrected by what its candidates' recomputed
    probabilities change, and the candidates ranked again. bf16 keeps 8 bits of mantissa: a
    score of 12 moves by up to 0.03, which swaps near-ties between beams (docs/experiments.md).
    A row's candidates are its best entries, which hold most of its probability when it has
    any; a row without candidates has no score to correct."""
    logits = logits.float()
    cands = _raw_candidates(scores, logits, k, banned)  # (B, C), ranked by the rounded scores
    batch, n_cands = cands.tokens.shape
    rows = (torch.arange(batch, device=states.device).unsqueeze(1) * k + cands.beams).view(-1)  # (B * C,)
    rounded = logits.view(-1).index_select(0, rows * logits.size(1) + cands.tokens.view(-1))  # (B * C,)
    exact = model.project_ids(states.index_select(0, rows), cands.tokens.view(-1, 1)).view(-1)
    change = exact - rounded  # (B * C,)
    own = cands.scores - scores.gather(1, cands.beams)  # (B, C): each one's rounded log-probability
    own = torch.where(torch.isfinite(cands.scores), own, float("-inf")).view(-1)  # none from a dead beam
    shift = torch.zeros_like(logits[:, 0]).index_add(0, rows, own.exp() * change.expm1())  # (N,)
    total = cands.scores + (change - shift.log1p().index_select(0, rows)).view(batch, n_cands)
    total, order = total.sort(dim=-1, descending=True)
    return _Candidates(total, cands.beams.gather(1, order), cands.tokens.gather(1, order))


def _finalize_eos(beams: _Beams, cands: _Candidates, eos_id: int, length_penalty: float) -> None:
    """Turn EOS candidates ranked within the top K into finished hypotheses (fairseq's rule)."""
    length = beams.tokens.size(-1) + 1 + beams.forced  # tokens so far plus the EOS (and forced ones)
    for b, ends in enumerate(cands.ends.tolist()):  # (B, K) as lists: a sentence's K are few
        if beams.done[b] or not any(ends):
            continue
        for c in (c for c, end in enumerate(ends) if end):
            logprob = float(cands.scores[b, c])
            parent = int(cands.beams[b, c])
            tokens = beams.tokens[b, parent].tolist()
            score = normalized_score(logprob, length, length_penalty)
            beams.finished[b].append(Hypothesis(tokens, score, logprob))


def _survivors(cands: _Candidates, eos_id: int, k: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The K best non-EOS candidates, the next live beams: their parent beams, appended tokens
    and scores ``(B, K)``, and the cache rows they continue ``(N,)``."""
    batch, n_cands = cands.tokens.shape
    # Sort key: non-EOS candidates first, each group in rank order; keep the first K.
    rank = torch.arange(n_cands, device=cands.tokens.device)  # (C,)
    key = (cands.tokens == eos_id).long() * n_cands + rank  # (B, C)
    keep = key.argsort(dim=-1)[:, :k]  # (B, K) candidate positions
    keep = keep.gather(1, _slots_by_parent(cands.beams.gather(1, keep)))  # (B, K)
    parents = cands.beams.gather(1, keep)  # (B, K)
    offsets = torch.arange(batch, device=parents.device).unsqueeze(1) * k  # (B, 1)
    rows = (offsets + parents).view(batch * k)  # (B, K) -> (N,)
    return parents, cands.tokens.gather(1, keep), cands.scores.gather(1, keep), rows


def _slots_by_parent(parents: Tensor) -> Tensor:
    """An order of the K survivors ``parents (B, K)`` (rank order) in which each parent's best
    child takes its parent's slot and the others fill the free slots in rank order: the cache
    then copies only the rows whose parent moved (``KVCache.reorder_``). The slot a hypothesis
    holds changes nothing else: ranking reads scores, and ties are broken by rank before this.
    Returns ``(B, K)`` positions into the rank order, slot by slot."""
    k = parents.size(1)
    slots = torch.arange(k, device=parents.device)  # (K,)
    same = parents.unsqueeze(2) == parents.unsqueeze(1)  # (B, K, K): i and j share a parent
    first = ~(same & (slots.view(1, k) < slots.view(k, 1))).any(-1)  # (B, K) no better sibling
    taken = (first.unsqueeze(2) & (parents.unsqueeze(2) == slots)).any(1)  # (B, K) slot has its child
    free = (taken.long() * k + slots).argsort(dim=-1)  # (B, K) free slots first, ascending
    nth_other = (~first).long().cumsum(dim=-1) - 1  # (B, K) rank among the non-first children
    slot = torch.where(first, parents, free.gather(1, nth_other.clamp(min=0)))  # (B, K)
    return slot.argsort(dim=-1)  # (B, K): slot -> survivor


def _advance(beams: _Beams, parents: Tensor, tokens: Tensor, scores: Tensor, rows: Tensor) -> Tensor:
    """Make the survivors (``_survivors``) the live beams; return their cache rows ``(N,)``."""
    history = beams.tokens.gather(1, parents.unsqueeze(-1).expand_as(beams.tokens))  # (B, K, t)
    beams.tokens = torch.cat([history, tokens.unsqueeze(-1)], dim=-1)  # (B, K, t + 1)
    beams.scores = scores  # (B, K)
    return rows


def _finalize_at_cap(beams: _Beams, length_penalty: float) -> None:
    """A sentence at its length cap finalises its live beams (no EOS) and is done."""
    length = beams.tokens.size(-1)
    for b, cap in enumerate(beams.max_lens):
        if beams.done[b] or length < cap:
            continue
        for tokens, logprob in zip(beams.tokens[b].tolist(), beams.scores[b].tolist()):
            if logprob != float("-inf"):
                score = normalized_score(logprob, length + beams.forced, length_penalty)
                beams.finished[b].append(Hypothesis(tokens, score, logprob))
        beams.done[b] = True


def _update_done(beams: _Beams, length_penalty: float, early_stopping: bool) -> None:
    """Apply the stopping rule to every sentence that has ``beam_size`` finished hypotheses."""
    k = beams.scores.size(1)
    length = beams.tokens.size(-1)
    for b, hyps in enumerate(beams.finished):
        if beams.done[b] or len(hyps) < k:
            continue
        if early_stopping:
            beams.done[b] = True
            continue
        worst_kept = sorted(h.score for h in hyps)[-k]  # K-th best finished score
        reachable = _best_reachable(beams.scores[b], length + beams.forced, beams.max_lens[b] + beams.forced,
                                    length_penalty)
        beams.done[b] = reachable <= worst_kept


def _best_reachable(scores: Tensor, length: int, cap: int, length_penalty: float) -> float:
    """Upper bound on the final score of live beams with ``scores (K,)`` and ``length`` tokens.

    Their log-prob can only fall and their final length lies in ``[length + 1, cap]``;
    ``s / L ** lp`` is monotone in L, so the best case sits at one end of that range.
    """
    best = float(scores.max())
    if best == float("-inf"):
        return best
    return max(normalized_score(best, n, length_penalty) for n in (length + 1, cap))
