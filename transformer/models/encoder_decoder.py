"""The encoder-decoder Transformer for translation (Vaswani et al. 2017).

Shape legend: B batch, N search rows (sentences × beams), S source length,
T target length, D = d_model, V target vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transformer.models.decoder import AutoregressiveDecoder
from transformer.models.encoder import EncoderOut, TransformerEncoder
from transformer.models.init import init_weights, target_vocab_size
from transformer.modules.kv_cache import KVCache
from transformer.modules.masks import pad_mask

__all__ = ["EncoderDecoder", "EncoderOut"]


class EncoderDecoder(nn.Module):
    """Encoder + autoregressive decoder with the decoding API of ``decoding.api.Seq2SeqModel``.

    Shapes:
        ``forward(src (B, S), tgt_in (B, T)) -> logits (B, T, V)`` (teacher forcing;
        causal and padding masks are built here from ``pad_id``);
        ``encode(src) -> EncoderOut``; ``init_cache(enc) -> KVCache``;
        ``decode_step(tokens (N, t), enc, cache) -> (log_probs (N, V), cache)``.

    Args:
        vocab_size: source vocabulary (and target too unless ``tgt_vocab_size``).
        pad_id: padding id, shared by source and target vocabularies.
        positional: factory ``(d_model, n_heads, max_len, causal) -> module``; ``None``
            = sinusoidal. In YAML: ``{_target_: transformer.modules.positional.RelativePositionBias,
            _partial_: true}``. Encoder and decoder each get their own instance.
        norm_first: False = post-norm layers (the paper); True = pre-norm layers plus a
            final LayerNorm per stack (Xiong et al. 2020), stable at higher learning rates.
        activation: ``"relu"`` or ``"gelu"`` in the FFN.
        window: local self-attention window for the encoder (None = full).
        max_len: longest sequence for learned positions.
        tgt_vocab_size: target vocabulary size when vocabularies are separate.
        share_embeddings: one embedding matrix for source and target (joint
            vocabulary; requires equal sizes).
        tie_output: output projection = target embedding (Press & Wolf 2017).

    Attributes: ``pad_id``; ``vocab_size`` (target, i.e. the logits' V);
    ``src_vocab_size``.
    """

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        d_model: int = 512,
        n_heads: int = 8,
        n_encoder_layers: int = 6,
        n_decoder_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        positional=None,
        norm_first: bool = False,
        activation: str = "relu",
        window: int | None = None,
        max_len: int = 1024,
        tgt_vocab_size: int | None = None,
        share_embeddings: bool = True,
        tie_output: bool = True,
    ):
        super().__init__()
        tgt_vocab_size = target_vocab_size(vocab_size, tgt_vocab_size, share_embeddings)
        self.pad_id = pad_id
        self.src_vocab_size = vocab_size
        self.vocab_size = tgt_vocab_size
        self.encoder = TransformerEncoder(
            vocab_size, d_model, n_heads, n_encoder_layers, d_ff, dropout, pad_id,
            positional=positional, norm_first=norm_first, activation=activation, window=window, max_len=max_len,
        )
        self.decoder = AutoregressiveDecoder(
            tgt_vocab_size, d_model, n_heads, n_decoder_layers, d_ff, dropout, pad_id,
            positional=positional, norm_first=norm_first, activation=activation, max_len=max_len,
            embedding=self.encoder.embedding if share_embeddings else None, tie_output=tie_output,
        )
        init_weights(self, d_model)

    def encode(self, src: Tensor) -> EncoderOut:
        """``src (B, S)`` -> ``EncoderOut(memory (B, S, D), src_pad_mask (B, S))``."""
        src_pad_mask = pad_mask(src, self.pad_id)
        return EncoderOut(self.encoder(src, src_pad_mask), src_pad_mask)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits ``(B, T, V)``."""
        enc = self.encode(src)
        return self.decoder(tgt_in, enc.memory, enc.src_pad_mask, pad_mask(tgt_in, self.pad_id))

    def decoder_states(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced decoder output states ``(B, T, D)``, before the vocabulary projection."""
        enc = self.encode(src)
        return self.decoder.states(tgt_in, enc.memory, enc.src_pad_mask, pad_mask(tgt_in, self.pad_id))

    def project(self, states: Tensor) -> Tensor:
        """Vocabulary scores of decoder output states: ``(..., D) -> (..., V)``; ``forward`` is
        ``project(decoder_states(src, tgt_in))``."""
        return self.decoder.project(states)

    def init_cache(self, enc: EncoderOut) -> KVCache:
        """A fresh cache holding every decoder layer's cross-attention K/V for ``enc``."""
        return self.decoder.init_cache(enc.memory, enc.src_pad_mask)

    def decode_step(self, tokens: Tensor, enc: EncoderOut, cache: KVCache) -> tuple[Tensor, KVCache]:
        """Log-probabilities ``(N, V)`` of the token after ``tokens``.

        ``tokens (N, t)`` are the tokens not yet in the cache (search passes one per
        row per call, BOS first); they sit at positions ``cache.length ..
        cache.length + t - 1`` and their keys/values are appended to ``cache``.
        """
        logits, cache = self.decode_step_logits(tokens, enc, cache)  # (N, V)
        return torch.log_softmax(logits.float(), dim=-1), cache

    def decode_step_logits(self, tokens: Tensor, enc: EncoderOut, cache: KVCache) -> tuple[Tensor, KVCache]:
        """As ``decode_step`` but unnormalised scores ``(N, V)``: greedy search without scores
        needs only their argmax, which skips a softmax over the vocabulary at every step."""
        logits, cache = self.decoder.forward_step(tokens, enc.src_pad_mask, cache)  # (N, t, V)
        return logits[:, -1], cache
