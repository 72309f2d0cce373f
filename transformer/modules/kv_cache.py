"""An explicit key/value cache for incremental decoding.

Shape legend: N batch (sentences x beams), H heads, T cached steps, S source
length, d_head = d_model / H.

The cache is a plain object passed into ``decode_step`` and returned from it; no
module keeps decoding state. Self-attention entries grow by the new steps each
call; cross-attention keys/values depend only on the source, so they are
computed once (``init_cache``) and reused at every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor
import torch


@dataclass
class KVCache:
    """Per-layer self-attention K/V ``(N, H, T, d_head)`` and cross-attention K/V ``(N, H, S, d_head)``.

    Build with ``KVCache.empty(n_layers)``; the model fills cross entries with
    ``set_cross`` and its layers append self entries with ``append_self``.
    ``reorder(indices)`` selects along the batch dim of every tensor (beam search).
    """

    self_k: list[Tensor | None] = field(default_factory=list)
    self_v: list[Tensor | None] = field(default_factory=list)
    cross_k: list[Tensor | None] = field(default_factory=list)
    cross_v: list[Tensor | None] = field(default_factory=list)

    @classmethod
    def empty(cls, n_layers: int) -> "KVCache":
        """A cache with ``n_layers`` empty slots."""
        return cls([None] * n_layers, [None] * n_layers, [None] * n_layers, [None] * n_layers)

    @property
    def n_layers(self) -> int:
        return len(self.self_k)

    @property
    def length(self) -> int:
        """Number of target steps already cached (0 before the first step)."""
        k = self.self_k[0] if self.self_k else None
        return 0 if k is None else k.size(2)

    def append_self(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append new steps ``(N, H, t, d_head)`` to layer ``layer``; return all ``(N, H, T + t, d_head)``."""
        if self.self_k[layer] is not None:
            k = torch.cat([self.self_k[layer], k], dim=2)  # (N, H, T, d) ++ (N, H, t, d) on time
            v = torch.cat([self.self_v[layer], v], dim=2)
        self.self_k[layer], self.self_v[layer] = k, v
        return k, v

    def set_cross(self, layer: int, k: Tensor, v: Tensor) -> None:
        """Store the source keys/values ``(N, H, S, d_head)`` of layer ``layer``."""
        self.cross_k[layer], self.cross_v[layer] = k, v

    def has_cross(self, layer: int) -> bool:
        return layer < len(self.cross_k) and self.cross_k[layer] is not None

    def cross(self, layer: int) -> tuple[Tensor, Tensor]:
        """Cached source keys/values ``(N, H, S, d_head)`` of layer ``layer``."""
        k, v = self.cross_k[layer], self.cross_v[layer]
        if k is None or v is None:
            raise KeyError(f"no cross-attention entry for layer {layer}; call init_cache first")
        return k, v

    def reorder(self, indices: Tensor) -> "KVCache":
        """A new cache whose row ``n`` is this cache's row ``indices[n]``.

        Args:
            indices: ``(N',)`` long; N' may differ from N (beam expansion).
        """

        def sel(ts: list[Tensor | None]) -> list[Tensor | None]:
            return [None if t is None else t.index_select(0, indices.to(t.device)) for t in ts]

        return KVCache(sel(self.self_k), sel(self.self_v), sel(self.cross_k), sel(self.cross_v))
