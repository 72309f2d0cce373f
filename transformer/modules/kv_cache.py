"""An explicit key/value cache for incremental decoding.

Shape legend: N batch (sentences x beams), H heads, T cached steps, C buffer capacity (>= T),
S source length, d_head = d_model / H.

The cache is a plain object passed into ``decode_step`` and returned from it; no
module keeps decoding state. Self-attention entries grow by the new steps each
call; cross-attention keys/values depend only on the source, so they are
computed once (``init_cache``) and reused at every step.

Beam search keeps one copy of each sentence's cross-attention keys/values for its K beams
(``group`` = K): the cache's cross entries have ``N / group`` rows, row ``n`` of the search
reading source row ``n // group``, and the decoder attends with the K beams' queries as K
queries of that one row. Each step then reads the source keys once per sentence rather than
once per beam (the largest memory traffic of a beam step on a CPU).

Self-attention keys/values live in preallocated buffers ``(N, H, C, d_head)`` that double when
full, so a step writes its new entries in place instead of copying the whole history with
``torch.cat`` (on a CPU that copy was about a sixth of greedy decoding's time).
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer.modules.attention import causal_mask

INITIAL_CAPACITY = 16


class KVCache:
    """Per-layer self-attention K/V ``(N, H, T, d_head)`` and cross-attention K/V
    ``(N / group, H, S, d_head)`` (``group`` consecutive rows share a source; 1 but in beam search).

    Build with ``KVCache.empty(n_layers)``; the model fills cross entries with
    ``set_cross`` and its layers append self entries with ``append_self``.
    ``reorder(indices)`` selects along the batch dim of every tensor (beam search).
    ``self_k[i]`` / ``self_v[i]`` are views of layer ``i``'s filled part (``None`` before the
    first step).
    """

    def __init__(self, n_layers: int, capacity: int = INITIAL_CAPACITY, group: int = 1):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if group < 1:
            raise ValueError(f"group must be >= 1, got {group}")
        self._capacity = capacity
        self.group = group  # rows per cross-attention row (the beams of one sentence)
        self._k: list[Tensor | None] = [None] * n_layers  # (N, H, C, d_head) buffers
        self._v: list[Tensor | None] = [None] * n_layers
        self._len = [0] * n_layers  # filled steps per layer
        # Buffers of an earlier step, reused as the destination of the next in-place reorder.
        self._spare_k: list[Tensor | None] = [None] * n_layers
        self._spare_v: list[Tensor | None] = [None] * n_layers
        self.cross_k: list[Tensor | None] = [None] * n_layers
        self.cross_v: list[Tensor | None] = [None] * n_layers
        # The source padding as an additive bias (N, 1, 1, S), prepared once (set_source_mask).
        self.cross_bias: Tensor | None = None
        self.source_mask_set = False

    @classmethod
    def empty(cls, n_layers: int, capacity: int = INITIAL_CAPACITY, group: int = 1) -> "KVCache":
        """A cache with ``n_layers`` empty slots; buffers start at ``capacity`` steps and double;
        ``group`` rows share each cross-attention row."""
        return cls(n_layers, capacity, group)

    def reserve(self, steps: int) -> "KVCache":
        """Make self-attention buffers allocated from now on hold at least ``steps`` steps.

        A search that knows its longest output calls this once before the first step, so the
        buffers are allocated once at their final size instead of doubling (each doubling
        copies every layer's whole history: 5 % of greedy decoding 128 sentences x 40 steps on
        a CPU). Returns the cache.
        """
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self._capacity = max(self._capacity, int(steps))
        return self

    @property
    def n_layers(self) -> int:
        return len(self._k)

    @property
    def length(self) -> int:
        """Number of target steps already cached (0 before the first step)."""
        return self._len[0] if self._len else 0

    @property
    def offset(self) -> int:
        """The position of the next token (``length``), as the decoder's positional encoding
        reads it."""
        return self.length

    def self_attention_keys(self, t: int, device: torch.device) -> tuple[int, Tensor | None]:
        """For ``t`` new queries: how many keys self-attention sees once they are appended
        (``length + t``) and which of them each query may attend to, ``(1, 1, t, length + t)``
        bool or ``None`` when a single new query may see every key (SDPA's unmasked kernel)."""
        t_k = self.length + t
        return t_k, (None if t == 1 else causal_mask(t, t_k, device=device))

    def _filled(self, bufs: list[Tensor | None]) -> list[Tensor | None]:
        return [None if b is None else b[:, :, :n] for b, n in zip(bufs, self._filled_steps())]

    @property
    def self_k(self) -> list[Tensor | None]:
        """Per layer, the cached self-attention keys ``(N, H, T, d_head)`` (views into the buffer)."""
        return self._filled(self._k)

    @property
    def self_v(self) -> list[Tensor | None]:
        """Per layer, the cached self-attention values ``(N, H, T, d_head)``."""
        return self._filled(self._v)

    def append_self(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append new steps ``(N, H, t, d_head)`` to layer ``layer``; return all ``(N, H, T + t, d_head)``."""
        start = self._len[layer]
        end = start + k.size(2)
        buf_k, buf_v = self._k[layer], self._v[layer]
        if buf_k is None or buf_v is None or end > buf_k.size(2):
            buf_k, buf_v = self._grow(layer, k, end)
        buf_k[:, :, start:end] = k  # write in place: (N, H, t, d) into the buffer's free steps
        buf_v[:, :, start:end] = v
        self._len[layer] = end
        return buf_k[:, :, :end], buf_v[:, :, :end]

    def _grow(self, layer: int, like: Tensor, needed: int) -> tuple[Tensor, Tensor]:
        """New buffers of at least ``needed`` steps (doubling), the filled steps copied over."""
        old_k, old_v, n = self._k[layer], self._v[layer], self._len[layer]
        capacity = max(self._capacity, 2 * old_k.size(2) if old_k is not None else 0)
        while capacity < needed:
            capacity *= 2
        shape = (like.size(0), like.size(1), capacity, like.size(3))  # (N, H, C, d_head)
        new_k = like.new_empty(shape)
        new_v = like.new_empty(shape)
        if old_k is not None and old_v is not None and n:
            new_k[:, :, :n] = old_k[:, :, :n]
            new_v[:, :, :n] = old_v[:, :, :n]
        self._k[layer], self._v[layer] = new_k, new_v
        return new_k, new_v

    def set_cross(self, layer: int, k: Tensor, v: Tensor) -> None:
        """Store the source keys/values ``(N / group, H, S, d_head)`` of layer ``layer``.

        They are made contiguous once here; attention would otherwise copy the strided
        head-split views at every step.
        """
        self.cross_k[layer], self.cross_v[layer] = k.contiguous(), v.contiguous()

    def set_source_mask(self, src_pad_mask: Tensor | None, dtype: torch.dtype) -> bool:
        """Turn the source padding mask ``(N / group, S)`` (True = real token) into the additive
        cross-attention bias ``(N / group, 1, 1, S)`` (0 or -inf) that every layer reuses at every step;
        ``None`` when nothing is padded. A bool mask would be re-checked for fully masked rows
        and converted by every attention call. Returns False (and stores nothing) if some row
        has no real token: such rows need the bool mask's zero-output rule.
        """
        if src_pad_mask is not None and not bool(src_pad_mask.any(dim=-1).all()):
            return False
        if src_pad_mask is None or bool(src_pad_mask.all()):
            self.cross_bias = None
        else:
            zeros = torch.zeros(src_pad_mask.shape, dtype=dtype, device=src_pad_mask.device)
            self.cross_bias = zeros.masked_fill(~src_pad_mask, float("-inf"))[:, None, None, :]
        self.source_mask_set = True
        return True

    def has_cross(self, layer: int) -> bool:
        return layer < len(self.cross_k) and self.cross_k[layer] is not None

    def cross(self, layer: int) -> tuple[Tensor, Tensor]:
        """Cached source keys/values ``(N / group, H, S, d_head)`` of layer ``layer``."""
        k, v = self.cross_k[layer], self.cross_v[layer]
        if k is None or v is None:
            raise KeyError(f"no cross-attention entry for layer {layer}; call init_cache first")
        return k, v

    def reorder(self, indices: Tensor, cross: bool = True) -> "KVCache":
        """A new cache whose row ``n`` is this cache's row ``indices[n]``; this one is untouched.

        Args:
            indices: ``(N',)`` long; N' may differ from N (beam expansion).
            cross: also select the cross-attention rows. Beam search passes ``False`` while
                every ``indices[n]`` is a beam of the same sentence as row ``n``: the rows of
                one sentence share their source keys/values, so they are kept as they are.
                With ``group`` > 1 the rows come in whole groups (the beams of a sentence, from
                one sentence), and the cross rows follow their groups.
        """
        out = self._like()
        self._reorder_into(out, indices, cross, reuse=False)
        return out

    def reorder_(self, indices: Tensor, cross: bool = True) -> "KVCache":
        """``reorder`` in place: this cache becomes the reordered one and is returned.

        The rows are gathered into buffers kept from an earlier reorder (double buffering), so
        a beam search step allocates nothing; the pre-reorder state is gone afterwards.
        """
        moved = None if cross else self._moved_rows(indices)
        if moved is None:
            self._reorder_into(self, indices, cross, reuse=True)
            return self
        for layer, n in enumerate(self._filled_steps()):
            for buf in (self._k[layer], self._v[layer]):
                if buf is not None:
                    _copy_rows(buf[:, :, :n], moved, indices)
        return self

    def _moved_rows(self, indices: Tensor) -> Tensor | None:
        """The rows ``(M,)`` an in-place reorder by ``indices (N,)`` changes, when copying only
        them (gathered, then written back: four row copies each) moves less than copying every
        row into the spare buffers (two); None otherwise. Beam search keeps each parent's best
        child in its parent's slot, so that most rows stay where they are."""
        rows = self._rows()
        if indices.numel() != rows or any(b is not None and b.requires_grad for b in self._k):
            return None
        moved = (indices != torch.arange(rows, device=indices.device)).nonzero().squeeze(1)  # (M,)
        return moved if 2 * moved.numel() < rows else None

    def _reorder_into(self, out: "KVCache", indices: Tensor, cross: bool, reuse: bool) -> None:
        if not cross and indices.numel() != self._rows():
            raise ValueError(
                f"reorder(cross=False) keeps the cross-attention rows, so it needs as many indices "
                f"as rows ({self._rows()}), got {indices.numel()}"
            )
        lengths = self._filled_steps()
        for layer, n in enumerate(lengths):
            for bufs, spares in ((self._k, self._spare_k), (self._v, self._spare_v)):
                buf = bufs[layer]
                if buf is None:
                    continue
                idx = indices if indices.device == buf.device else indices.to(buf.device)
                shape = (idx.numel(), *buf.shape[1:])  # (N', H, C, d_head)
                spare = spares[layer] if reuse else None
                # A spare with more rows serves too (sentences that are done leave a batch): its
                # first N' rows, a contiguous view, so that dropping rows allocates nothing.
                fresh = spare is None or spare.shape[1:] != shape[1:] or spare.size(0) < shape[0]
                new = buf.new_empty(shape) if fresh else spare[: shape[0]]
                m = self._steps_to_copy(n, buf.size(2), fresh)
                if buf.requires_grad and torch.is_grad_enabled():
                    new = new.clone()  # never write into a tensor autograd may still need
                    new[:, :, :m] = buf[:, :, :m].index_select(0, idx)  # out= has no autograd
                else:
                    # Only the filled steps are copied, straight into the new buffer's view.
                    torch.index_select(buf[:, :, :m], 0, idx, out=new[:, :, :m])
                if reuse:
                    spares[layer] = buf
                (out._k if bufs is self._k else out._v)[layer] = new
        if out is self and not cross:
            return  # in place: the filled steps and the cross-attention entries stay as they are
        out._set_filled(self)
        out.source_mask_set = self.source_mask_set
        if cross:
            # A group's rows come from one source row: its first row names it.
            rows = indices if self.group == 1 else indices[:: self.group] // self.group  # (N' / group,)
            out.cross_k = [None if t is None else t.index_select(0, rows.to(t.device)) for t in self.cross_k]
            out.cross_v = [None if t is None else t.index_select(0, rows.to(t.device)) for t in self.cross_v]
            bias = self.cross_bias
            out.cross_bias = None if bias is None else bias.index_select(0, rows.to(bias.device))
        else:
            out.cross_k, out.cross_v, out.cross_bias = list(self.cross_k), list(self.cross_v), self.cross_bias

    def expand_beams(self) -> "KVCache":
        """After a first step decoded once per sentence (one self-attention row per cross row),
        give each of a sentence's ``group`` beams its own copy of that row: row ``b`` becomes
        rows ``b * group .. b * group + group - 1``. In place; returns the cache."""
        for bufs, spares in ((self._k, self._spare_k), (self._v, self._spare_v)):
            for layer, buf in enumerate(bufs):
                bufs[layer] = None if buf is None else buf.repeat_interleave(self.group, dim=0)
                spares[layer] = None
        return self

    # Hooks that StaticKVCache overrides: a fresh cache of the same kind, the filled steps per
    # layer, how many steps a reorder copies, and taking over another cache's filled steps.
    def _like(self) -> "KVCache":
        return KVCache(self.n_layers, self._capacity, self.group)

    def _filled_steps(self) -> list[int]:
        return list(self._len)

    def _steps_to_copy(self, filled: int, capacity: int, fresh: bool) -> int:
        """A reorder copies the filled steps only (what lies past them is never read)."""
        return filled

    def _set_filled(self, source: "KVCache") -> None:
        self._len = list(source._len)

    def _rows(self) -> int:
        for t in self._k:
            if t is not None:
                return t.size(0)
        for t in self.cross_k:
            if t is not None:
                return t.size(0) * self.group
        return 0


class StaticKVCache(KVCache):
    """A cache whose tensors keep their shapes from one step to the next, for a compiled step.

    The self-attention buffers ``(N, H, C, d_head)`` are allocated once, zero-filled, at a
    capacity ``C`` rounded up to a multiple of 8 (``bucket``) when search reserves its steps;
    a step writes its keys and values in place at the position held in a tensor, so nothing in
    a step's Python state changes with the position and ``torch.compile`` traces the step once
    (``decoding.compiled``). Self-attention reads the buffers with a mask ``key position <=
    query position`` (``self_attention_keys``): all ``C`` steps, or, after ``limit(t)``, views of
    the filled steps and the ``t`` new ones, whose length is a symbolic size of the compiled
    graph (a step then reads the keys it needs, not the whole capacity). Outputs equal
    ``KVCache``'s: masked keys get zero weight.

    The buffers hold zeros or real keys and values only (never uninitialised memory, which a
    zero weight could not cancel if it held a NaN). Same protocol otherwise: ``reorder``
    (rows leave the batch, beams reorder), ``reorder_`` and the cross-attention entries.
    """

    def __init__(self, n_layers: int, capacity: int = INITIAL_CAPACITY, group: int = 1):
        super().__init__(n_layers, bucket(capacity), group)
        self._pos: Tensor | None = None  # (n_layers,) long: filled steps per layer, on the device
        # Per layer, the part of the buffers the next step sees (``limit``), or None: all of it.
        self._seen_k: list[Tensor] | None = None
        self._seen_v: list[Tensor] | None = None
        # Every layer's keys then values in one tensor (2 * n_layers, N, H, C, d_head), of which
        # the buffers are views (``allocate(together=True)``), and the one an in-place reorder
        # writes next; None: the buffers are tensors of their own.
        self._store: Tensor | None = None
        self._spare_store: Tensor | None = None

    @classmethod
    def empty(cls, n_layers: int, capacity: int = INITIAL_CAPACITY, group: int = 1) -> "StaticKVCache":
        return cls(n_layers, capacity, group)

    def reserve(self, steps: int) -> "StaticKVCache":
        """Fix the capacity at ``bucket(steps)``; buffers are allocated at the first step."""
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if any(k is not None for k in self._k):
            raise RuntimeError("a StaticKVCache is sized once, before its first step")
        self._capacity = bucket(steps)
        return self

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def allocated(self) -> bool:
        """Whether the self-attention buffers exist (``allocate`` or a first step made them)."""
        return self._pos is not None

    @property
    def length(self) -> int:
        return 0 if self._pos is None else int(self._pos[0])

    @property
    def offset(self) -> Tensor | int:
        """The next token's position as a 0-dim tensor (a copy, so that the layers' writes
        do not move it), or 0 before anything is allocated."""
        return 0 if self._pos is None else self._pos[0].clone()

    def self_attention_keys(self, t: int, device: torch.device) -> tuple[int, Tensor]:
        """All ``C`` buffer positions (or the ``limit``ed views' steps) are keys; query ``i``
        (at ``offset + i``) sees keys ``0 .. offset + i``: ``(C, mask (1, 1, t, C))``."""
        # The buffer's own size, not the int attribute: under torch.compile it stays symbolic.
        seen = self._seen_k[0] if self._seen_k is not None else self._k[0]
        capacity = seen.size(2) if seen is not None else self._capacity
        q_pos = self.offset + torch.arange(t, device=device).unsqueeze(1)  # (t, 1)
        k_pos = torch.arange(capacity, device=device).unsqueeze(0)  # (1, C)
        return capacity, (k_pos <= q_pos)[None, None]

    def append_self(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``(N, H, t, d_head)`` at the layer's position; return the whole buffers
        ``(N, H, C, d_head)``, or the ``limit``ed views of them."""
        if self._pos is None:
            self._pos = torch.zeros(self.n_layers, dtype=torch.long, device=k.device)
        if self._k[layer] is None:
            shape = (k.size(0), k.size(1), self._capacity, k.size(3))
            self._k[layer], self._v[layer] = k.new_zeros(shape), v.new_zeros(shape)
        buf_k, buf_v = self._k[layer], self._v[layer]
        if self._seen_k is not None and self._seen_v is not None:
            buf_k, buf_v = self._seen_k[layer], self._seen_v[layer]  # views of the buffers
        positions = self._pos[layer] + torch.arange(k.size(2), device=k.device)  # (t,)
        buf_k.index_copy_(2, positions, k)
        buf_v.index_copy_(2, positions, v)
        self._pos[layer] += k.size(2)
        return buf_k, buf_v

    def limit(self, t: int | None) -> None:
        """Let the next step see only the filled steps and its ``t`` new ones: ``append_self``
        writes into and returns views of that many steps, so self-attention reads those and
        not the whole capacity (on a CPU, beam 5 then decoded 1.1x faster). ``None``: the whole
        buffers again. Called outside the compiled step, before and after it: the views'
        length is then one more symbolic size of its graph, not a value it recompiles for."""
        if t is None or not self.allocated:
            self._seen_k = self._seen_v = None
            return
        n = self._seen_steps(t)
        self._seen_k = [b[:, :, :n] for b in self._k]
        self._seen_v = [b[:, :, :n] for b in self._v]

    def _seen_steps(self, t: int) -> int:
        """How many steps a ``limit(t)``ed step sees: the filled ones and its ``t`` new ones, at
        least two (the unfilled one masked: a first step seeing one would get a graph of its
        own, sizes of 1 being specialised)."""
        return min(max(self.length + t, 2), self._k[0].size(2))

    def allocate(self, like: Tensor, rows: int | None = None, together: bool = False) -> "StaticKVCache":
        """Allocate every layer's buffers now, shaped after the cross-attention keys
        ``like (N / group, H, S, d_head)`` for ``rows`` decoder rows (default ``N``; a first
        step decoded once per sentence has ``N / group``), so that the first compiled step sees
        the same state as every later one. ``together``: as views of one tensor, so that an
        in-place reorder (``reorder_``) is one copy rather than one per buffer (one sentence's
        beam 5 on a CPU: about 20 microseconds a step against 55). For steps compiled ahead of
        time (``decoding.exported``): under ``torch.compile``, one tensor for every layer made
        batched greedy decoding 10 % slower (docs/experiments.md). Returns the cache."""
        rows = like.size(0) * self.group if rows is None else rows
        shape, n = (rows, like.size(1), self._capacity, like.size(3)), self.n_layers
        self._store = like.new_zeros((2 * n, *shape)) if together else None
        self._spare_store = None
        if together:
            self._k, self._v = list(self._store[:n]), list(self._store[n:])
        else:
            self._k = [like.new_zeros(shape) for _ in range(n)]
            self._v = [like.new_zeros(shape) for _ in range(n)]
        self._pos = torch.zeros(n, dtype=torch.long, device=like.device)
        return self

    def reorder_(self, indices: Tensor, cross: bool = True) -> "StaticKVCache":
        """As ``KVCache.reorder_``; buffers allocated together (``allocate``) are reordered by
        one copy into a spare tensor of the same shape, which then holds them."""
        store, n = self._store, self.n_layers
        if store is None or cross or indices.numel() != store.size(1):
            self._store = self._spare_store = None  # the buffers are their own tensors from now on
            return super().reorder_(indices, cross)
        m = self.length  # the filled steps: what lies past them is never read
        moved = self._moved_rows(indices)
        if moved is not None:
            _copy_rows(store[:, :, :, :m].transpose(0, 1), moved, indices)  # rows first
            return self
        spare = self._spare_store if self._spare_store is not None else torch.zeros_like(store)
        torch.index_select(store[:, :, :, :m], 1, indices.to(store.device), out=spare[:, :, :, :m])
        self._store, self._spare_store = spare, store
        self._k, self._v = list(spare[:n]), list(spare[n:])
        return self

    def expand_beams(self) -> "StaticKVCache":
        self._store = self._spare_store = None  # each layer's buffers become tensors of their own
        return super().expand_beams()

    def tensors(self, t: int) -> list[Tensor | None]:
        """The state a step of ``t`` new tokens reads and writes, as plain tensors, for a step
        compiled ahead of time (``decoding.exported``): every layer's self-attention buffers
        (whole), a tensor as long as the steps the step sees (as after ``limit(t)``: its length
        carries the number), the positions, every layer's cross-attention keys and values, and
        the source bias. ``of_tensors`` rebuilds a cache around them; ``varying`` says which of
        their sizes change from call to call."""
        return [*self._k, *self._v, self._pos.new_empty(self._seen_steps(t)), self._pos, *self.cross_k,
                *self.cross_v, self.cross_bias]

    def varying(self) -> list[tuple[int, ...]]:
        """For each of ``tensors``', the sizes that change from call to call: rows and steps of
        the buffers, the steps seen, rows and source length of the cross-attention entries."""
        n = self.n_layers
        return [(0, 2)] * (2 * n) + [(0,), ()] + [(0, 2)] * (2 * n) + [(0, 3)]

    @classmethod
    def of_tensors(cls, n_layers: int, group: int, source_mask_set: bool, *tensors: Tensor | None) -> "StaticKVCache":
        """A cache over ``tensors``' tensors (no copies): a step run on it writes into them."""
        n = n_layers
        cache = cls(n, group=group)
        cache._k, cache._v = list(tensors[:n]), list(tensors[n: 2 * n])
        seen, cache._pos = tensors[2 * n], tensors[2 * n + 1]
        torch._check(seen.size(0) <= cache._k[0].size(2))
        cache._seen_k = [b[:, :, : seen.size(0)] for b in cache._k]
        cache._seen_v = [b[:, :, : seen.size(0)] for b in cache._v]
        cache.cross_k, cache.cross_v = list(tensors[2 * n + 2: 3 * n + 2]), list(tensors[3 * n + 2: 4 * n + 2])
        cache.cross_bias, cache.source_mask_set = tensors[4 * n + 2], source_mask_set
        return cache

    def set_source_mask(self, src_pad_mask: Tensor | None, dtype: torch.dtype) -> bool:
        """As ``KVCache.set_source_mask``, but a batch without padding gets a zero bias rather
        than ``None``: the step's inputs keep one structure whatever the batch."""
        if not super().set_source_mask(src_pad_mask, dtype):
            return False
        if self.cross_bias is None and src_pad_mask is not None:
            self.cross_bias = torch.zeros(src_pad_mask.shape, dtype=dtype, device=src_pad_mask.device)[:, None, None, :]
        return True

    def _like(self) -> "StaticKVCache":
        return StaticKVCache(self.n_layers, self._capacity, self.group)

    def _filled_steps(self) -> list[int]:
        return [self.length] * self.n_layers

    def _steps_to_copy(self, filled: int, capacity: int, fresh: bool) -> int:
        """A new buffer gets every step, filled or not, so that it holds no uninitialised
        memory; a reused one (``reorder_``) holds finite values already."""
        return capacity if fresh else filled

    def _set_filled(self, source: "StaticKVCache") -> None:
        self._pos = None if source._pos is None else source._pos.clone()


def _copy_rows(buf: Tensor, moved: Tensor, indices: Tensor) -> None:
    """Row ``r`` of ``buf (N, ...)`` becomes its row ``indices[r]``, for the rows ``moved (M,)``
    only, in place (the sources are gathered first: a row may be both)."""
    idx = indices.to(buf.device)
    buf.index_copy_(0, moved.to(buf.device), buf.index_select(0, idx[moved.to(idx.device)]))


def bucket(steps: int) -> int:
    """The capacity a static cache gets for ``steps`` steps: the smallest multiple of 8 above
    ``steps``. Above: a ``limit``ed step's view then never spans the whole buffer, where it
    would be contiguous and compile a graph of its own. A multiple of 8: a step that is not
    ``limit``ed reads the whole buffer, so a coarser rounding (powers of two) cost a CPU up to
    10 % of its decoding speed; a compiled step has symbolic sizes and needs no coarser one."""
    return -(-(steps + 1) // 8) * 8
