"""Multi-head attention with CPU-only shortcuts (no change on other devices).

Shape legend: B batch, H heads, T_q queries, T_k keys, d_head per-head width.

* An all-True padding mask is dropped: attention under it equals attention without one, and
  the mask costs work at every call (the fully-masked-row check and fill, SDPA's masked path);
  about 5 % of a non-autoregressive pass at batch 1, where nothing is padded. The check reads
  the mask on the host, which is free on a CPU and a sync on a GPU, so it is CPU-only.
* One query per row (incremental decoding) with many rows: two batched matmuls. SDPA's CPU
  flash kernel for ``(B, H, 1, d_head)`` queries took 1.2-2.2x the time of
  ``softmax(q kᵀ / √d) v`` written as matmuls once B x H reached ~128 (greedy over 128
  sentences, beam 5 over 128; one thread), and was faster only for a handful of rows.
* Training with attention dropout: the explicit formula with ``accel.dropout``'s faster mask
  (SDPA would run its math path with ``F.dropout``'s slower CPU mask).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from transformer.accel.dropout import dropout
from transformer.modules.attention import MultiHeadAttention, attention_weights

# Below this many (row, head) pairs SDPA's CPU kernel beats two batched matmuls for one query.
MIN_MATMUL_HEADS = 32


def single_query_matmul(q: Tensor) -> bool:
    """True where one query per row is faster as two batched matmuls (see the module docstring)."""
    return q.device.type == "cpu" and q.size(-2) == 1 and q.size(0) * q.size(1) >= MIN_MATMUL_HEADS


def attend_one_query(q: Tensor, k: Tensor, v: Tensor, attn_bias: Tensor | None) -> Tensor:
    """softmax(q kᵀ / √d_head + bias) v for ``q (B, H, 1, d_head)``, no mask, no dropout.

    The bias must leave every row at least one finite score (the KV cache's source bias does).
    """
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.size(-1)))  # (B, H, 1, T_k)
    if attn_bias is not None:
        scores = scores + attn_bias.to(scores.dtype)
    return torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, H, 1, d_head)


class CPUMultiHeadAttention(MultiHeadAttention):
    """``MultiHeadAttention`` (same parameters) with the CPU shortcuts of the module docstring."""

    plain = MultiHeadAttention
    cache_attrs: tuple[str, ...] = ()

    @staticmethod
    def prepare(module: MultiHeadAttention) -> None:
        """Nothing to cache: the shortcuts are decided per call."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               attn_bias: Tensor | None = None, need_weights: bool = False):
        if isinstance(mask, Tensor) and q.device.type == "cpu" and bool(mask.all()):  # not a LocalWindow
            mask = None
        return super().attend(q, k, v, mask, attn_bias, need_weights)

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, empty: Tensor | None,
              attn_bias: Tensor | None, p: float) -> Tensor:
        if q.device.type == "cpu":
            if p > 0.0:
                weights = attention_weights(q, k, True, mask, attn_bias)  # (B, H, T_q, T_k)
                return dropout(weights, p) @ v  # (B, H, T_q, T_k) @ (B, H, T_k, d_head)
            if mask is None and single_query_matmul(q):
                return attend_one_query(q, k, v, attn_bias)
        return super()._sdpa(q, k, v, mask, empty, attn_bias, p)
