"""Attention and its masks (Vaswani et al. 2017, sec. 3.2).

Shape legend: B batch, H heads, T sequence, T_q queries, T_k keys, D = d_model,
d_head = D / H.

Masks are boolean and built only here, with one polarity everywhere: ``True`` = this query
may attend to this key (or, for a ``(B, T)`` padding mask, this position holds a real token).
``attn_bias`` is an additive float bias (relative positions, T5).

Truncated self-attention (a local ``window``) is a mask not built as a tensor: a
:class:`LocalWindow` describes it, and attention computes it block by block (time and memory
linear in T) or, for short inputs and for returned weights, as the dense ``(T, T)`` band. A
graph's adjacency is the other: an :class:`EdgeMask` holds the edges, and attention computes
scores along them only (time and memory linear in the edges), or, for returned weights, with
the dense ``(N, N)`` mask of :func:`adjacency_mask`.

Offset rule for cached decoding: when ``T_q < T_k`` the queries are the *last*
``T_q`` positions of the sequence, so query ``i`` sits at absolute position
``T_k - T_q + i``. With this rule the same functions serve full (teacher-forced)
attention and incremental attention over a KV cache.

Cached decoding reads its keys and values from the KV cache of :mod:`transformer.modules.kv_cache`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

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


def _query_key_positions(t_q: int, t_k: int | None, device: torch.device | str | None) -> tuple[Tensor, Tensor]:
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


def local_window_mask(t_q: int, t_k: int | None, window: int, device: torch.device | str | None = None) -> Tensor:
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


def grid_window_mask(rows: int, cols: int, window: int, t: int | None = None,
                     device: torch.device | str | None = None) -> Tensor:
    """Local attention on a 2-D grid of positions (image patches in row-major order): patch ``i``
    may attend to patch ``j`` when they are at most ``window`` rows and ``window`` columns apart,
    the ``(2·window + 1)²`` neighbourhood a convolution of that kernel sees (the lectures' "a CNN
    is a restricted self-attention"; Cordonnier et al. 2020 show such attention can express a
    convolution). The ``t - rows·cols`` positions before the grid (a class vector) are global:
    they attend to every position and every position attends to them.

    Returns:
        ``(T, T)`` bool, True where query ``i`` may attend to key ``j``.
    """
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    n = rows * cols
    t = n if t is None else t
    if t < n:
        raise ValueError(f"a {rows}x{cols} grid needs at least {n} positions, got {t}")
    idx = torch.arange(n, device=device)
    r, c = idx // cols, idx % cols  # (N,) grid coordinates
    near = ((r[:, None] - r[None, :]).abs() <= window) & ((c[:, None] - c[None, :]).abs() <= window)  # (N, N)
    mask = torch.ones(t, t, dtype=torch.bool, device=device)
    mask[t - n:, t - n:] = near  # the grid block; rows and columns of the leading positions stay True
    return mask  # (T, T)


def adjacency_mask(edge_index: Tensor, n_nodes: int, self_loops: bool = True) -> Tensor:
    """Attention along a graph's edges: the adjacency matrix *is* the attention pattern (graph
    attention networks, Velickovic et al. 2018). Node ``i`` attends to node ``j`` when the graph
    has the edge ``j -> i`` (a message from ``j`` reaches ``i``), and to itself with
    ``self_loops`` (as GAT and GCN add them: a node keeps its own features).

    Args:
        edge_index: ``(2, E)`` long, row 0 sources and row 1 targets (PyTorch Geometric's
            layout); an undirected graph lists each edge both ways.
        n_nodes: N.

    Returns:
        ``(N, N)`` bool, True where query node ``i`` may attend to key node ``j``.
    """
    mask = torch.zeros(n_nodes, n_nodes, dtype=torch.bool, device=edge_index.device)
    mask[edge_index[1], edge_index[0]] = True  # (N, N): row = the receiving (query) node
    if self_loops:
        mask.fill_diagonal_(True)
    return mask


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


def padding_bias(mask: Tensor | None, dtype: torch.dtype) -> tuple[Tensor | None, Tensor | None]:
    """A bool mask ``(B|1, 1, T_q, T_k)`` as ``(None, additive bias)`` (0 where True, -inf where
    False; ``(None, None)`` when nothing is masked) if every query keeps a key, else ``(mask, None)``
    unchanged: only the bool form carries the zero-output rule for queries with no key.

    A stack that folds its mask once spares every attention call the conversion of the bool mask
    and the search for fully masked rows (at inference: one host sync per stack, none per layer).
    A :class:`LocalWindow` is returned as it is.
    """
    if mask is None or isinstance(mask, (LocalWindow, EdgeMask)):
        return mask, None  # a local window or a graph stays a description: no (T, T) tensor to fold
    if not bool(mask.any(dim=-1).all()):
        return mask, None
    if bool(mask.all()):
        return None, None
    return None, torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


# Queries per block of the blocked local-window path: at least this many, so that a small window
# does not become thousands of tiny products.
MIN_BLOCK = 16
# The blocked path's rule: a sequence of at least this many positions and key slices. Below either
# bound the dense (T, T) band ran as fast or faster (attention alone, d_model 144, 4 heads, one CPU
# thread: a block's fixed cost dominates short inputs, a large window's slices overlap heavily).
BLOCKED_MIN_LENGTH = 256
BLOCKED_MIN_SLICES = 2


@dataclass(eq=False)
class LocalWindow:
    """Truncated (local) self-attention over ``t`` positions, described rather than built: query
    ``i`` may attend to key ``j`` when ``|i - j| <= window`` and ``key_pad_mask[b, j]`` is True
    (the mask of :func:`local_window_mask` AND the padding mask, never materialised as ``(T, T)``).

    ``position_bias(t_q, t_k, offset) -> (1, H, T_q, T_k) | None`` is the stack's positional
    ``attention_bias``; it must depend on ``key_pos - query_pos`` only (T5's relative bias does),
    so one ``(Bq, Bk)`` bias serves every block.

    Blocked layout (``MultiHeadAttention.attend`` picks it when :attr:`blocked`): queries are cut
    into ``n_blocks`` blocks of ``block`` positions; block ``n`` (queries ``n·Bq .. n·Bq + Bq - 1``)
    reads the key slice ``n·Bq - window .. n·Bq + Bq - 1 + window`` (``Bk = Bq + 2·window`` keys;
    positions outside ``0 .. T - 1`` are zero padding and masked). Work and memory: ``T · Bk``.

    Shapes: ``key_pad_mask (B, T)`` bool, True = real; blocks ``(B·n_blocks, H, Bq|Bk, d_head)``.
    """

    t: int
    window: int
    key_pad_mask: Tensor | None = None
    position_bias: Callable[..., Tensor | None] | None = None
    block: int = field(init=False)
    _dense: tuple[Tensor, Tensor | None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if self.window < 0:
            raise ValueError(f"window must be >= 0, got {self.window}")
        self.block = max(self.window, MIN_BLOCK)

    @property
    def n_blocks(self) -> int:
        return -(-self.t // self.block)  # ceil(T / Bq)

    @property
    def blocked(self) -> bool:
        """The one rule for the blocked path: ``T >= max(BLOCKED_MIN_LENGTH, BLOCKED_MIN_SLICES · Bk)``
        (shorter inputs gain nothing from blocks, and their ``(T, T)`` band is small)."""
        return self.t >= max(BLOCKED_MIN_LENGTH, BLOCKED_MIN_SLICES * (self.block + 2 * self.window))

    def dense(self, device: torch.device | str | None = None) -> tuple[Tensor, Tensor | None]:
        """``(mask (B|1, 1, T, T) bool, bias (1, H, T, T) | None)``: the band as full attention
        sees it; built once per window and shared by the layers of a stack."""
        if self._dense is None:
            band = local_window_mask(self.t, self.t, self.window, device=device)  # (T, T)
            bias = None if self.position_bias is None else self.position_bias(self.t, self.t)
            self._dense = merge_masks(self.key_pad_mask, band), bias
        return self._dense

    def _slices(self, x: Tensor, fill: float | bool = 0.0) -> Tensor:
        """The key slice of every block: ``x (..., T, C)`` -> ``(..., n_blocks, Bk, C)``, a strided
        view of ``x`` padded with ``fill`` by ``window`` before and ``window`` + the last block's
        shortfall after."""
        w, bq = self.window, self.block
        padded = F.pad(x, (0, 0, w, self.n_blocks * bq - self.t + w), value=fill)  # (..., n·Bq + 2w, C)
        return padded.unfold(-2, bq + 2 * w, bq).transpose(-1, -2)  # -> (..., n, C, Bk) -> (..., n, Bk, C)

    def to_blocks(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """``q, k, v (B, H, T, d)`` -> ``q (B·n, H, Bq, d)``, ``k, v (B·n, H, Bk, d)`` (block ``n``
        of row ``b`` is batch row ``b·n_blocks + n``: SDPA's fused CPU kernel wants 4-dim input with
        unit stride in ``d``), the blocks' mask ``(B·n, 1, Bq, Bk)`` bool and position bias
        ``(1, H, Bq, Bk) | None``."""
        w, bq, n = self.window, self.block, self.n_blocks
        b, h, _, d = q.shape
        if q.size(2) != self.t or k.size(2) != self.t:
            raise ValueError(f"a LocalWindow over {self.t} positions got {q.size(2)} queries and {k.size(2)} keys")
        q = F.pad(q, (0, 0, 0, n * bq - self.t)).view(b, h, n, bq, d)  # (B, H, n·Bq, d) -> (B, H, n, Bq, d)
        q = q.transpose(1, 2).reshape(b * n, h, bq, d)  # -> (B, n, H, Bq, d) -> (B·n, H, Bq, d)
        # (B, H, T, d) -> (B, H, n, Bk, d) -> (B, n, H, Bk, d) -> (B·n, H, Bk, d), a copy
        k, v = (self._slices(x).transpose(1, 2).reshape(b * n, h, bq + 2 * w, d) for x in (k, v))
        real = self.key_pad_mask if self.key_pad_mask is not None else q.new_ones(1, self.t, dtype=torch.bool)
        real = self._slices(real.expand(b, self.t).unsqueeze(-1), fill=False)  # (B, T, 1) -> (B, n, Bk, 1)
        q_pos = w + torch.arange(bq, device=q.device).unsqueeze(1)  # (Bq, 1): query i at slice position w + i
        k_pos = torch.arange(bq + 2 * w, device=q.device).unsqueeze(0)  # (1, Bk)
        band = (q_pos - k_pos).abs() <= w  # (Bq, Bk), the same for every block
        mask = band & real.reshape(b * n, 1, 1, -1)  # (Bq, Bk) & (B·n, 1, 1, Bk) -> (B·n, 1, Bq, Bk)
        bias = None if self.position_bias is None else self.position_bias(bq, bq + 2 * w, w)  # (1, H, Bq, Bk)
        return q, k, v, mask, bias

    def from_blocks(self, x: Tensor) -> Tensor:
        """``(B·n, H|1, Bq, C)`` -> ``(B, H|1, T, C)``: the blocks' rows back in order, padding dropped."""
        bn, h, bq, c = x.shape
        x = x.view(bn // self.n_blocks, self.n_blocks, h, bq, c).transpose(1, 2)  # -> (B, H, n, Bq, C)
        return x.reshape(-1, h, self.n_blocks * bq, c)[:, :, : self.t]  # -> (B, H, n·Bq, C) -> (B, H, T, C)


@dataclass(eq=False)
class EdgeMask:
    """A graph's adjacency as self-attention's mask, described by its edges rather than built:
    query node ``i`` may attend to key node ``j`` when ``j -> i`` is an edge of ``edge_index``
    or, with ``self_loops``, when ``i == j`` (the mask of :func:`adjacency_mask`, never
    materialised as ``(N, N)`` on the edge path).

    Edge path (``MultiHeadAttention.attend`` without returned weights): a score per edge and
    head, a softmax over each query's incoming edges, values summed into the queries; work and
    memory ``E · H · d_head`` instead of ``N² · H``. Cora's 2,708 nodes have 13,264 edges with
    self-loops, 0.2 % of the 7.3 million pairs dense attention scores.

    Edges name real nodes only, so padding is never a key; a padded query attends to itself
    alone (its output is never read).

    ``degree_bias`` adds GCN's normalisation ``log(1 / sqrt(d_i d_j))`` to each edge's score (Kipf
    & Welling 2017; ``d`` counts self-loops); under the softmax the key's ``-log(d_j) / 2`` remains.

    Shapes: ``edge_index (2, E)`` long (row 0 sources = keys, row 1 targets = queries); q, k, v
    ``(B, H, N, d_head)`` with every batch row sharing the edges.
    """

    edge_index: Tensor
    n_nodes: int
    self_loops: bool = True
    degree_bias: bool = False
    _pairs: tuple[Tensor, Tensor] | None = field(default=None, init=False, repr=False)
    _dense: tuple[Tensor, Tensor | None] | None = field(default=None, init=False, repr=False)

    def pairs(self, device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
        """``(query (E'), key (E'))`` node indices of every allowed pair, each once (self-loops
        added), sorted by query, on ``device``; built once per mask and shared by the layers of a
        stack."""
        if self._pairs is None:
            q_idx, k_idx = self.edge_index[1], self.edge_index[0]
            if self.self_loops:
                loops = torch.arange(self.n_nodes, device=self.edge_index.device)
                q_idx, k_idx = torch.cat([q_idx, loops]), torch.cat([k_idx, loops])
            flat = torch.unique(q_idx * self.n_nodes + k_idx)  # sorted, duplicates dropped
            self._pairs = (flat // self.n_nodes, flat % self.n_nodes)
        return tuple(i.to(device) for i in self._pairs) if device is not None else self._pairs

    def bias(self, device: torch.device | str | None = None) -> Tensor | None:
        """``(E',)`` the degree bias of every pair of :meth:`pairs`, or None without ``degree_bias``."""
        if not self.degree_bias:
            return None
        qi, ki = self.pairs(device)
        log_degree = torch.bincount(qi, minlength=self.n_nodes).clamp(min=1).float().log()  # (N,)
        return -0.5 * (log_degree[qi] + log_degree[ki])

    def dense(self, device: torch.device | str | None = None) -> tuple[Tensor, Tensor | None]:
        """``(mask (1, 1, N, N) bool, bias (1, 1, N, N) | None)``: the mask (and degree bias) as full
        attention sees it (for returned weights)."""
        if self._dense is None:
            mask = merge_masks(None, adjacency_mask(self.edge_index.to(device), self.n_nodes, self.self_loops))
            bias = self.bias(device)
            if bias is not None:
                bias = torch.zeros(mask.shape[2:], device=device).index_put_(self.pairs(device), bias)[None, None]
            self._dense = mask, bias
        return self._dense

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0) -> Tensor:
        """softmax(Q Kᵀ / √d) V along the edges: ``q, k, v (B, H, N, d)`` -> ``(B, H, N, d)``,
        equal to dense attention under :meth:`dense` (dropout on the weights, as there)."""
        if q.size(2) != self.n_nodes or k.size(2) != self.n_nodes:
            raise ValueError(f"an EdgeMask over {self.n_nodes} nodes got {q.size(2)} queries and {k.size(2)} keys")
        qi, ki = self.pairs(q.device)  # (E,), (E,)
        scores = (q.index_select(2, qi) * k.index_select(2, ki)).sum(-1) / math.sqrt(q.size(-1))  # (B, H, E)
        return self.mix(scores, v, dropout_p)

    def mix(self, scores: Tensor, v: Tensor, dropout_p: float = 0.0) -> Tensor:
        """A score per edge ``(B, H, E)`` (in :meth:`pairs`' order) -> the softmax over each query's
        edges applied to the values ``v (B, H, N, d)`` -> ``(B, H, N, d)``."""
        qi, ki = self.pairs(v.device)
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32))  # bf16 under autocast: sum in fp32
        scores = scores if (bias := self.bias(v.device)) is None else scores + bias
        # Subtract the query's max score (every query has its self-loop, or no edge and no score),
        # exponentiate, divide by the sum; the result in the values' dtype, as autocast's softmax.
        b, h, _ = scores.shape
        top = scores.new_full((b, h, self.n_nodes), float("-inf"))
        top = top.scatter_reduce(2, qi.expand(b, h, -1), scores, "amax", include_self=True)  # (B, H, N)
        weights = torch.exp(scores - top.index_select(2, qi))  # (B, H, E)
        total = weights.new_zeros(b, h, self.n_nodes).index_add(2, qi, weights)  # (B, H, N)
        weights = weights / total.index_select(2, qi)
        if dropout_p > 0:
            weights = F.dropout(weights, dropout_p)
        mixed = weights.unsqueeze(-1) * v.index_select(2, ki)  # (B, H, E, 1) * (B, H, E, d) -> (B, H, E, d)
        return mixed.new_zeros(v.shape).index_add(2, qi, mixed).to(v.dtype)  # sum each query's edges -> (B, H, N, d)


def packable() -> bool:
    """No autograd and no compiler tracing: a stack may then look at its mask's values (one host
    sync) and shape its work by them (:class:`PackedRows`)."""
    return not torch.is_grad_enabled() and not torch.compiler.is_compiling()


class PackedRows:
    """The real positions of a right- (or any-) padded batch, for computing position-wise layers
    (linear projections, the FFN, LayerNorm, residuals) on them alone.

    ``pack(x (B, T, ...)) -> (N, ...)`` keeps the ``N`` real positions in row-major order;
    ``unpack(x (N, ...)) -> (B, T, ...)`` puts them back, zeros at padding (attention needs the
    padded layout; padded keys are masked, so their zeros are never read).
    """

    def __init__(self, key_pad_mask: Tensor):
        self.shape = tuple(key_pad_mask.shape)  # (B, T)
        self.index = key_pad_mask.reshape(-1).nonzero().squeeze(1)  # (N,) flat positions of real tokens

    @property
    def fraction(self) -> float:
        """Real positions / all positions."""
        return self.index.numel() / max(1, self.shape[0] * self.shape[1])

    def pack(self, x: Tensor) -> Tensor:
        return x.reshape(-1, *x.shape[2:]).index_select(0, self.index)  # (B, T, ...) -> (B*T, ...) -> (N, ...)

    def unpack(self, x: Tensor) -> Tensor:
        out = x.new_zeros((self.shape[0] * self.shape[1], *x.shape[1:]))  # (B*T, ...)
        out.index_copy_(0, self.index, x)
        return out.view(*self.shape, *x.shape[1:])  # -> (B, T, ...)


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


def attention_weights(q: Tensor, k: Tensor, scale: bool = True, mask: Tensor | None = None,
                      attn_bias: Tensor | None = None) -> Tensor:
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
    return masked_softmax(scores, mask)


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax of ``scores (..., T_q, T_k)`` over the keys ``mask`` (bool, broadcastable, True =
    may attend) allows; a query with every key masked gets zero weights, never NaN."""
    empty = _empty_rows(mask)
    if mask is not None:
        # Give fully masked rows every key so softmax stays finite; zeroed below.
        scores = scores.masked_fill(~(mask | empty), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if empty is not None:
        weights = weights.masked_fill(empty, 0.0)
    return weights


def scaled_dot_product(q: Tensor, k: Tensor, v: Tensor, scale: bool = True, mask: Tensor | None = None,
                       attn_bias: Tensor | None = None, dropout_p: float = 0.0) -> tuple[Tensor, Tensor]:
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


def _one_query_attention(q: Tensor, k: Tensor, v: Tensor, attn_bias: Tensor | None) -> Tensor:
    """``scaled_dot_product``'s output for one query per row and no mask, the same operations in
    place on ``(N·H, ...)`` batches: ``q (N, H, 1, d)``, ``k, v (N, H, T, d)`` -> ``(N, H, 1, d)``.
    A decoding step is this at every layer, twice, on tiny matrices, where each temporary counts."""
    n, h, _, d = q.shape
    t = k.size(2)
    scores = torch.bmm(q.reshape(n * h, 1, d), k.reshape(n * h, t, d).transpose(1, 2))  # (N·H, 1, d) @ (N·H, d, T)
    scores = scores.view(n, h, 1, t).div_(math.sqrt(d))  # -> (N, H, 1, T)
    if attn_bias is not None:
        scores.add_(attn_bias)
    weights = torch.softmax(scores, dim=-1).view(n * h, 1, t)
    return torch.bmm(weights, v.reshape(n * h, t, d)).view(n, h, 1, d)  # (N·H, 1, T) @ (N·H, T, d)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, one class for encoder self-, masked decoder self- and cross-attention.

    ``head_h = softmax(X W_q^h (X W_k^h)ᵀ / √d_head) X W_v^h``; heads are concatenated
    and projected by ``W_o`` (Vaswani et al. 2017, sec. 3.2.2).

    Shapes: query ``(B, T_q, D)``, key/value ``(B, T_k, D)`` -> out ``(B, T_q, D)``,
    weights ``(B, H, T_q, T_k)``. Internally q/k/v are ``(B, H, T, d_head)``.

    Two paths: ``F.scaled_dot_product_attention`` (PyTorch's fused kernels), and with
    ``need_weights=True`` the explicit :func:`scaled_dot_product`, which also returns the
    weights (for plots and tests). Given a :class:`LocalWindow` mask (the encoder's truncated
    self-attention), long inputs run SDPA over blocks of queries and their key slices instead.
    For cached decoding call ``project_q``, ``project_kv`` and ``attend`` separately.
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

    def project_packed(self, x: Tensor, rows: PackedRows, kv_only: bool = False) -> tuple[Tensor, ...]:
        """``q, k, v`` (``kv_only``: ``k, v``) each ``(B, H, T, d_head)`` from the real positions
        ``x (N, D)`` of a padded batch (``rows``): projected there, laid out padded for ``attend``
        (zeros at padding, which a padding mask hides)."""
        linears = (self.w_k, self.w_v) if kv_only else (self.w_q, self.w_k, self.w_v)
        return tuple(self._split_heads(rows.unpack(lin(x))) for lin in linears)

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
            mask: bool broadcastable to ``(B, H, T_q, T_k)``, True = may attend; or a
                :class:`LocalWindow` (self-attention, ``T_q = T_k``), computed block by block when
                its ``blocked`` rule says so and no weights are asked for; or an
                :class:`EdgeMask` (a graph's self-attention), computed along its edges unless
                weights are asked for.
            attn_bias: float broadcastable to ``(B, H, T_q, T_k)``; None with a ``LocalWindow``,
                which carries its own.

        Returns:
            ``(out (B, T_q, D), weights (B, H, T_q, T_k) | None)``.
        """
        p = self.dropout if self.training else 0.0
        if isinstance(mask, EdgeMask):
            if attn_bias is not None:
                raise ValueError("an EdgeMask takes no position bias: nodes have no order")
            if not need_weights:
                return self._output(mask.attend(q, k, v, p), None), None
            mask, attn_bias = mask.dense(q.device)  # returned weights: the dense (N, N) mask
        if isinstance(mask, LocalWindow):
            if attn_bias is not None:
                raise ValueError("a LocalWindow carries its own position bias: pass attn_bias=None")
            if mask.blocked and not need_weights:
                return self._output(*self._blocked(q, k, v, mask, p)), None
            mask, attn_bias = mask.dense(q.device)  # short inputs and returned weights: the (T, T) band
        if mask is not None and mask.dim() < 4:
            mask = mask.view((1,) * (4 - mask.dim()) + tuple(mask.shape))  # -> (B|1, H|1, T_q|1, T_k)
        empty = _empty_rows(mask)  # (B|1, 1|H, T_q, 1) or None
        weights = None
        if not need_weights and mask is None and p == 0.0 and q.size(2) == 1 and q.device.type == "cpu":
            # One query per row (a decoding step) on a CPU: the written-out product reads the
            # keys and values once and ran 1.5-2x faster than SDPA's CPU flash kernel.
            ctx = _one_query_attention(q, k, v, attn_bias)
        elif need_weights or (q.size(2) == 1 and q.device.type == "cpu"):
            ctx, w = scaled_dot_product(q, k, v, True, mask, attn_bias, p)
            weights = w if need_weights else None
        else:
            ctx = self._sdpa(q, k, v, mask, empty, attn_bias, p)
        return self._output(ctx, empty), weights

    def _output(self, ctx: Tensor, empty: Tensor | None) -> Tensor:
        """Heads ``ctx (B, H, T_q, d_head)`` -> ``W_o`` of their concatenation ``(B, T_q, D)``;
        ``empty (B|1, 1|H, T_q, 1)`` marks fully masked queries, whose output is exact zeros."""
        b, _, t_q, _ = ctx.shape
        ctx = ctx.transpose(1, 2).reshape(b, t_q, self.d_model)  # (B, H, T_q, d_head) -> (B, T_q, D)
        out = self.w_o(ctx)
        if empty is not None:
            # Fully masked queries return exact zeros, not W_o's bias.
            out = out.masked_fill(empty.all(dim=1), 0.0)  # (B|1, T_q|1, 1) broadcast over D
        return out

    def _blocked(self, q: Tensor, k: Tensor, v: Tensor, window: LocalWindow, p: float) -> tuple[Tensor, Tensor]:
        """Truncated self-attention block by block (:class:`LocalWindow`): ``q, k, v (B, H, T, d_head)``
        -> ``(ctx (B, H, T, d_head), empty (B|1, 1, T, 1))``, the same as the dense band."""
        q, k, v, mask, bias = window.to_blocks(q, k, v)  # (B·n, H, Bq|Bk, d_head), (B·n, 1, Bq, Bk)
        empty = _empty_rows(mask)  # (B·n, 1, Bq, 1)
        ctx = self._sdpa(q, k, v, mask, empty, bias, p)  # (B·n, H, Bq, d_head)
        return window.from_blocks(ctx), window.from_blocks(empty)  # (B, H, T, d_head), (B, 1, T, 1)

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


class AdditiveAttention(MultiHeadAttention):
    """Multi-head attention scored as a graph attention network scores it (Velickovic et al. 2018,
    eqs. 1-4): per head ``e_ij = LeakyReLU_0.2(a_dst · W x_i + a_src · W x_j)``, softmax over the
    keys ``j`` query ``i`` may attend to, values ``W x_j``. One projection ``W`` (``w_v``) makes
    queries, keys and values (GAT shares it between score and value), so ``project_q`` and
    ``project_kv`` both return ``W x`` in heads; heads are concatenated and projected by ``W_o``.

    ``projections=False``, GAT's layer exactly (the authors' ``attn_head``): the input is ``W x``
    already, heads are slices of it, no ``W_o``, a bias ``(D,)`` after the weighted sum;
    ``value_dropout`` drops the values once the scores are taken (that code drops weights and values).
    ``score_bias`` adds ``b_dst, b_src (H,)`` to ``a_dst · W x_i``, ``a_src · W x_j`` (its convolutions' biases).

    Shapes, masks and ``attn_bias`` (added to the scores) as :class:`MultiHeadAttention`;
    ``a_dst, a_src (H, d_head)``. A :class:`LocalWindow` is computed as its dense band.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, negative_slope: float = 0.2,
                 projections: bool = True, value_dropout: float = 0.0, score_bias: bool = False):
        super().__init__(d_model, n_heads, dropout, bias)
        del self.w_q, self.w_k  # W = w_v scores as well
        if not projections:  # W is the map before this module; the heads' concatenation, the output
            self.w_v, self.w_o, self.bias = nn.Identity(), nn.Identity(), nn.Parameter(torch.zeros(d_model))
        self.projections, self.negative_slope, self.value_dropout = projections, negative_slope, value_dropout
        self.a_dst = nn.Parameter(nn.init.xavier_uniform_(torch.empty(n_heads, self.d_head)))
        self.a_src = nn.Parameter(nn.init.xavier_uniform_(torch.empty(n_heads, self.d_head)))
        self.b_dst, self.b_src = (nn.Parameter(torch.zeros(n_heads)), nn.Parameter(torch.zeros(n_heads))) \
            if score_bias else (None, None)

    def project_q(self, query: Tensor) -> Tensor:
        return self._split_heads(self.w_v(query))  # (B, T_q, D) -> (B, H, T_q, d_head)

    def project_kv(self, key: Tensor, value: Tensor | None = None) -> tuple[Tensor, Tensor]:
        k = self._split_heads(self.w_v(key))  # (B, H, T_k, d_head)
        return k, (k if value is None or value is key else self._split_heads(self.w_v(value)))

    def project_packed(self, x: Tensor, rows: PackedRows, kv_only: bool = False) -> tuple[Tensor, ...]:
        wx = self._split_heads(rows.unpack(self.w_v(x)))  # (N, D) -> (B, H, T, d_head)
        return (wx, wx) if kv_only else (wx, wx, wx)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               attn_bias: Tensor | None = None, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        p = self.dropout if self.training else 0.0
        dst = (q * self.a_dst[:, None]).sum(-1)  # (B, H, T_q, d) * (H, 1, d) -> (B, H, T_q)
        src = (k * self.a_src[:, None]).sum(-1)  # (B, H, T_k)
        if self.b_dst is not None:
            dst, src = dst + self.b_dst[:, None], src + self.b_src[:, None]  # (B, H, T) + (H, 1)
        v = F.dropout(v, self.value_dropout) if self.training and self.value_dropout > 0 else v  # after the scores
        if isinstance(mask, EdgeMask):
            if attn_bias is not None:
                raise ValueError("an EdgeMask takes no position bias: nodes have no order")
            if not need_weights:
                qi, ki = mask.pairs(q.device)
                scores = F.leaky_relu(dst.index_select(2, qi) + src.index_select(2, ki), self.negative_slope)  # (B, H, E)
                return self._output(mask.mix(scores, v, p), None), None
            mask, attn_bias = mask.dense(q.device)
        mask, attn_bias = mask.dense(q.device) if isinstance(mask, LocalWindow) else (mask, attn_bias)
        if mask is not None and mask.dim() < 4:
            mask = mask.view((1,) * (4 - mask.dim()) + tuple(mask.shape))  # -> (B|1, H|1, T_q|1, T_k)
        scores = F.leaky_relu(dst.unsqueeze(-1) + src.unsqueeze(-2), self.negative_slope)  # (B, H, T_q, T_k)
        weights = masked_softmax(scores if attn_bias is None else scores + attn_bias, mask)
        mixed = F.dropout(weights, p) if p > 0 else weights
        ctx = mixed @ v  # (B, H, T_q, T_k) @ (B, H, T_k, d_head) -> (B, H, T_q, d_head)
        return self._output(ctx, _empty_rows(mask)), (weights if need_weights else None)

    def _output(self, ctx: Tensor, empty: Tensor | None) -> Tensor:
        ctx = ctx if self.projections else ctx + self.bias.view(self.n_heads, 1, self.d_head)  # (B, H, T_q, d_head)
        return super()._output(ctx, empty)


#: ``attention_score`` -> the attention class: Transformer's scaled dot product or GAT's additive score.
ATTENTION_SCORES: dict[str, type[MultiHeadAttention]] = {"dot": MultiHeadAttention, "additive": AdditiveAttention}
