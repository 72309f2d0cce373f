"""Non-autoregressive translation: all target positions in parallel.

Gu et al. 2018 (NAT: uniform copy of source embeddings as decoder inputs, a
length predictor) and Ghazvininejad et al. 2019 (Mask-Predict: decoder inputs
are target tokens with some replaced by ``[MASK]``).

Shape legend: B batch, S source length, T target length, D = d_model,
V target vocabulary, L length classes, k candidates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from transformer.models.transformer import (
    DecoderLayer,
    EncoderOut,
    TransformerConfig,
    TransformerEncoder,
    VocabProjection,
    embedding_norm,
    final_norm,
    hp,
    init_weights,
    layer_stack,
    target_vocab_size,
)
from transformer.modules.attention import merge_masks, pad_mask
from transformer.modules.positional import build_positional
from transformer.ranges import Range

DECODER_INPUTS = ("copy", "mask")
LENGTH_MODES = ("absolute", "offset")


def uniform_copy_indices(src_lengths: Tensor, tgt_lengths: Tensor, t: int) -> Tensor:
    """Source position each target position copies (Gu et al. 2018, sec. 3.1).

    Target ``j`` of a row with real lengths ``S_b``, ``T_b`` copies
    ``round(j (S_b - 1) / (T_b - 1))`` (``torch.round``: halves go to even).
    Positions ``j >= T_b`` (padding) are clamped to ``S_b - 1``.

    Args:
        src_lengths: ``(B,)``; tgt_lengths: ``(B,)``; t: padded target length.

    Returns:
        ``(B, T)`` long indices into the source.
    """
    j = torch.arange(t, device=src_lengths.device, dtype=torch.float64).unsqueeze(0)  # (1, T)
    src_last = (src_lengths - 1).clamp(min=0).unsqueeze(1).double()  # (B, 1)
    ratio = src_last / (tgt_lengths - 1).clamp(min=1).unsqueeze(1).double()  # (B, 1)
    idx = torch.round(j * ratio)  # (B, T)
    return torch.minimum(idx, src_last).long()


def uniform_copy(src_embed: Tensor, src_pad_mask: Tensor, tgt_pad_mask: Tensor) -> Tensor:
    """Decoder inputs ``(B, T, D)`` copied from ``src_embed (B, S, D)`` by ``uniform_copy_indices``."""
    idx = uniform_copy_indices(src_pad_mask.sum(1), tgt_pad_mask.sum(1), tgt_pad_mask.size(1))  # (B, T)
    d = src_embed.size(-1)
    return src_embed.gather(1, idx.unsqueeze(-1).expand(-1, -1, d))  # (B, T) -> (B, T, D)


@dataclass(kw_only=True)
class NATConfig(TransformerConfig):
    """``TransformerConfig`` plus the NAT decoder's inputs and the length predictor.

    Fields:
        decoder_input: ``"mask"`` (Mask-Predict; needs ``mask_id``) or ``"copy"`` (NAT uniform copy).
        mask_id: the ``[MASK]`` token id (None in copy mode).
        length_mode, max_length, max_offset: see ``LengthPredictor``.
    """

    decoder_input: str = "mask"
    mask_id: int | None = hp(None, within=Range(0, 2**24))
    length_mode: str = "absolute"
    max_length: int = hp(256, within=Range(1, 2**20))
    max_offset: int = hp(64, within=Range(0, 2**20))


class NonAutoregressiveDecoder(nn.Module):
    """Decoder layers without a causal mask: every position sees every other.

    ``forward(memory (B, S, D), src_pad_mask (B, S), tgt_tokens (B, T), tgt_pad_mask (B, T),
    src_embed (B, S, D) | None, positions (B, T) bool | None, reveal (B, T) bool | None)
    -> logits (B, T, V)``, or ``(N, V)`` for the N ``positions`` given (``logits[positions]``,
    the other positions never projected). ``forward_embeddings`` runs the same stack on inputs
    the caller built (the CTC model's upsampled source).

    Args:
        cfg: sizes and switches (``TransformerConfig``: ``n_decoder_layers`` deep, the positional
            factory built with ``causal=False``, ``tie_output`` as in ``AutoregressiveDecoder``).
        vocab_size: the target vocabulary V.
        decoder_input: ``"copy"`` — inputs are uniformly copied source embeddings
            (``src_embed`` required, ``tgt_tokens`` ignored); ``"mask"`` — inputs are the
            embeddings of ``tgt_tokens``, whose masked positions hold the mask id.
        embedding: an existing ``nn.Embedding`` to share (joint vocabulary).
    """

    def __init__(self, cfg: TransformerConfig, vocab_size: int, decoder_input: str = "mask",
                 embedding: nn.Embedding | None = None):
        super().__init__()
        if decoder_input not in DECODER_INPUTS:
            raise ValueError(f"decoder_input must be one of {DECODER_INPUTS}, got {decoder_input!r}")
        self.d_model = d_model = cfg.d_model
        self.decoder_input = decoder_input
        if embedding is None and (decoder_input == "mask" or cfg.tie_output):
            embedding = nn.Embedding(vocab_size, d_model, padding_idx=cfg.pad_id)
        self.embedding = embedding
        self.embed_scale = math.sqrt(d_model) if cfg.scale_embeddings else 1.0
        self.positional = build_positional(cfg.positional, d_model, cfg.n_heads, cfg.max_len, causal=False)
        self.embedding_norm = embedding_norm(d_model, cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = layer_stack(DecoderLayer, cfg, cfg.n_decoder_layers)
        self.final_norm = final_norm(d_model, cfg.norm_first, cfg.norm_eps)
        self.output_proj = VocabProjection(d_model, vocab_size)
        if cfg.tie_output:
            self.output_proj.weight = self.embedding.weight

    def embed_tokens(self, tokens: Tensor) -> Tensor:
        """Scaled token embeddings ``(B, T) -> (B, T, D)``, as the encoder scales its own."""
        if self.embedding is None:
            raise ValueError("this decoder has no token embedding (copy inputs, untied, unshared): "
                             "it cannot read target tokens")
        return self.embedding(tokens) * self.embed_scale  # (B, T, D)

    def inputs(self, tgt_tokens: Tensor, tgt_pad_mask: Tensor, src_embed: Tensor | None,
               src_pad_mask: Tensor, reveal: Tensor | None = None) -> Tensor:
        """Decoder inputs ``(B, T, D)``: copied source embeddings or token embeddings; with
        ``reveal (B, T)`` bool, those positions hold the embedding of ``tgt_tokens`` instead
        (glancing training, Qian et al. 2021)."""
        if self.decoder_input == "mask":
            return self.embed_tokens(tgt_tokens)  # revealed positions already hold gold tokens
        if src_embed is None:
            raise ValueError("copy inputs need src_embed (EncoderOut.src_embed)")
        x = uniform_copy(src_embed, src_pad_mask, tgt_pad_mask)  # (B, T, D)
        if reveal is not None:
            x = torch.where(reveal.unsqueeze(-1), self.embed_tokens(tgt_tokens), x)  # (B, T, D)
        return x

    def forward_embeddings(self, x: Tensor, memory: Tensor, src_pad_mask: Tensor, tgt_pad_mask: Tensor,
                           positions: Tensor | None = None) -> Tensor:
        """The decoder stack on given inputs ``x (B, T, D)`` -> logits ``(B, T, V)`` or ``(N, V)``."""
        t = x.size(1)
        x = self.dropout(self.embedding_norm(self.positional(x)))
        self_mask = merge_masks(tgt_pad_mask)  # (B, 1, 1, T): padding only, no causal mask
        cross_mask = merge_masks(src_pad_mask)  # (B, 1, 1, S)
        bias = self.positional.attention_bias(t, t)
        for i, layer in enumerate(self.layers):
            x, _ = layer(x, memory, self_mask, cross_mask, bias, None, i, False)
        if positions is not None:
            x = x[positions]  # (B, T, D) -> (N, D): only the positions the caller scores
        return self.output_proj(self.final_norm(x))  # (B, T, D) -> (B, T, V), or (N, D) -> (N, V)

    def forward(self, memory: Tensor, src_pad_mask: Tensor, tgt_tokens: Tensor, tgt_pad_mask: Tensor,
                src_embed: Tensor | None = None, positions: Tensor | None = None,
                reveal: Tensor | None = None) -> Tensor:
        x = self.inputs(tgt_tokens, tgt_pad_mask, src_embed, src_pad_mask, reveal)  # (B, T, D)
        return self.forward_embeddings(x, memory, src_pad_mask, tgt_pad_mask, positions)


class LengthPredictor(nn.Module):
    """Classify the target length from mean-pooled encoder output (Ghazvininejad et al. 2019).

    ``forward(memory (B, S, D), src_pad_mask (B, S)) -> logits (B, L)``.

    Args:
        mode: ``"absolute"`` — class ``c`` is length ``c``, ``L = max_length``;
            ``"offset"`` — class ``c`` is length ``src_len + c - max_offset``,
            ``L = 2 max_offset + 1`` (Gu et al. 2018 predict fertility; an offset
            keeps the classes few and shared across sentence lengths).
    """

    def __init__(self, d_model: int, mode: str = "absolute", max_length: int = 256, max_offset: int = 64):
        super().__init__()
        if mode not in LENGTH_MODES:
            raise ValueError(f"mode must be one of {LENGTH_MODES}, got {mode!r}")
        self.mode = mode
        self.max_length = max_length
        self.max_offset = max_offset
        self.n_classes = max_length if mode == "absolute" else 2 * max_offset + 1
        self.proj = nn.Linear(d_model, self.n_classes)

    def forward(self, memory: Tensor, src_pad_mask: Tensor) -> Tensor:
        m = src_pad_mask.unsqueeze(-1).to(memory.dtype)  # (B, S, 1)
        pooled = (memory * m).sum(1) / m.sum(1).clamp(min=1)  # (B, S, D) -> (B, D)
        return self.proj(pooled)  # (B, L)

    def to_classes(self, lengths: Tensor, src_lengths: Tensor) -> Tensor:
        """Gold target lengths ``(B,)`` -> class ids ``(B,)`` (clamped into range), for the loss."""
        c = lengths if self.mode == "absolute" else lengths - src_lengths + self.max_offset
        return c.clamp(0, self.n_classes - 1).long()

    def to_lengths(self, classes: Tensor, src_lengths: Tensor) -> Tensor:
        """Class ids ``(B, ...)`` -> absolute lengths ``(B, ...)``, at least 1."""
        if self.mode == "offset":
            shape = (-1,) + (1,) * (classes.dim() - 1)
            classes = classes + src_lengths.view(shape) - self.max_offset  # (B, ...) + (B, 1...)
        return classes.clamp(min=1).long()

    def top_k_lengths(self, logits: Tensor, src_lengths: Tensor | None = None, k: int = 1) -> Tensor:
        """The ``k`` most probable absolute lengths ``(B, k)``, best first.

        Classes meaning a length below 1 are excluded rather than clamped, so the
        candidates stay distinct. ``src_lengths (B,)`` is needed in offset mode only.
        """
        b, n = logits.shape
        classes = torch.arange(n, device=logits.device).expand(b, n)  # (B, L)
        if self.mode == "offset":
            if src_lengths is None:
                raise ValueError("offset length classes need the source lengths (pass enc)")
            classes = classes + src_lengths.view(b, 1) - self.max_offset  # (B, L) absolute lengths
        valid = classes >= 1
        logits = logits.masked_fill(~valid, float("-inf"))
        k = min(k, int(valid.sum(1).min()))  # shrink k rather than return invalid lengths
        top = logits.topk(k, dim=-1).indices  # (B, k)
        return classes.gather(1, top).long()


class NonAutoregressiveModel(nn.Module):
    """Encoder + ``NonAutoregressiveDecoder`` + ``LengthPredictor`` (the ``decoding.api.NATModel`` API).

    Shapes:
        ``encode(src (B, S)) -> EncoderOut``; ``predict_length(enc) -> (B, L)``;
        ``decode(enc, tgt_tokens (B, T), tgt_pad_mask (B, T) | None) -> logits (B, T, V)``;
        ``forward(src, tgt_tokens, tgt_pad_mask) -> (logits (B, T, V), length_logits (B, L))``;
        ``top_k_lengths(length_logits, k, enc=None) -> (B, k)``; ``length_targets(tgt_lengths (B,), enc) -> (B,)``.

    Args:
        cfg: the sizes and switches (``NATConfig``).
    """

    config_class = NATConfig

    def __init__(self, cfg: NATConfig):
        super().__init__()
        tgt_vocab_size = target_vocab_size(cfg)
        if cfg.decoder_input == "mask" and cfg.mask_id is None:
            raise ValueError("decoder_input='mask' needs mask_id")
        self.cfg = cfg
        self.pad_id = cfg.pad_id
        self.mask_id = cfg.mask_id
        self.src_vocab_size = cfg.vocab_size
        self.vocab_size = tgt_vocab_size
        self.decoder_input = cfg.decoder_input
        self.encoder = TransformerEncoder(cfg, cfg.n_encoder_layers)
        self.decoder = NonAutoregressiveDecoder(
            cfg, self.vocab_size, cfg.decoder_input,
            embedding=self.encoder.embedding if cfg.share_embeddings else None,
        )
        self.length_predictor = LengthPredictor(cfg.d_model, cfg.length_mode, cfg.max_length, cfg.max_offset)
        init_weights(self, cfg.d_model)

    def encode(self, src: Tensor) -> EncoderOut:
        """``src (B, S)`` -> ``EncoderOut``; keeps ``src_embed`` in copy mode."""
        src_pad_mask = pad_mask(src, self.pad_id)
        src_embed = self.encoder.embed_tokens(src)  # (B, S, D)
        memory = self.encoder.forward_embeddings(src_embed, src_pad_mask)
        return EncoderOut(memory, src_pad_mask, src_embed if self.decoder_input == "copy" else None)

    def predict_length(self, enc: EncoderOut) -> Tensor:
        """Length logits ``(B, L)``; classes per ``LengthPredictor.mode``."""
        return self.length_predictor(enc.memory, enc.src_pad_mask)

    def top_k_lengths(self, length_logits: Tensor, k: int = 1, enc: EncoderOut | None = None) -> Tensor:
        """``(B, k)`` distinct absolute target lengths >= 1, most probable first.

        ``enc`` is required in offset mode (lengths are relative to the source).
        """
        src_lengths = None if enc is None else enc.src_pad_mask.sum(1)
        return self.length_predictor.top_k_lengths(length_logits, src_lengths, k)

    def lengths_from_logits(self, length_logits: Tensor, enc: EncoderOut | None = None) -> Tensor:
        """``(B,)`` the most probable absolute target length."""
        return self.top_k_lengths(length_logits, 1, enc)[:, 0]

    def length_targets(self, tgt_lengths: Tensor, enc: EncoderOut) -> Tensor:
        """Gold lengths ``(B,)`` -> length classes ``(B,)`` for cross-entropy on ``predict_length``."""
        return self.length_predictor.to_classes(tgt_lengths, enc.src_pad_mask.sum(1))

    def decode(self, enc: EncoderOut, tgt_tokens: Tensor, tgt_pad_mask: Tensor | None = None,
               positions: Tensor | None = None, reveal: Tensor | None = None) -> Tensor:
        """Logits ``(B, T, V)`` for every target position at once.

        ``tgt_pad_mask`` (True = real) defaults to ``tgt_tokens != pad_id``; in copy
        mode only it (the target lengths) matters, the tokens are ignored except at the
        ``reveal (B, T)`` positions (glancing training), whose inputs are their embeddings.
        With ``positions (B, T)`` bool, only those positions' logits ``(N, V)`` (training
        scores the masked positions alone).
        """
        if tgt_pad_mask is None:
            tgt_pad_mask = pad_mask(tgt_tokens, self.pad_id)
        return self.decoder(enc.memory, enc.src_pad_mask, tgt_tokens, tgt_pad_mask, enc.src_embed,
                            positions, reveal)

    def forward(self, src: Tensor, tgt_tokens: Tensor, tgt_pad_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(logits (B, T, V), length_logits (B, L))``."""
        enc = self.encode(src)
        return self.decode(enc, tgt_tokens, tgt_pad_mask), self.predict_length(enc)
