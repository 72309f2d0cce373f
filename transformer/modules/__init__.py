"""Building blocks: masks, attention, positional encodings, feed-forward, layers, KV cache."""

from transformer.modules.attention import MultiHeadAttention, scaled_dot_product
from transformer.modules.feedforward import FeedForward
from transformer.modules.kv_cache import KVCache
from transformer.modules.layers import (
    PostNorm,
    PostNormDecoderLayer,
    PostNormEncoderLayer,
    PreNorm,
    PreNormDecoderLayer,
    PreNormEncoderLayer,
)
from transformer.modules.masks import causal_mask, local_window_mask, merge_masks, pad_mask
from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
    build_positional,
)

__all__ = [
    "FeedForward",
    "KVCache",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "NoPositionalEncoding",
    "PostNorm",
    "PostNormDecoderLayer",
    "PostNormEncoderLayer",
    "PreNorm",
    "PreNormDecoderLayer",
    "PreNormEncoderLayer",
    "RelativePositionBias",
    "SinusoidalPositionalEncoding",
    "build_positional",
    "causal_mask",
    "local_window_mask",
    "merge_masks",
    "pad_mask",
    "scaled_dot_product",
]
