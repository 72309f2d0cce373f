"""Masked language model: the Transformer encoder with a head that predicts hidden pieces
(BERT, Devlin et al. 2019); and ELECTRA's pair of a small masked-LM generator and a
discriminator that tells original pieces from the generator's replacements (Clark et al. 2020).

The encoder is the project's ``TransformerEncoder`` under the same module name as the tagger's
and the classifier's (``encoder``), so a fine-tuned model starts from its weights by name
(``tasks.transfer``). The head follows BERT's: a dense layer, GELU and LayerNorm, then the
projection to the vocabulary, tied to the input embedding (Press & Wolf 2017), plus a bias per
piece.

``ElectraModel``'s discriminator is a ``TransformerEncoder`` named ``encoder`` as well, so
fine-tuning takes it the same way; its generator is a ``MaskedLanguageModel`` of the same depth
with a fraction of the heads (each head as wide as the discriminator's), as the paper found best
(a quarter to a half of the width). Unlike the paper, the two do not share the embedding table:
each model here keeps its own, so each reads as the plain model it is.

Shape legend: B batch, T pieces, N chosen positions, D = d_model, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.models.transformer import TransformerEncoder, VocabProjection, init_weights
from transformer.modules.attention import head_width, pad_mask


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


class ElectraModel(nn.Module):
    """ELECTRA's generator and discriminator (replaced-token detection, Clark et al. 2020).

    Shapes: ``generator`` is a ``MaskedLanguageModel`` (``encode``, ``predict`` as above);
    ``discriminate(src (B, T)) -> logits (B, T)``, the score that each piece is a replacement
    (``forward`` is the same); ``encode(src) -> states (B, T, D)`` of the discriminator.

    Args: as ``MaskedLanguageModel``, for the discriminator; ``generator_fraction``: the
    generator's share of the heads (at least one), its width and feed-forward size scaled with it.
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
        generator_fraction: float = 0.25,
    ):
        super().__init__()
        if not 0 < generator_fraction <= 1:
            raise ValueError(f"generator_fraction={generator_fraction!r}: expected a share in (0, 1]")
        self.pad_id = pad_id
        self.vocab_size = vocab_size
        self.encoder = TransformerEncoder(
            vocab_size, d_model, n_heads, n_layers, d_ff, dropout, pad_id,
            positional=positional, norm_first=norm_first, activation=activation, window=window, max_len=max_len,
        )
        self.rtd_dense = nn.Linear(d_model, d_model)
        self.rtd_out = nn.Linear(d_model, 1)
        init_weights(self, d_model)  # the discriminator; the generator below initialises itself
        g_heads = max(1, round(n_heads * generator_fraction))
        self.generator = MaskedLanguageModel(
            vocab_size, pad_id, g_heads * head_width(d_model, n_heads), g_heads, n_layers,
            max(1, round(d_ff * g_heads / n_heads)), dropout, positional, norm_first, activation, window, max_len,
        )

    def encode(self, src: Tensor) -> Tensor:
        """``src (B, T)`` -> the discriminator's states ``(B, T, D)``."""
        return self.encoder(src, pad_mask(src, self.pad_id))

    def discriminate(self, src: Tensor) -> Tensor:
        """``src (B, T)`` -> ``(B, T)`` logits that each piece was put there by the generator."""
        return self.rtd_out(F.gelu(self.rtd_dense(self.encode(src)))).squeeze(-1)

    def forward(self, src: Tensor) -> Tensor:
        return self.discriminate(src)  # (B, T)


__all__ = ["ElectraModel", "MaskedLanguageModel"]
