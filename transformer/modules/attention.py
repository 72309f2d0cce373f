"""Attention, its masks and the key/value cache it reads while decoding (Vaswani et al. 2017,
sec. 3.2).

Shape legend: B batch, H heads, T sequence, T_q queries, T_k keys, D = d_model,
d_head = D / H; in the cache, N rows (sentences x beams), T cached steps, C buffer capacity
(>= T), S source length.

Masks are boolean and built only here, with one polarity everywhere: ``True`` = this query
may attend to this key (or, for a ``(B, T)`` padding mask, this position holds a real token).
``attn_bias`` is an additive float bias (relative positions, T5).

Offset rule for cached decoding: when ``T_q < T_k`` the queries are the *last*
``T_q`` positions of the sequence, so query ``i`` sits at absolute position
``T_k - T_q + i``. With this rule the same functions serve full (teacher-forced)
attention and incremental attention over a KV cache.

The KV cache (:class:`KVCache`) is a plain object passed into ``decode_step`` and returned from
it; no module keeps decoding state. Self-attention entries grow by the new steps each call;
cross-attention keys/values depend only on the source, so they are computed once
(``init_cache``) and reused at every step. Self-attention keys/values live in preallocated
buffers ``(N, H, C, d_head)`` that double when full, so a step writes its new entries in place
instead of copying the whole history with ``torch.cat`` (on a CPU that copy was about a sixth
of greedy decoding's time).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


# ----------------------------------------------------------------------------- masks
def pad_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Mark real tokens.

    Args:
        tokens: ``(B, T)`` token ids.
        pad_id: id of the padding token.

    Returns:
        ``(B, T)`` bool, True where ``tokens != pad_id``.
    """
    return tokens != pad_id


def _query_key_positions(
    t_q: int, t_k: int | None, device: torch.device | str | None
) -> tuple[Tensor, Tensor]:
    """Absolute query positions ``(T_q, 1)`` and key positions ``(1, T_k)`` (offset rule)."""
    t_k = t_q if t_k is None else t_k
    if t_q > t_k:
        raise ValueError(f"t_q={t_q} > t_k={t_k}: queries must be the last t_q positions")
    q_pos = torch.arange(t_k - t_q, t_k, device=device).unsqueeze(1)  # (T_q, 1)
    k_pos = torch.arange(t_k, device=device).unsqueeze(0)  # (1, T_k)
    return q_pos, k_pos


def causal_mask(t_q: int, t_k: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """Forbid attending to later positions (Vaswani et al. 2017, sec. 3.2.3).

    Args:
        t_q: number of queries; query ``i`` is at absolute position ``t_k - t_q + i``.
        t_k: number of keys (defaults to ``t_q``).

    Returns:
        ``(T_q, T_k)`` bool, True where key position ``<=`` query position.
    """
    q_pos, k_pos = _query_key_positions(t_q, t_k, device)
    return k_pos <= q_pos  # (T_q, T_k)


def local_window_mask(
    t_q: int, t_k: int | None, window: int, device: torch.device | str | None = None
) -> Tensor:
    """Truncated (local) self-attention: only keys within ``window`` positions.

    Restricting attention to a neighbourhood of size ``r`` is the "restricted
    self-attention" of Vaswani et al. 2017 (Table 1).

    Returns:
        ``(T_q, T_k)`` bool, True where ``|pos(i) - j| <= window`` (offset rule for ``pos``).
    """
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    q_pos, k_pos = _query_key_positions(t_q, t_k, device)
    return (q_pos - k_pos).abs() <= window  # (T_q, T_k)


def merge_masks(key_pad_mask: Tensor | None = None, *masks: Tensor | None) -> Tensor | None:
    """AND a key padding mask with any number of structural masks.

    Args:
        key_pad_mask: ``(B, T_k)`` bool, True = real key.
        *masks: each ``(T_q, T_k)`` or ``(B, T_q, T_k)`` bool (None entries are skipped).

    Returns:
        ``(B, 1, T_q, T_k)`` bool (the 1 broadcasts over heads) or None if nothing was
        given. With only a padding mask the result is ``(B, 1, 1, T_k)``, which
        broadcasts the same way.
    """
    merged: Tensor | None = None
    if key_pad_mask is not None:
        merged = key_pad_mask[:, None, None, :]  # (B, T_k) -> (B, 1, 1, T_k)
    for m in masks:
        if m is None:
            continue
        if m.dim() == 2:
            m = m[None, None]  # (T_q, T_k) -> (1, 1, T_q, T_k)
        elif m.dim() == 3:
            m = m[:, None]  # (B, T_q, T_k) -> (B, 1, T_q, T_k)
        elif m.dim() != 4:
            raise ValueError(f"mask must have 2, 3 or 4 dims, got shape {tuple(m.shape)}")
        merged = m if merged is None else merged & m  # broadcast -> (B, 1, T_q, T_k)
    return merged


# ----------------------------------------------------------------------------- attention
def head_width(d_model: int, n_heads: int) -> int:
    """``d_head = d_model / n_heads``, the width of one head; a ``ValueError`` unless
    ``n_heads`` divides ``d_model``. Every module that splits ``d_model`` into heads asks here."""
    if d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return d_model // n_heads


def _empty_rows(mask: Tensor | None) -> Tensor | None:
    """``(..., T_q, 1)`` bool, True for queries whose every key is masked."""
    if mask is None:
        return None
    return ~mask.any(dim=-1, keepdim=True)


def attention_weights(
    q: Tensor,
    k: Tensor,
    scale: bool = True,
    mask: Tensor | None = None,
    attn_bias: Tensor | None = None,
) -> Tensor:
    """softmax(Q Kᵀ / √d_k + bias): ``q (..., T_q, d_k)``, ``k (..., T_k, d_k)`` -> ``(..., T_q, T_k)``.

    ``mask`` is bool broadcastable to ``(..., T_q, T_k)``, True = may attend; a query with every
    key masked gets zero weights, never NaN. ``scale`` divides by √d_k: without it large d_k
    pushes the softmax into regions with tiny gradients (Vaswani et al. 2017, sec. 3.2.1).
    """
    scores = q @ k.transpose(-2, -1)  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    if scale:
        scores = scores / math.sqrt(q.size(-1))
    if attn_bias is not None:
        scores = scores + attn_bias
    empty = _empty_rows(mask)
    if mask is not None:
        # Give fully masked rows every key so softmax stays finite; zeroed below.
        scores = scores.masked_fill(~(mask | empty), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if empty is not None:
        weights = weights.masked_fill(empty, 0.0)
    return weights


def scaled_dot_product(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: bool = True,
    mask: Tensor | None = None,
    attn_bias: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ / √d_k + bias) V, written out (eq. 1 of Vaswani et al. 2017).

    Args:
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``.
        scale, mask, attn_bias: as in :func:`attention_weights`.
        dropout_p: dropout on the attention weights (applied to the mix, not the
            returned weights).

    Returns:
        ``(out (..., T_q, d_v), weights (..., T_q, T_k))``. A query with every key
        masked gets zero weights and a zero output, never NaN.
    """
    weights = attention_weights(q, k, scale, mask, attn_bias)
    mixed = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = mixed @ v  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out, weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention, one class for encoder self-, masked decoder self- and cross-attention.

    ``head_h = softmax(X W_q^h (X W_k^h)ᵀ / √d_head) X W_v^h``; heads are concatenated
    and projected by ``W_o`` (Vaswani et al. 2017, sec. 3.2.2).

    Shapes: query ``(B, T_q, D)``, key/value ``(B, T_k, D)`` -> out ``(B, T_q, D)``,
    weights ``(B, H, T_q, T_k)``. Internally q/k/v are ``(B, H, T, d_head)``.

    Two paths: ``F.scaled_dot_product_attention`` (PyTorch's fused kernels), and with
    ``need_weights=True`` the explicit :func:`scaled_dot_product`, which also returns the
    weights (for plots and tests). For cached decoding call ``project_q``, ``project_kv`` and
    ``attend`` separately.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = head_width(d_model, n_heads)
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def _split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        x = x.view(b, t, self.n_heads, self.d_head)  # (B, T, D) -> (B, T, H, d_head)
        return x.transpose(1, 2)  # -> (B, H, T, d_head)

    def project_q(self, query: Tensor) -> Tensor:
        """``(B, T_q, D)`` -> queries ``(B, H, T_q, d_head)``."""
        return self._split_heads(self.w_q(query))

    def project_kv(self, key: Tensor, value: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(B, T_k, D)`` (value defaults to key) -> ``(k, v)`` each ``(B, H, T_k, d_head)``."""
        value = key if value is None else value
        return self._split_heads(self.w_k(key)), self._split_heads(self.w_v(value))

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        attn_bias: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend with projected heads and apply ``W_o``.

        Args:
            q: ``(B, H, T_q, d_head)``; k, v: ``(B, H, T_k, d_head)``.
            mask: bool broadcastable to ``(B, H, T_q, T_k)``, True = may attend.
            attn_bias: float broadcastable to ``(B, H, T_q, T_k)``.

        Returns:
            ``(out (B, T_q, D), weights (B, H, T_q, T_k) | None)``.
        """
        p = self.dropout if self.training else 0.0
        if mask is not None and mask.dim() < 4:
            mask = mask.view((1,) * (4 - mask.dim()) + tuple(mask.shape))  # -> (B|1, H|1, T_q|1, T_k)
        empty = _empty_rows(mask)  # (B|1, 1|H, T_q, 1) or None
        weights = None
        if need_weights:
            ctx, weights = scaled_dot_product(q, k, v, True, mask, attn_bias, p)
        else:
            ctx = self._sdpa(q, k, v, mask, empty, attn_bias, p)
        b, _, t_q, _ = ctx.shape
        ctx = ctx.transpose(1, 2).reshape(b, t_q, self.d_model)  # (B, H, T_q, d_head) -> (B, T_q, D)
        out = self.w_o(ctx)
        if empty is not None:
            # Fully masked queries return exact zeros, not W_o's bias.
            out = out.masked_fill(empty.all(dim=1), 0.0)  # (B|1, T_q|1, 1) broadcast over D
        return out, weights

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, empty: Tensor | None,
              attn_bias: Tensor | None, p: float) -> Tensor:
        """``F.scaled_dot_product_attention`` with our mask polarity and fully masked rows zeroed."""
        sdpa_mask: Tensor | None = None
        if mask is not None:
            sdpa_mask = mask | empty  # keep softmax finite on fully masked rows
        if attn_bias is not None:
            bias = attn_bias.to(q.dtype)
            if sdpa_mask is not None:
                bias = bias.masked_fill(~sdpa_mask, float("-inf"))  # broadcast -> (B, H, T_q, T_k)
            sdpa_mask = bias
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask, dropout_p=p)  # (B, H, T_q, d_head)
        if empty is not None:
            ctx = ctx.masked_fill(empty, 0.0)
        return ctx

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        attn_bias: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``(out (B, T_q, D), weights (B, H, T_q, T_k) | None)``; see ``attend``."""
        q = self.project_q(query)
        k, v = self.project_kv(key, value)
        return self.attend(q, k, v, mask, attn_bias, need_weights)


# ----------------------------------------------------------------------------- the KV cache
INITIAL_CAPACITY = 16


class KVCache:
    """Per-layer self-attention K/V ``(N, H, T, d_head)`` and cross-attention K/V ``(N, H, S, d_head)``.

    Build with ``KVCache.empty(n_layers)``; the model fills cross entries with
    ``set_cross`` and its layers append self entries with ``append_self``.
    ``reorder(indices)`` selects along the batch dim of every tensor (beam search).
    ``self_k[i]`` / ``self_v[i]`` are views of layer ``i``'s filled part (``None`` before the
    first step).
    """

    def __init__(self, n_layers: int, capacity: int = INITIAL_CAPACITY):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
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
    def empty(cls, n_layers: int, capacity: int = INITIAL_CAPACITY) -> "KVCache":
        """A cache with ``n_layers`` empty slots; buffers start at ``capacity`` steps and double."""
        return cls(n_layers, capacity)

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

    def _filled(self, bufs: list[Tensor | None]) -> list[Tensor | None]:
        return [None if b is None else b[:, :, :n] for b, n in zip(bufs, self._len)]

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
        """Store the source keys/values ``(N, H, S, d_head)`` of layer ``layer``.

        They are made contiguous once here; attention would otherwise copy the strided
        head-split views at every step.
        """
        self.cross_k[layer], self.cross_v[layer] = k.contiguous(), v.contiguous()

    def set_source_mask(self, src_pad_mask: Tensor | None, dtype: torch.dtype) -> bool:
        """Turn the source padding mask ``(N, S)`` (True = real token) into the additive
        cross-attention bias ``(N, 1, 1, S)`` (0 or -inf) that every layer reuses at every step;
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
        """Cached source keys/values ``(N, H, S, d_head)`` of layer ``layer``."""
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
        """
        out = KVCache(self.n_layers, self._capacity)
        self._reorder_into(out, indices, cross, reuse=False)
        return out

    def reorder_(self, indices: Tensor, cross: bool = True) -> "KVCache":
        """``reorder`` in place: this cache becomes the reordered one and is returned.

        The rows are gathered into buffers kept from an earlier reorder (double buffering), so
        a beam search step allocates nothing; the pre-reorder state is gone afterwards.
        """
        self._reorder_into(self, indices, cross, reuse=True)
        return self

    def _reorder_into(self, out: "KVCache", indices: Tensor, cross: bool, reuse: bool) -> None:
        if not cross and indices.numel() != self._rows():
            raise ValueError(
                f"reorder(cross=False) keeps the cross-attention rows, so it needs as many indices "
                f"as rows ({self._rows()}), got {indices.numel()}"
            )
        lengths = list(self._len)
        for layer, n in enumerate(lengths):
            for bufs, spares in ((self._k, self._spare_k), (self._v, self._spare_v)):
                buf = bufs[layer]
                if buf is None:
                    continue
                idx = indices.to(buf.device)
                shape = (idx.numel(), *buf.shape[1:])  # (N', H, C, d_head)
                spare = spares[layer] if reuse else None
                new = spare if spare is not None and spare.shape == shape else buf.new_empty(shape)
                if buf.requires_grad and torch.is_grad_enabled():
                    new = new.clone()  # never write into a tensor autograd may still need
                    new[:, :, :n] = buf[:, :, :n].index_select(0, idx)  # out= has no autograd
                else:
                    # Only the filled steps are copied, straight into the new buffer's view.
                    torch.index_select(buf[:, :, :n], 0, idx, out=new[:, :, :n])
                if reuse:
                    spares[layer] = buf
                (out._k if bufs is self._k else out._v)[layer] = new
        out._len = lengths
        out.source_mask_set = self.source_mask_set
        if cross:
            out.cross_k = [None if t is None else t.index_select(0, indices.to(t.device)) for t in self.cross_k]
            out.cross_v = [None if t is None else t.index_select(0, indices.to(t.device)) for t in self.cross_v]
            bias = self.cross_bias
            out.cross_bias = None if bias is None else bias.index_select(0, indices.to(bias.device))
        else:
            out.cross_k, out.cross_v, out.cross_bias = list(self.cross_k), list(self.cross_v), self.cross_bias

    def _rows(self) -> int:
        for t in (*self._k, *self.cross_k):
            if t is not None:
                return t.size(0)
        return 0
