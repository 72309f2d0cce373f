"""Token-budget batching and collate functions (plain torch; no Lightning).

Shape legend: B batch size, S source length, T target / piece length, W words.

Translation batch (``TranslationCollator``)::

    src          (B, S) long   source pieces + EOS, right-padded with pad_id
    src_pad_mask (B, S) bool   True = real token
    tgt_in       (B, T) long   BOS (or a multilingual model's target tag, ``tag_to_decoder``) + target pieces
    tgt_out      (B, T) long   target pieces + EOS
    tgt_pad_mask (B, T) bool   True = real token (same for tgt_in and tgt_out)
    index        (B,)   long   position of each example in its split
    start        (B,)   long   with ``tag_to_decoder`` only: each source's first id, its target
                               tag, moved to the front of ``tgt_in`` (not left in ``src``)
    n_tokens     int           real target tokens (counted on the host: no device sync to log it)
    direction    (B,)   long   each pair's direction, where the split has that column (a
                               multilingual model's joined validation: position in ``data.directions``)

With ``pad_to_multiple=m`` the widths S and T are rounded up to multiples of m, and the batch
sampler budgets with lengths rounded the same way: a compiled training step then sees a few
batch shapes, and GPU matrix products get aligned sizes.

Tagging batch (``TaggingCollator``)::

    src          (B, T) long   word pieces (no specials), right-padded with pad_id
    src_pad_mask (B, T) bool   True = real piece
    word_ids     (B, T) long   index of the word each piece belongs to; -1 for padding
    tags         (B, W) long   tag id per word, -100 (ignored by cross-entropy) for padding
    index        (B,)   long

A model with a learned position table reads at most its rows: with ``max_positions`` a
collator cuts a longer row to that many pieces, keeping the tokenizer's closing framing
(``[SEP]``, ``</s>``) as :func:`cut_row` does, and a tagging row's words left without a piece
are not scored (their tags ``-100``).
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

log = logging.getLogger(__name__)

IGNORE_INDEX = -100


def cut_row(ids: Sequence[int], max_positions: int | None, suffix: Sequence[int] = ()) -> list[int]:
    """``ids`` cut to ``max_positions`` pieces, its last ``len(suffix)`` the closing framing
    ``suffix`` (a row of at most ``max_positions`` pieces, or no limit: ``ids`` as they are)."""
    if max_positions is None or len(ids) <= max_positions:
        return list(ids)
    return list(ids[: max_positions - len(suffix)]) + list(suffix)


def translation_length(src_len: int, tgt_len: int) -> int:
    """Padded width one pair occupies in a batch: max of src+EOS and BOS+tgt."""
    return max(src_len, tgt_len) + 1


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Length-bucketed batches whose padded size ``max_len_in_batch * batch_size`` never
    exceeds ``max_tokens``.

    Per epoch: examples are shuffled (seeded by ``(seed, epoch)``), stably sorted by
    length (so ties are broken at random), cut greedily into batches under the budget,
    and the batch order is shuffled. ``shuffle=False`` gives length-sorted batches in a
    fixed order (evaluation; batches carry ``index`` to restore input order).

    An example longer than ``max_tokens`` cannot fit any batch: it gets a batch of its
    own (which then exceeds the budget) and is reported once as a warning and in
    ``self.oversized`` (filter by length beforehand to avoid this).

    Distributed: every rank builds the same batch list and takes ``batches[rank::R]``,
    so ranks share each epoch disjointly and every example is used exactly once. When
    the batch count does not divide by ``num_replicas``, the largest batches are split in
    two until it does (a split batch only gets smaller, so the budget still holds), so all
    ranks get the same number of batches without repeating any example. Only if there are
    fewer examples than ranks can the shares be uneven (a warning says so). With
    ``drop_last=True`` the surplus batches are dropped instead. Under Lightning DDP use
    ``Trainer(use_distributed_sampler=False)``: this sampler already shards by rank.
    Call :meth:`set_epoch` each epoch; Lightning does (through ``self.sampler``).

    ``pad_to_multiple=m`` budgets every example at its length rounded up to a multiple of m,
    the width the collator pads it to, so padded batches stay within ``max_tokens``.

    ``draw``: ``epoch -> example indices`` (repeats allowed), the examples an epoch uses instead
    of every one once (a multilingual corpus's temperature sample, drawn anew each epoch). The
    batch count may then differ by a few from one epoch to the next; ``len`` is the current
    epoch's (Lightning reads it once, when training starts: a later epoch with more batches ends
    at that count, a shuffled few of its batches left out).
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
        pad_to_multiple: int = 1,
        draw: Callable[[int], np.ndarray] | None = None,
    ):
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if pad_to_multiple < 1:
            raise ValueError(f"pad_to_multiple must be >= 1, got {pad_to_multiple}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} outside 0..{num_replicas - 1}")
        m = int(pad_to_multiple)
        self.lengths = -(-np.asarray(lengths, dtype=np.int64) // m) * m  # rounded up to multiples of m
        self.max_tokens = int(max_tokens)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.drop_last = drop_last
        self.draw = draw
        self.epoch = 0
        self._resume: tuple[int, int] | None = None
        # Lightning calls set_epoch on ``loader.sampler`` and ``loader.batch_sampler.sampler``,
        # never on the batch sampler itself: this forwarder makes it reach us.
        self.sampler = _EpochForwarder(self)
        self.oversized: list[int] = np.flatnonzero(self.lengths > self.max_tokens).tolist()
        if self.oversized:
            log.warning(
                "%d example(s) longer than max_tokens=%d get a batch of their own (first: index %d, length %d)",
                len(self.oversized), self.max_tokens, self.oversized[0], int(self.lengths[self.oversized[0]]),
            )
        self._lens: dict[int, int] = {}

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order to produce (same seed + epoch → same batches)."""
        self.epoch = int(epoch)

    def resume_at(self, epoch: int, batches: int) -> None:
        """Make the next pass over ``epoch`` start after its first ``batches`` batches (a run
        resumed mid-epoch); any other epoch, and every later pass, is whole."""
        self.epoch = int(epoch)
        self._resume = (int(epoch), int(batches))

    def _cut(self, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Greedy batches over ``order`` (indices sorted by length, shortest first): each
        batch is ``order[start:end]``, extended while ``length * count <= max_tokens``.
        Returns the ``starts`` and ``ends`` arrays; a Python list per batch is made only
        when the batch is handed out."""
        sorted_len = self.lengths[order]
        starts: list[int] = []
        ends: list[int] = []
        s, n = 0, len(order)
        while s < n:
            # Lengths never decrease along ``order``, so the padded size of order[s:j+1],
            # sorted_len[j] * (j - s + 1), grows with j: the batch ends where it first
            # exceeds the budget, and no batch can hold more than max_tokens // sorted_len[s].
            window = sorted_len[s : s + self.max_tokens // max(int(sorted_len[s]), 1) + 1]
            over = window * np.arange(1, len(window) + 1) > self.max_tokens
            size = int(np.argmax(over)) if over.any() else len(window)
            starts.append(s)
            s += max(size, 1)  # an oversized example still gets a batch of its own
            ends.append(s)
        return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)

    def _all_batches(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole epoch's batches (all ranks), already balanced for the ranks: the
        example ``order`` and, per batch in batch order, its ``starts`` and ``ends`` in it."""
        pool = np.arange(len(self.lengths)) if self.draw is None else np.asarray(self.draw(epoch), dtype=np.int64)
        if self.shuffle:
            rng = np.random.default_rng([self.seed, epoch])
            perm = pool[rng.permutation(len(pool))]
            order = perm[np.argsort(self.lengths[perm], kind="stable")]
        else:
            order = pool[np.argsort(self.lengths[pool], kind="stable")]
        starts, ends = self._cut(order)
        if self.shuffle:
            shuffled = rng.permutation(len(starts))
            starts, ends = starts[shuffled], ends[shuffled]
        r = self.num_replicas
        surplus = len(starts) % r
        if surplus and self.drop_last:
            starts, ends = starts[: len(starts) - surplus], ends[: len(ends) - surplus]
        elif surplus:
            for _ in range(r - surplus):
                j = int(np.argmax(ends - starts))  # the first of the largest batches
                if ends[j] - starts[j] < 2:
                    log.warning("too few examples to give %d ranks equal batch counts", r)
                    break
                mid = starts[j] + (ends[j] - starts[j]) // 2
                starts = np.insert(starts, j + 1, mid)
                ends = np.insert(ends, j, mid)
        return order, starts, ends

    def _rank_batches(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This rank's share of the epoch: ``(order, starts, ends)`` of every R-th batch."""
        order, starts, ends = self._all_batches(epoch)
        return order, starts[self.rank :: self.num_replicas], ends[self.rank :: self.num_replicas]

    @property
    def first_batch(self) -> int:
        """The batch of this epoch the next pass starts at: 0 unless resumed mid-epoch."""
        return self._resume[1] if self._resume is not None and self._resume[0] == self.epoch else 0

    def __iter__(self) -> Iterator[list[int]]:
        skip = self.first_batch
        self._resume = None
        order, starts, ends = self._rank_batches(self.epoch)
        for s, e in zip(starts[skip:].tolist(), ends[skip:].tolist()):
            yield order[s:e].tolist()

    def batches_in(self, epoch: int) -> int:
        """This rank's batch count in ``epoch``."""
        # Without ``draw`` it is the same every epoch: cutting depends only on the sorted
        # length sequence, which ties broken differently do not change.
        key = int(epoch) if self.draw is not None else 0
        if key not in self._lens:
            self._lens[key] = len(self._rank_batches(key)[1])
        return self._lens[key]

    def __len__(self) -> int:
        return self.batches_in(self.epoch)


class _EpochForwarder:
    """Stands in as ``batch_sampler.sampler`` so Lightning's per-epoch ``set_epoch`` arrives."""

    def __init__(self, owner: TokenBudgetBatchSampler):
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)


def pad_ids(seqs: Sequence[Sequence[int]], value: int, multiple: int = 1) -> torch.Tensor:
    """Right-pad int sequences into a (B, W) long tensor, W = the longest rounded up to ``multiple``."""
    width = max((len(s) for s in seqs), default=0)
    out = torch.full((len(seqs), -(-width // multiple) * multiple), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


class TranslationCollator:
    """Examples ``{"src": ids, "tgt": ids, "index": int}`` → translation batch (see module
    docstring). Without ``"tgt"`` (raw input to translate) only src keys and index."""

    def __init__(self, pad_id: int, bos_id: int, eos_id: int, pad_to_multiple: int = 1, tag_to_decoder: bool = False,
                 start_prefix: Sequence[int] = ()):
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.multiple = pad_to_multiple
        self.tag_to_decoder = tag_to_decoder
        # ids before the moved tag in ``start`` (B, 1 + P): a pretrained family's decoder start,
        # its target code then forced after it (``data.tag_side=codes``, inference only)
        self.start_prefix = list(start_prefix)

    def __call__(self, examples: Sequence[dict]) -> dict:
        m = self.multiple
        if self.tag_to_decoder:  # a multilingual source's tag starts the target instead (``data.tag_side=decoder``)
            examples = [{**e, "src": list(e["src"])[1:], "start": e["src"][0]} for e in examples]
        src = pad_ids([list(e["src"]) + [self.eos_id] for e in examples], self.pad_id, m)  # (B, S)
        batch = {
            "src": src,
            "src_pad_mask": src != self.pad_id,
            "index": torch.as_tensor([int(e["index"]) for e in examples], dtype=torch.long),
        }
        if self.tag_to_decoder:
            batch["start"] = torch.as_tensor([[*self.start_prefix, int(e["start"])] for e in examples],
                                             dtype=torch.long).squeeze(1)  # (B,), or (B, 1 + P) after a prefix
        if "direction" in examples[0]:
            batch["direction"] = torch.as_tensor([int(e["direction"]) for e in examples], dtype=torch.long)
        if "tgt" in examples[0]:
            tgt_in = pad_ids([[e.get("start", self.bos_id)] + list(e["tgt"]) for e in examples], self.pad_id, m)  # (B, T)
            tgt_out = pad_ids([list(e["tgt"]) + [self.eos_id] for e in examples], self.pad_id, m)  # (B, T)
            batch.update(tgt_in=tgt_in, tgt_out=tgt_out, tgt_pad_mask=tgt_out != self.pad_id,
                         n_tokens=sum(len(e["tgt"]) + 1 for e in examples))
        return batch


class TaggingCollator:
    """Examples ``{"src": ids, "word_ids": list, "tags": list, "index": int}`` → tagging
    batch (see module docstring). ``"tags"`` may be absent (inference); ``"aux_tags"`` (a
    second tag set, multi-task training) is padded like ``"tags"`` when present."""

    def __init__(self, pad_id: int, max_positions: int | None = None, suffix: Sequence[int] = ()):
        self.pad_id = pad_id
        self.max_positions, self.suffix = max_positions, list(suffix)

    def _cut(self, e: dict) -> dict:
        """``e`` cut to ``max_positions`` pieces: the words left without a piece are not scored."""
        if self.max_positions is None or len(e["src"]) <= self.max_positions:
            return e
        src = cut_row(e["src"], self.max_positions, self.suffix)
        word_ids = list(e["word_ids"][: len(src) - len(self.suffix)]) + [-1] * len(self.suffix)
        kept = set(word_ids)
        out = {**e, "src": src, "word_ids": word_ids}
        for key in ("tags", "aux_tags"):
            if key in e:
                out[key] = [t if w in kept else IGNORE_INDEX for w, t in enumerate(e[key])]
        return out

    def __call__(self, examples: Sequence[dict]) -> dict[str, torch.Tensor]:
        examples = [self._cut(e) for e in examples]
        src = pad_ids([e["src"] for e in examples], self.pad_id)  # (B, T)
        lengths = torch.as_tensor([len(e["src"]) for e in examples])
        batch = {
            "src": src,
            "src_pad_mask": torch.arange(src.shape[1])[None, :] < lengths[:, None],  # (B, T)
            "word_ids": pad_ids([e["word_ids"] for e in examples], -1),  # (B, T)
            "index": torch.as_tensor([int(e["index"]) for e in examples], dtype=torch.long),
        }
        for key in ("tags", "aux_tags"):
            if key in examples[0]:
                batch[key] = pad_ids([e[key] for e in examples], IGNORE_INDEX)  # (B, W)
        return batch


def token_budget_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices grouped, longest first, so that ``len(batch) * longest <= max_tokens``
    (a single sentence longer than the budget still forms its own batch)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def restore_order(indices: Sequence[int], outputs: Sequence, n: int | None = None) -> list:
    """Put per-example ``outputs`` (in batch order, with split ``indices``) back in split order."""
    n = len(outputs) if n is None else n
    result: list = [None] * n
    for i, out in zip(indices, outputs):
        result[int(i)] = out
    return result


__all__ = [
    "IGNORE_INDEX",
    "TaggingCollator",
    "TokenBudgetBatchSampler",
    "TranslationCollator",
    "cut_row",
    "pad_ids",
    "restore_order",
    "token_budget_batches",
    "translation_length",
]

