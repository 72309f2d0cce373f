"""Encoder and decoder layers in the two layer-norm arrangements.

Shape legend: B batch, T target/sequence length, S source length, D = d_model,
H heads.

* Post-norm (Vaswani et al. 2017): ``x = LN(x + Dropout(Sublayer(x)))``.
* Pre-norm (Wang et al. 2019; Xiong et al. 2020): ``x = x + Dropout(Sublayer(LN(x)))``;
  stable without warm-up tricks, and the stack needs a final LayerNorm.

The models pick an arrangement with ``norm_first: bool``, which selects one of
the small objects ``PostNorm()`` / ``PreNorm()`` below; each builds the layers
and the stack's final norm.

Decoder layers serve both teacher forcing and incremental decoding: given a
``KVCache`` they append this step's self-attention keys/values and read the
cross-attention keys/values from it instead of projecting ``memory``.
"""

from __future__ import annotations

from torch import Tensor, nn

from transformer.modules.attention import MultiHeadAttention
from transformer.modules.feedforward import FeedForward
from transformer.modules.kv_cache import KVCache



class _EncoderLayerBase(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, activation: str = "relu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm_1 = nn.LayerNorm(d_model)
        self.norm_2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def _self_attention(self, h: Tensor, mask, attn_bias, need_weights) -> tuple[Tensor, Tensor | None]:
        out, w = self.self_attn(h, h, h, mask, attn_bias, need_weights)
        return self.dropout(out), w


class PostNormEncoderLayer(_EncoderLayerBase):
    """Self-attention + FFN, each wrapped as ``LN(x + Dropout(sublayer(x)))`` (Vaswani et al. 2017).

    ``forward(x (B, S, D), mask (B, 1, S, S) bool | None, attn_bias (1, H, S, S) | None,
    need_weights) -> (x (B, S, D), weights (B, H, S, S) | None)``.
    """

    def forward(self, x: Tensor, mask: Tensor | None = None, attn_bias: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        a, w = self._self_attention(x, mask, attn_bias, need_weights)
        x = self.norm_1(x + a)
        x = self.norm_2(x + self.dropout(self.ffn(x)))
        return x, w


class PreNormEncoderLayer(_EncoderLayerBase):
    """Self-attention + FFN, each wrapped as ``x + Dropout(sublayer(LN(x)))`` (Xiong et al. 2020).

    Same signature as ``PostNormEncoderLayer``.
    """

    def forward(self, x: Tensor, mask: Tensor | None = None, attn_bias: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        a, w = self._self_attention(self.norm_1(x), mask, attn_bias, need_weights)
        x = x + a
        x = x + self.dropout(self.ffn(self.norm_2(x)))
        return x, w


class _DecoderLayerBase(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, activation: str = "relu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm_1 = nn.LayerNorm(d_model)
        self.norm_2 = nn.LayerNorm(d_model)
        self.norm_3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def _self_attention(self, h, mask, attn_bias, cache: KVCache | None, layer_idx: int, need_weights):
        q = self.self_attn.project_q(h)  # (B, H, t, d_head)
        k, v = self.self_attn.project_kv(h)  # (B, H, t, d_head)
        if cache is not None:
            k, v = cache.append_self(layer_idx, k, v)  # (B, H, T_cached + t, d_head)
        out, w = self.self_attn.attend(q, k, v, mask, attn_bias, need_weights)
        return self.dropout(out), w

    def _cross_attention(self, h, memory, mask, cache: KVCache | None, layer_idx: int, need_weights):
        q = self.cross_attn.project_q(h)  # (B, H, t, d_head)
        bias = None
        if cache is not None and cache.has_cross(layer_idx):
            k, v = cache.cross(layer_idx)  # (B, H, S, d_head), projected once by init_cache
            if cache.source_mask_set:
                mask, bias = None, cache.cross_bias  # (B, 1, 1, S) additive, or None: no padding
        else:
            if memory is None:
                raise ValueError("decoder layer needs memory or a cache with cross-attention entries")
            k, v = self.cross_attn.project_kv(memory)
        out, w = self.cross_attn.attend(q, k, v, mask, bias, need_weights)
        return self.dropout(out), w


class PostNormDecoderLayer(_DecoderLayerBase):
    """Masked self-attention, cross-attention, FFN; post-norm residuals (Vaswani et al. 2017).

    ``forward(x (B, t, D), memory (B, S, D) | None, self_mask (B|1, 1, t, T) bool,
    cross_mask (B, 1, 1|t, S) bool, self_bias (1, H, t, T) | None, cache, layer_idx,
    need_weights) -> (x (B, t, D), (self_w (B, H, t, T), cross_w (B, H, t, S)) | None)``.
    ``T = t`` without a cache, ``T = cache.length + t`` with one.
    """

    def forward(self, x: Tensor, memory: Tensor | None = None, self_mask: Tensor | None = None,
                cross_mask: Tensor | None = None, self_bias: Tensor | None = None,
                cache: KVCache | None = None, layer_idx: int = 0, need_weights: bool = False):
        a, sw = self._self_attention(x, self_mask, self_bias, cache, layer_idx, need_weights)
        x = self.norm_1(x + a)
        c, cw = self._cross_attention(x, memory, cross_mask, cache, layer_idx, need_weights)
        x = self.norm_2(x + c)
        x = self.norm_3(x + self.dropout(self.ffn(x)))
        return x, ((sw, cw) if need_weights else None)


class PreNormDecoderLayer(_DecoderLayerBase):
    """Masked self-attention, cross-attention, FFN; pre-norm residuals (Xiong et al. 2020).

    Same signature as ``PostNormDecoderLayer``.
    """

    def forward(self, x: Tensor, memory: Tensor | None = None, self_mask: Tensor | None = None,
                cross_mask: Tensor | None = None, self_bias: Tensor | None = None,
                cache: KVCache | None = None, layer_idx: int = 0, need_weights: bool = False):
        a, sw = self._self_attention(self.norm_1(x), self_mask, self_bias, cache, layer_idx, need_weights)
        x = x + a
        c, cw = self._cross_attention(self.norm_2(x), memory, cross_mask, cache, layer_idx, need_weights)
        x = x + c
        x = x + self.dropout(self.ffn(self.norm_3(x)))
        return x, ((sw, cw) if need_weights else None)


class PostNorm:
    """Layer-norm arrangement of Vaswani et al. 2017: post-norm layers, no final norm."""

    encoder_layer_cls = PostNormEncoderLayer
    decoder_layer_cls = PostNormDecoderLayer

    def encoder_layer(self, d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str) -> nn.Module:
        return self.encoder_layer_cls(d_model, n_heads, d_ff, dropout, activation)

    def decoder_layer(self, d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str) -> nn.Module:
        return self.decoder_layer_cls(d_model, n_heads, d_ff, dropout, activation)

    def final_norm(self, d_model: int) -> nn.Module:
        return nn.Identity()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PreNorm(PostNorm):
    """Pre-norm layers plus a final LayerNorm on the stack output (Xiong et al. 2020)."""

    encoder_layer_cls = PreNormEncoderLayer
    decoder_layer_cls = PreNormDecoderLayer

    def final_norm(self, d_model: int) -> nn.Module:
        return nn.LayerNorm(d_model)
