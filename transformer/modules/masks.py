"""Boolean attention masks, built only here.

One polarity everywhere: ``True`` = this query may attend to this key (or, for a
``(B, T)`` padding mask, this position holds a real token).

Shape legend: B batch, T sequence, T_q queries, T_k keys.

Offset rule for cached decoding: when ``T_q < T_k`` the queries are the *last*
``T_q`` positions of the sequence, so query ``i`` sits at absolute position
``T_k - T_q + i``. With this rule the same functions serve full (teacher-forced)
attention and incremental attention over a KV cache.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
