"""Concepts the models are built from, one module each: attention with its masks, the KV cache
it reads while decoding, positional encodings."""

from transformer.modules.attention import (
    LocalWindow,
    MultiHeadAttention,
    causal_mask,
    local_window_mask,
    merge_masks,
    pad_mask,
    scaled_dot_product,
)
from transformer.modules.kv_cache import KVCache
from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
    build_positional,
)

__all__ = [
    "KVCache",
    "LearnedPositionalEncoding",
    "LocalWindow",
    "MultiHeadAttention",
    "NoPositionalEncoding",
    "RelativePositionBias",
    "SinusoidalPositionalEncoding",
    "build_positional",
    "causal_mask",
    "local_window_mask",
    "merge_masks",
    "pad_mask",
    "scaled_dot_product",
]
