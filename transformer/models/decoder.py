"""The autoregressive Transformer decoder (Vaswani et al. 2017, sec. 3.1).

Shape legend: B batch (N during search), T target length, t new steps,
S source length, D = d_model, H heads, V target vocabulary.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from transformer.models.encoder import norm_arrangement
from transformer.models.init import init_weights
from transformer.modules.kv_cache import KVCache
from transformer.modules.masks import causal_mask, merge_masks
from transformer.modules.positional import build_positional
from transformer.modules.projection import VocabProjection


class AutoregressiveDecoder(nn.Module):
    """Masked self-attention + cross-attention + FFN layers and an output projection.

    Shapes:
        ``forward(tgt_in (B, T), memory (B, S, D), src_pad_mask (B, S), tgt_pad_mask (B, T) | None)
        -> logits (B, T, V)`` (teacher forcing);
        ``init_cache(memory (N, S, D)) -> KVCache`` (cross K/V projected once);
        ``forward_step(tokens (N, t), src_pad_mask (N, S), cache) -> (logits (N, t, V), cache)``
        where the new tokens sit at positions ``cache.length ..``.

    Args:
        embedding: an existing ``nn.Embedding`` to share (joint vocabulary).
        tie_output: output projection uses the target embedding matrix
            (Press & Wolf 2017; Vaswani et al. 2017, sec. 3.4).
        positional, norm_first: as in ``TransformerEncoder`` (the factory gets ``causal=True``).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 512,
        n_heads: int = 8,
        n_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        pad_id: int = 0,
        positional=None,
        norm_first: bool = False,
        activation: str = "relu",
        max_len: int = 1024,
        embedding: nn.Embedding | None = None,
        tie_output: bool = True,
    ):
        super().__init__()
        self.d_model = d_model
        self.pad_id = pad_id
        self.vocab_size = vocab_size
        self.embedding = embedding if embedding is not None else nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.positional = build_positional(positional, d_model, n_heads, max_len, causal=True)
        self.dropout = nn.Dropout(dropout)
        arrangement = norm_arrangement(norm_first)
        self.layers = nn.ModuleList(
            arrangement.decoder_layer(d_model, n_heads, d_ff, dropout, activation) for _ in range(n_layers)
        )
        self.final_norm = arrangement.final_norm(d_model)
        self.output_proj = VocabProjection(d_model, vocab_size)
        if tie_output:
            self.output_proj.weight = self.embedding.weight
        init_weights(self, d_model)

    def _states(self, tokens, memory, src_pad_mask, tgt_pad_mask, cache, need_weights):
        """Decoder output states ``(B, t, D)`` (after the final norm) and per-layer weights."""
        offset = cache.length if cache is not None else 0
        t = tokens.size(1)
        t_k = offset + t
        x = self.embedding(tokens) * math.sqrt(self.d_model)  # (B, t, D)
        x = self.dropout(self.positional(x, offset))
        if t == 1 and tgt_pad_mask is None:
            # One new query at the last position may attend to every cached key: no mask, so
            # attention can take SDPA's unmasked (fastest) kernel during incremental decoding.
            self_mask = None
        else:
            self_mask = merge_masks(tgt_pad_mask, causal_mask(t, t_k, device=x.device))  # (B|1, 1, t, T)
        if cache is not None and cache.source_mask_set:
            cross_mask = None  # the layers read the cache's additive source bias instead
        else:
            cross_mask = merge_masks(src_pad_mask)  # (B, 1, 1, S)
        bias = self.positional.attention_bias(t, t_k, offset)  # (1, H, t, T) or None
        weights = []
        for i, layer in enumerate(self.layers):
            x, w = layer(x, memory, self_mask, cross_mask, bias, cache, i, need_weights)
            weights.append(w)
        return self.final_norm(x), weights

    def _run(self, tokens, memory, src_pad_mask, tgt_pad_mask, cache, need_weights):
        x, weights = self._states(tokens, memory, src_pad_mask, tgt_pad_mask, cache, need_weights)
        return self.output_proj(x), weights  # (B, t, D) -> (B, t, V)

    def project(self, states: Tensor) -> Tensor:
        """Vocabulary scores of output states: ``(..., D) -> (..., V)``."""
        return self.output_proj(states)

    def states(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor | None = None,
               tgt_pad_mask: Tensor | None = None) -> Tensor:
        """Teacher-forced output states ``(B, T, D)``: ``forward`` is ``output_proj`` of these."""
        return self._states(tgt_in, memory, src_pad_mask, tgt_pad_mask, None, False)[0]

    def forward(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor | None = None,
                tgt_pad_mask: Tensor | None = None, need_weights: bool = False):
        """Teacher-forced logits ``(B, T, V)``; with ``need_weights`` also per-layer
        ``(self_w (B, H, T, T), cross_w (B, H, T, S))``.

        Every position is projected to the vocabulary, padding included: the shapes depend only
        on ``(B, T)``, never on the data, so a compiled training step is reused across batches
        (the loss ignores padded positions).
        """
        logits, weights = self._run(tgt_in, memory, src_pad_mask, tgt_pad_mask, None, need_weights)
        return (logits, weights) if need_weights else logits

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor | None = None) -> KVCache:
        """An empty self-attention cache plus every layer's cross K/V ``(N, H, S, d_head)``
        and, given ``src_pad_mask (N, S)``, the source padding as a ready additive bias."""
        cache = KVCache.empty(len(self.layers))
        cache.set_source_mask(src_pad_mask, memory.dtype)
        for i, layer in enumerate(self.layers):
            cache.set_cross(i, *layer.cross_attn.project_kv(memory))
        return cache

    def forward_step(self, tokens: Tensor, src_pad_mask: Tensor | None, cache: KVCache) -> tuple[Tensor, KVCache]:
        """Logits ``(N, t, V)`` for new ``tokens (N, t)``; their self K/V are appended to ``cache``."""
        logits, _ = self._run(tokens, None, src_pad_mask, None, cache, False)
        return logits, cache
