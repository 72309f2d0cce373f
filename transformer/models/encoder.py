"""The Transformer encoder stack and its output record.

Shape legend: B batch, S source length, D = d_model, H heads, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor, nn

from transformer.models.init import init_weights
from transformer.modules.layers import PostNorm, PreNorm
from transformer.modules.masks import local_window_mask, merge_masks, pad_mask
from transformer.modules.positional import build_positional


@dataclass
class EncoderOut:
    """What decoders need from the encoder.

    Fields: ``memory (B, S, D)``; ``src_pad_mask (B, S)`` bool, True = real token;
    ``src_embed (B, S, D) | None``: the scaled source token embeddings (before
    positions), kept only by models whose decoder copies them (NAT copy mode).
    """

    memory: Tensor
    src_pad_mask: Tensor
    src_embed: Tensor | None = None

    def index_select(self, indices: Tensor) -> "EncoderOut":
        """Rows ``indices (N,)`` of every field (beam expansion / reorder) -> batch N."""
        idx = indices.to(self.memory.device)
        return EncoderOut(
            self.memory.index_select(0, idx),
            self.src_pad_mask.index_select(0, idx),
            None if self.src_embed is None else self.src_embed.index_select(0, idx),
        )


def norm_arrangement(norm_first: bool):
    """``PreNorm()`` if ``norm_first`` else ``PostNorm()`` (the paper's arrangement)."""
    return PreNorm() if norm_first else PostNorm()


class TransformerEncoder(nn.Module):
    """Token embedding ×√d_model, positional encoding, dropout, N self-attention layers.

    Shapes: ``forward(src (B, S), src_pad_mask (B, S) | None) -> memory (B, S, D)``,
    or ``(memory, [weights (B, H, S, S)] * n_layers)`` with ``need_weights=True``.
    ``forward_embeddings`` takes ``(B, S, D)`` vectors instead of ids.

    Args:
        positional: factory called with ``d_model, n_heads, max_len, causal=False``
            (``None`` = sinusoidal; ``NoPositionalEncoding`` for none at all).
        norm_first: pre-norm layers and a final LayerNorm (Xiong et al. 2020) instead of
            the paper's post-norm layers (``PreNorm*`` / ``PostNorm*`` classes in ``modules.layers``).
        window: if set, each position attends only to positions within ``window``
            (restricted self-attention, Vaswani et al. 2017, Table 1).
        embedding: an existing ``nn.Embedding`` to share (joint vocabulary).
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
        window: int | None = None,
        max_len: int = 1024,
        embedding: nn.Embedding | None = None,
    ):
        super().__init__()
        self.d_model = d_model
        self.pad_id = pad_id
        self.window = window
        self.embedding = embedding if embedding is not None else nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.positional = build_positional(positional, d_model, n_heads, max_len, causal=False)
        self.dropout = nn.Dropout(dropout)
        arrangement = norm_arrangement(norm_first)
        self.layers = nn.ModuleList(
            arrangement.encoder_layer(d_model, n_heads, d_ff, dropout, activation) for _ in range(n_layers)
        )
        self.final_norm = arrangement.final_norm(d_model)
        init_weights(self, d_model)

    def embed_tokens(self, src: Tensor) -> Tensor:
        """``(B, S)`` ids -> ``(B, S, D)``, scaled by √d_model (Vaswani et al. 2017, sec. 3.4)."""
        return self.embedding(src) * math.sqrt(self.d_model)

    def forward_embeddings(self, x: Tensor, src_pad_mask: Tensor | None = None, need_weights: bool = False):
        """Encode ``(B, S, D)`` vectors (positions are added here) -> memory ``(B, S, D)``."""
        s = x.size(1)
        x = self.dropout(self.positional(x))
        window = None if self.window is None else local_window_mask(s, s, self.window, device=x.device)
        mask = merge_masks(src_pad_mask, window)  # (B, 1, 1|S, S) or None
        bias = self.positional.attention_bias(s, s)  # (1, H, S, S) or None
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask, bias, need_weights)
            weights.append(w)
        x = self.final_norm(x)
        return (x, weights) if need_weights else x

    def forward(self, src: Tensor, src_pad_mask: Tensor | None = None, need_weights: bool = False):
        """``src (B, S)`` -> memory ``(B, S, D)``; padding mask from ``pad_id`` when not given."""
        if src_pad_mask is None:
            src_pad_mask = pad_mask(src, self.pad_id)
        return self.forward_embeddings(self.embed_tokens(src), src_pad_mask, need_weights)
