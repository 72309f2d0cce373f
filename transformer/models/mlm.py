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

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.models.transformer import ACTIVATIONS, EncoderConfig, TransformerEncoder, VocabProjection, init_weights
from transformer.modules.attention import head_width, pad_mask


@dataclass(kw_only=True)
class MLMConfig(EncoderConfig):
    """``EncoderConfig`` with BERT's choices as defaults: pre-norm layers, GELU; plus the head's
    switches.

    Fields:
        head_transform: the head's dense layer, activation and LayerNorm before the projection
            to the vocabulary (BERT's ``transform``); off: the projection reads the states.
        head_activation: that activation, ``"gelu"`` or ``"relu"``.
        tie_output: the projection to the vocabulary is the token embedding (Press & Wolf 2017);
            off: a matrix of its own.
        output_bias: a learned bias per piece added to the vocabulary scores.
    """

    norm_first: bool = True
    activation: str = "gelu"
    head_transform: bool = True
    head_activation: str = "gelu"
    tie_output: bool = True
    output_bias: bool = True


@dataclass(kw_only=True)
class ElectraConfig(MLMConfig):
    """``MLMConfig`` (the discriminator's) plus ``generator_fraction``: the generator's share of
    the heads (at least one), its width and feed-forward size scaled with it."""

    generator_fraction: float = 0.25


class MaskedLanguageModel(nn.Module):
    """``TransformerEncoder`` + an LM head tied to its embedding.

    Shapes: ``forward(src (B, T)) -> logits (B, T, V)``; ``encode(src) -> states (B, T, D)``;
    ``predict(states (..., D)) -> logits (..., V)``, so training can score only the chosen
    positions: ``predict(encode(src)[chosen])``, ``(N, D) -> (N, V)``.

    Args:
        cfg: the encoder's sizes (``MLMConfig``; ``vocab_size`` and ``pad_id`` come from the tokenizer).
    """

    config_class = MLMConfig

    def __init__(self, cfg: MLMConfig):
        super().__init__()
        d_model = cfg.d_model
        self.cfg = cfg
        self.pad_id = cfg.pad_id
        self.vocab_size = vocab_size = cfg.vocab_size
        self.encoder = TransformerEncoder(cfg, cfg.n_layers)
        if cfg.head_activation not in ACTIVATIONS:
            raise ValueError(f"head_activation must be one of {sorted(ACTIVATIONS)}, got {cfg.head_activation!r}")
        self.head_activation = ACTIVATIONS[cfg.head_activation]
        self.head_dense = nn.Linear(d_model, d_model) if cfg.head_transform else None
        self.head_norm = nn.LayerNorm(d_model, eps=cfg.norm_eps) if cfg.head_transform else None
        self.output_proj = VocabProjection(d_model, vocab_size)
        if cfg.tie_output:
            self.output_proj.weight = self.encoder.embedding.weight  # tied (Press & Wolf 2017)
        self.output_bias = nn.Parameter(torch.zeros(vocab_size)) if cfg.output_bias else None
        init_weights(self, d_model)

    def encode(self, src: Tensor) -> Tensor:
        """``src (B, T)`` -> encoder states ``(B, T, D)`` (padding from ``pad_id``)."""
        return self.encoder(src, pad_mask(src, self.pad_id))

    def predict(self, states: Tensor) -> Tensor:
        """Vocabulary scores of encoder states: ``(..., D) -> (..., V)``."""
        h = states
        if self.head_dense is not None:
            h = self.head_norm(self.head_activation(self.head_dense(h)))  # (..., D)
        logits = self.output_proj(h)  # (..., V)
        return logits if self.output_bias is None else logits + self.output_bias

    def forward(self, src: Tensor) -> Tensor:
        return self.predict(self.encode(src))  # (B, T, V)


class ElectraModel(nn.Module):
    """ELECTRA's generator and discriminator (replaced-token detection, Clark et al. 2020).

    Shapes: ``generator`` is a ``MaskedLanguageModel`` (``encode``, ``predict`` as above);
    ``discriminate(src (B, T)) -> logits (B, T)``, the score that each piece is a replacement
    (``forward`` is the same); ``encode(src) -> states (B, T, D)`` of the discriminator.

    Args:
        cfg: the discriminator's sizes and the generator's share (``ElectraConfig``).
    """

    config_class = ElectraConfig

    def __init__(self, cfg: ElectraConfig):
        super().__init__()
        if not 0 < cfg.generator_fraction <= 1:
            raise ValueError(f"generator_fraction={cfg.generator_fraction!r}: expected a share in (0, 1]")
        d_model, n_heads = cfg.d_model, cfg.n_heads
        self.cfg = cfg
        self.pad_id = cfg.pad_id
        self.vocab_size = cfg.vocab_size
        self.encoder = TransformerEncoder(cfg, cfg.n_layers)
        self.rtd_dense = nn.Linear(d_model, d_model)
        self.rtd_out = nn.Linear(d_model, 1)
        init_weights(self, d_model)  # the discriminator; the generator below initialises itself
        g_heads = max(1, round(n_heads * cfg.generator_fraction))
        shared = {f.name: getattr(cfg, f.name) for f in fields(MLMConfig)}
        self.generator = MaskedLanguageModel(MLMConfig(**{
            **shared, "d_model": g_heads * head_width(d_model, n_heads), "n_heads": g_heads,
            "d_ff": max(1, round(cfg.d_ff * g_heads / n_heads)),
        }))

    def encode(self, src: Tensor) -> Tensor:
        """``src (B, T)`` -> the discriminator's states ``(B, T, D)``."""
        return self.encoder(src, pad_mask(src, self.pad_id))

    def discriminate(self, src: Tensor) -> Tensor:
        """``src (B, T)`` -> ``(B, T)`` logits that each piece was put there by the generator."""
        return self.rtd_out(F.gelu(self.rtd_dense(self.encode(src)))).squeeze(-1)

    def forward(self, src: Tensor) -> Tensor:
        return self.discriminate(src)  # (B, T)


__all__ = ["ElectraConfig", "ElectraModel", "MLMConfig", "MaskedLanguageModel"]
