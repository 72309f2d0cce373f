"""Non-autoregressive translation with a CTC output layer: no length predictor.

The decoder reads the source embeddings upsampled ``upsample`` (λ) times and predicts one token
or a blank at each of the λ·S positions; the output is the argmax path with repeats merged and
blanks dropped (Libovický & Helcl 2018; Saharia et al. 2020; Gu & Kong 2021). Training sums over
every alignment of the target with ``F.ctc_loss`` (``tasks.ctc``).

The blank is the tokenizer's ``[MASK]`` id (``blank_id``): a CTC model never reads masks, the
token never occurs in text, and reusing it keeps the tokenizer, the vocabulary size and the tied
output projection unchanged (an extra output row would need an untied projection or a special
row outside the shared embedding).

``JointCTCEncoderDecoder`` is the autoregressive ``EncoderDecoder`` with a CTC projection of
its encoder output beside the decoder, for joint CTC-attention training (Watanabe et al. 2017,
"Hybrid CTC/attention", as ESPnet trains; ``tasks.translation``'s ``ctc_weight``).

Shape legend: B batch, S source length, U = λ·S upsampled (decoder) length, D = d_model,
V vocabulary (blank included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from transformer.models.nat import NonAutoregressiveDecoder
from transformer.models.transformer import (EncoderDecoder, EncoderOut, TransformerConfig, TransformerEncoder,
                                            VocabProjection, hp, init_weights, target_vocab_size)
from transformer.ranges import Range

UPSAMPLE_MODES = ("copy", "interpolate")


def check_upsample_mode(mode: str) -> str:
    """``mode`` if it is one of ``UPSAMPLE_MODES``, else a ``ValueError`` naming them."""
    if mode not in UPSAMPLE_MODES:
        raise ValueError(f"upsample_mode must be one of {UPSAMPLE_MODES}, got {mode!r}")
    return mode


def upsampled_lengths(src_lengths: Tensor, ratio: float) -> Tensor:
    """Decoder positions of each row, ``ceil(λ S_b)``: ``(B,)`` -> ``(B,)`` long. A whole λ gives
    ``λ S_b``; λ = 1.5 gives 3 positions for every 2 source tokens."""
    return torch.ceil(src_lengths.double() * ratio).long()


def upsample_positions(src_lengths: Tensor, ratio: float, u: int, mode: str = "copy") -> tuple[Tensor, Tensor]:
    """Fractional source position that each of the ``u`` decoder positions reads.

    ``copy``: position ``j`` reads source ``floor(j / λ)`` (each source embedding λ times, or for
    a fractional λ alternately ``floor(λ)`` and ``ceil(λ)`` times).
    ``interpolate``: the ``n_b = ceil(λ S_b)`` positions of row ``b`` spread evenly over
    ``0 .. S_b - 1`` (``j (S_b - 1) / (n_b - 1)``), read by linear interpolation. Both depend on
    the row's own length only, so padding never changes a real position's input.

    Args:
        src_lengths: ``(B,)`` real source lengths; ratio: λ; u: padded upsampled length.

    Returns:
        ``lower (B, U)`` long source indices and ``frac (B, U)`` weights of ``lower + 1``
        (all zero in copy mode), clamped into each row's real positions.
    """
    check_upsample_mode(mode)
    j = torch.arange(u, device=src_lengths.device, dtype=torch.float32).unsqueeze(0)  # (1, U)
    last = (src_lengths - 1).clamp(min=0).unsqueeze(1).float()  # (B, 1)
    if mode == "copy":
        pos = torch.div(j, ratio, rounding_mode="floor").expand(src_lengths.size(0), -1)  # (B, U)
    else:  # "interpolate", the only other choice check_upsample_mode allows
        span = (upsampled_lengths(src_lengths, ratio) - 1).clamp(min=1).unsqueeze(1).float()  # (B, 1)
        pos = j * last / span  # (B, U)
    pos = torch.minimum(pos, last)  # padding positions read the last real token (masked anyway)
    lower = pos.floor()
    frac = pos - lower
    return lower.long(), frac


def upsample(src_embed: Tensor, src_pad_mask: Tensor, ratio: float, mode: str = "copy") -> tuple[Tensor, Tensor]:
    """Source embeddings ``(B, S, D)`` -> decoder inputs ``(B, U, D)`` and their mask ``(B, U)``.

    ``U = ceil(λ S)``; row ``b`` has ``ceil(λ S_b)`` real positions (True = real), so source
    padding becomes upsampled padding.
    """
    s, d = src_embed.shape[1:]
    lengths = src_pad_mask.sum(1)  # (B,)
    u = math.ceil(s * ratio)
    lower, frac = upsample_positions(lengths, ratio, u, mode)  # (B, U), (B, U)
    upper = torch.minimum(lower + 1, (lengths - 1).clamp(min=0).unsqueeze(1))  # (B, U)
    frac = frac.unsqueeze(-1).to(src_embed.dtype)  # (B, U, 1)
    low = src_embed.gather(1, lower.unsqueeze(-1).expand(-1, -1, d))  # (B, U) -> (B, U, D)
    high = src_embed.gather(1, upper.unsqueeze(-1).expand(-1, -1, d))  # (B, U) -> (B, U, D)
    x = low * (1 - frac) + high * frac  # (B, U, D)
    real = torch.arange(u, device=lengths.device).unsqueeze(0) < upsampled_lengths(lengths, ratio).unsqueeze(1)  # (B, U)
    return x, real


@dataclass(kw_only=True)
class CTCConfig(TransformerConfig):
    """``TransformerConfig`` plus the blank and the upsampling.

    Fields:
        blank_id: the CTC blank (the tokenizer's ``[MASK]`` id; see the module docstring).
        upsample_ratio: λ >= 1, decoder positions per source token, whole or not (Gu & Kong 2021
            use 2 or 3); a target longer than ``ceil(λ S)`` (with its repeats) has no alignment.
        upsample_mode: ``copy`` (each source embedding λ times) or ``interpolate``.
    """

    blank_id: int | None = hp(None, within=Range(0, 2**24))
    upsample_ratio: float = hp(2, within=Range(1, 64))
    upsample_mode: str = "copy"


class CTCNonAutoregressiveModel(nn.Module):
    """Encoder + ``NonAutoregressiveDecoder`` over the upsampled source, scored with CTC.

    Shapes:
        ``encode(src (B, S)) -> EncoderOut`` (with ``src_embed``);
        ``decoder_mask(enc) -> (B, U)`` bool, True = the ``ceil(λ S_b)`` real upsampled positions;
        ``decode(enc, glance_tokens (B, U) | None, reveal (B, U) | None) -> logits (B, U, V)``;
        ``forward(src) -> (logits (B, U, V), decoder_mask (B, U))``.

    Args:
        cfg: the sizes and switches (``CTCConfig``).
    """

    config_class = CTCConfig

    def __init__(self, cfg: CTCConfig):
        super().__init__()
        tgt_vocab_size = target_vocab_size(cfg)
        if cfg.blank_id is None:
            raise ValueError("a CTC model needs blank_id (the tokenizer's [MASK] id)")
        if not cfg.upsample_ratio >= 1:
            raise ValueError(f"upsample_ratio must be >= 1, got {cfg.upsample_ratio}")
        check_upsample_mode(cfg.upsample_mode)
        self.cfg = cfg
        self.pad_id, self.blank_id = cfg.pad_id, cfg.blank_id
        self.mask_id = None  # decoding.api.NATModel: this model reads no target tokens
        # Vocabulary id of each output column when the projection is cut to a shortlist
        # (inference.shortlist.restrict_output); None: column i is id i.
        self.output_ids: Tensor | None = None
        self.src_vocab_size, self.vocab_size = cfg.vocab_size, tgt_vocab_size
        self.upsample_ratio, self.upsample_mode = cfg.upsample_ratio, cfg.upsample_mode
        self.encoder = TransformerEncoder(cfg, cfg.n_encoder_layers)
        self.decoder = NonAutoregressiveDecoder(
            cfg, tgt_vocab_size, "copy", embedding=self.encoder.embedding if cfg.share_embeddings else None,
        )
        init_weights(self, cfg.d_model)

    def encode(self, src: Tensor, src_lengths: Tensor | None = None) -> EncoderOut:
        """``src (B, S)`` -> ``EncoderOut`` with the scaled source embeddings kept; with an input
        front end, frames ``src (B, T, F)`` of ``src_lengths (B,)``, whose front end's vectors
        ``(B, T', D)`` the decoder upsamples as it would token embeddings."""
        src_embed, src_pad_mask = self.encoder.embed(src, src_lengths)  # (B, S, D), (B, S)
        memory = self.encoder.forward_embeddings(src_embed, src_pad_mask)
        return EncoderOut(memory, src_pad_mask, src_embed)

    def decoder_mask(self, enc: EncoderOut) -> Tensor:
        """``(B, U)`` bool: True at the ``ceil(λ S_b)`` real decoder positions of each row."""
        lengths = upsampled_lengths(enc.src_pad_mask.sum(1), self.upsample_ratio)  # (B,)
        u = math.ceil(enc.src_pad_mask.size(1) * self.upsample_ratio)
        return torch.arange(u, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, U)

    def decode(self, enc: EncoderOut, glance_tokens: Tensor | None = None, reveal: Tensor | None = None) -> Tensor:
        """Logits ``(B, U, V)`` at every upsampled position (padding positions included).

        With ``reveal (B, U)`` bool, those positions read the embedding of ``glance_tokens (B, U)``
        (an alignment's token or blank) instead of the upsampled source: glancing training.
        """
        x, real = upsample(enc.src_embed, enc.src_pad_mask, self.upsample_ratio, self.upsample_mode)  # (B, U, D)
        if reveal is not None:
            x = torch.where(reveal.unsqueeze(-1), self.decoder.embed_tokens(glance_tokens), x)  # (B, U, D)
        return self.decoder.forward_embeddings(x, enc.memory, enc.src_pad_mask, real)

    def forward(self, src: Tensor, src_lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(logits (B, U, V), decoder_mask (B, U))``."""
        enc = self.encode(src, src_lengths)
        return self.decode(enc), self.decoder_mask(enc)



class JointCTCEncoderDecoder(EncoderDecoder):
    """``EncoderDecoder`` plus a CTC head: a projection of every encoder position to the target
    vocabulary, whose CTC loss trained beside the decoder's cross-entropy pushes the encoder
    towards monotonic, per-position evidence of the target and so speeds up the decoder's
    learning to align with it (Watanabe et al. 2017; Kim, Hori & Watanabe 2017).

    The blank is ``pad_id``: no target holds padding and the decoder never emits it, so the head
    needs no extra vocabulary row (the CTC models reuse ``[MASK]`` because their projection is
    tied to an embedding; this one is not). Decoding is the decoder's alone (greedy, beam):
    the head shapes training only, and ``attention_model`` is the same network without it.

    Shapes: as ``EncoderDecoder``; ``ctc_logits(enc) -> (B, S, V)`` at every encoder position
    (padding included; ``enc.src_pad_mask (B, S)`` says which are real).

    Args:
        cfg: the sizes and switches (``TransformerConfig``), as ``EncoderDecoder``'s.
    """

    config_class = TransformerConfig

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.blank_id = cfg.pad_id
        self.ctc_proj = VocabProjection(cfg.d_model, self.vocab_size)
        init_weights(self.ctc_proj)  # the encoder-decoder's weights are drawn as EncoderDecoder(cfg) draws them

    def ctc_logits(self, enc: EncoderOut) -> Tensor:
        """CTC scores of every encoder position: ``memory (B, S, D) -> (B, S, V)``."""
        return self.ctc_proj(enc.memory)

    def attention_model(self) -> EncoderDecoder:
        """An ``EncoderDecoder`` holding this model's encoder and decoder (the same modules, not
        copies) without the CTC head: what decodes, and what an export writes."""
        plain = EncoderDecoder.__new__(EncoderDecoder)
        nn.Module.__init__(plain)
        plain.cfg, plain.pad_id = self.cfg, self.pad_id
        plain.src_vocab_size, plain.vocab_size = self.src_vocab_size, self.vocab_size
        plain.encoder, plain.decoder = self.encoder, self.decoder
        return plain
