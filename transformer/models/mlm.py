"""Masked language model: the Transformer encoder with a head that predicts hidden pieces
(BERT, Devlin et al. 2019).

The encoder is the project's ``TransformerEncoder`` under the same module name as the tagger's
and the classifier's (``encoder``), so a fine-tuned model starts from its weights by name
(``tasks.transfer``). The head follows BERT's: a dense layer, GELU and LayerNorm, then the
projection to the vocabulary, tied to the input embedding (Press & Wolf 2017), plus a bias per
piece.

Shape legend: B batch, T pieces, N chosen positions, D = d_model, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.models.transformer import TransformerEncoder, VocabProjection, init_weights
from transformer.modules.attention import pad_mask


class MaskedLanguageModel(nn.Module):
    """``TransformerEncoder`` + an LM head tied to its embedding.

    Shapes: ``forward(src (B, T)) -> logits (B, T, V)``; ``encode(src) -> states (B, T, D)``;
    ``predict(states (..., D)) -> logits (..., V)``, so training can score only the chosen
    positions: ``predict(encode(src)[chosen])``, ``(N, D) -> (N, V)``.

    Args: as ``TransformerEncoder`` (``vocab_size`` and ``pad_id`` come from the tokenizer).
    """

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        d_model: int = 256,
        n_heads: int = 4,
        n_layers: int = 4,
        d_ff: int = 1024,
        dropout: float = 0.1,
        positional=None,
        norm_first: bool = True,
        activation: str = "gelu",
        window: int | None = None,
        max_len: int = 512,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.vocab_size = vocab_size
        self.encoder = TransformerEncoder(
            vocab_size, d_model, n_heads, n_layers, d_ff, dropout, pad_id,
            positional=positional, norm_first=norm_first, activation=activation, window=window, max_len=max_len,
        )
        self.head_dense = nn.Linear(d_model, d_model)
        self.head_norm = nn.LayerNorm(d_model)
        self.output_proj = VocabProjection(d_model, vocab_size)
        self.output_proj.weight = self.encoder.embedding.weight  # tied (Press & Wolf 2017)
        self.output_bias = nn.Parameter(torch.zeros(vocab_size))
        init_weights(self, d_model)

    def encode(self, src: Tensor) -> Tensor:
        """``src (B, T)`` -> encoder states ``(B, T, D)`` (padding from ``pad_id``)."""
        return self.encoder(src, pad_mask(src, self.pad_id))

    def predict(self, states: Tensor) -> Tensor:
        """Vocabulary scores of encoder states: ``(..., D) -> (..., V)``."""
        h = self.head_norm(F.gelu(self.head_dense(states)))  # (..., D)
        return self.output_proj(h) + self.output_bias  # (..., V)

    def forward(self, src: Tensor) -> Tensor:
        return self.predict(self.encode(src))  # (B, T, V)


__all__ = ["MaskedLanguageModel"]
