"""The Transformer (Vaswani et al. 2017), top to bottom as the paper builds it.

* ``TransformerConfig`` (``models.config``) — every size and switch of the encoder and decoder,
  declared once with its type and range; the models take one config.
* ``EncoderDecoder`` — the whole translation model (sec. 3, Figure 1): encoder, decoder, the
  source and target embeddings (shared or not) and the decoding API that search uses.
* ``TransformerEncoder`` and ``AutoregressiveDecoder`` — the two stacks (sec. 3.1): token
  embeddings ×√d_model (sec. 3.4), positions (``modules.positional``, sec. 3.5), N layers and,
  for the decoder, the output projection to the vocabulary (``VocabProjection``).
* ``EncoderLayer`` and ``DecoderLayer`` (sec. 3.1) — self-attention (and for the decoder masked
  self-attention plus cross-attention over the encoder output, ``modules.attention``) and the
  feed-forward block, each wrapped in a residual connection and a LayerNorm placed by the
  ``norm_first`` switch:

  - post-norm (the paper): ``x = LN(x + Dropout(Sublayer(x)))``;
  - pre-norm (Wang et al. 2019; Xiong et al. 2020): ``x = x + Dropout(Sublayer(LN(x)))``,
    stable without warm-up tricks; the stack then needs a final LayerNorm.
* ``FeedForward`` — the position-wise feed-forward network (sec. 3.3).
* ``init_weights`` and ``count_parameters`` — initialisation and parameter counting, for this
  file's ``EncoderDecoder`` and for the NAT, CTC, tagger and classifier models that build on
  these stacks (``models.nat``, ``models.ctc``, ``models.tagger``, ``models.classifier``).

Masks are boolean, True = may attend (``modules.attention``). Decoder layers serve both
teacher forcing and incremental decoding: given a ``KVCache`` they append this step's
self-attention keys/values and read the cross-attention keys/values from it instead of
projecting ``memory``.

Shape legend: B batch (N search rows during decoding: sentences × beams), S source length,
T target length, t new steps, D = d_model, H heads, V target vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.models.config import (
    EncoderConfig,
    InputHook,
    PositionalFactory,
    StackConfig,
    TransformerConfig,
    hp,
)
from transformer.modules.attention import (ATTENTION_SCORES, AdditiveAttention, EdgeMask, LocalWindow,
                                          MultiHeadAttention, PackedRows, causal_mask, grid_window_mask, packable,
                                          merge_masks, pad_mask, padding_bias)
from transformer.modules.drop_path import DropPath, depth_rates
from transformer.modules.kv_cache import KVCache, StaticKVCache
from transformer.modules.positional import SinusoidalPositionalEncoding, build_positional

# ----------------------------------------------------------------------------- the model
class EncoderDecoder(nn.Module):
    """Encoder + autoregressive decoder with the decoding API of ``decoding.api.Seq2SeqModel``.

    Shapes:
        ``forward(src (B, S), tgt_in (B, T)) -> logits (B, T, V)`` (teacher forcing;
        causal and padding masks are built here from ``pad_id``);
        ``encode(src) -> EncoderOut``; with an input front end (``cfg.frontend``) ``src`` is
        frames ``(B, T, F)`` and ``forward``/``encode`` also take ``src_lengths (B,)``; ``init_cache(enc) -> KVCache``;
        ``decode_step(tokens (N, t), enc, cache) -> (log_probs (N, V), cache)``.

    Args:
        cfg: the sizes and switches (``TransformerConfig``).

    Attributes: ``cfg``; ``pad_id``; ``vocab_size`` (target, i.e. the logits' V);
    ``src_vocab_size``.
    """

    config_class = TransformerConfig

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.pad_id = cfg.pad_id
        self.src_vocab_size = cfg.vocab_size
        self.vocab_size = target_vocab_size(cfg)
        self.encoder = TransformerEncoder(cfg, cfg.n_encoder_layers)
        self.decoder = AutoregressiveDecoder(
            cfg, self.vocab_size, embedding=self.encoder.embedding if cfg.share_embeddings else None,
        )
        init_weights(self, cfg.d_model)

    def encode(self, src: Tensor, src_lengths: Tensor | None = None) -> EncoderOut:
        """``src (B, S)`` -> ``EncoderOut(memory (B, S, D), src_pad_mask (B, S))``; with an input
        front end, frames ``src (B, T, F)`` of ``src_lengths (B,)`` -> ``(B, T', D)``."""
        if self.encoder.frontend is not None:
            x, src_pad_mask = self.encoder.embed(src, src_lengths)  # (B, T', D), (B, T')
            return EncoderOut(self.encoder.forward_embeddings(x, src_pad_mask), src_pad_mask)
        src_pad_mask = pad_mask(src, self.pad_id)
        return EncoderOut(self.encoder(src, src_pad_mask), src_pad_mask)

    def forward(self, src: Tensor, tgt_in: Tensor, src_lengths: Tensor | None = None,
                enc: EncoderOut | None = None) -> Tensor:
        """Teacher-forced logits ``(B, T, V)`` (``src_lengths``: of frames, see ``encode``;
        ``enc``: ``encode(src)`` computed already, which ``src`` is then not encoded again)."""
        enc = self.encode(src, src_lengths) if enc is None else enc
        return self.decoder(tgt_in, enc.memory, enc.src_pad_mask, self._target_mask(tgt_in))

    def decoder_states(self, src: Tensor, tgt_in: Tensor, src_lengths: Tensor | None = None,
                       enc: EncoderOut | None = None) -> Tensor:
        """Teacher-forced decoder output states ``(B, T, D)``, before the vocabulary projection
        (``enc``: as for ``forward``)."""
        enc = self.encode(src, src_lengths) if enc is None else enc
        return self.decoder.states(tgt_in, enc.memory, enc.src_pad_mask, self._target_mask(tgt_in))

    def _target_mask(self, tgt_in: Tensor) -> Tensor | None:
        """The target padding mask ``(B, T)`` of teacher forcing, None when
        ``mask_target_padding`` is off."""
        return pad_mask(tgt_in, self.pad_id) if self.cfg.mask_target_padding else None

    def project(self, states: Tensor) -> Tensor:
        """Vocabulary scores of decoder output states: ``(..., D) -> (..., V)``; ``forward`` is
        ``project(decoder_states(src, tgt_in))``."""
        return self.decoder.project(states)

    def init_cache(self, enc: EncoderOut, static: bool = False, beams: int = 1) -> KVCache:
        """A fresh cache holding every decoder layer's cross-attention K/V for ``enc``
        (``static``: a ``StaticKVCache``, whose shapes do not change from step to step), for
        ``beams`` decoder rows per sentence of ``enc`` (beam search), which share them."""
        return self.decoder.init_cache(enc.memory, enc.src_pad_mask, static, beams)

    def decode_step(self, tokens: Tensor, enc: EncoderOut, cache: KVCache) -> tuple[Tensor, KVCache]:
        """Log-probabilities ``(N, V)`` of the token after ``tokens``; ``enc`` has ``N /
        cache.group`` rows (one per sentence in beam search).

        ``tokens (N, t)`` are the tokens not yet in the cache (search passes one per row per
        call, BOS first); they sit at positions ``cache.length .. cache.length + t - 1`` and
        their keys/values are appended to ``cache``."""
        logits, cache = self.decode_step_logits(tokens, enc, cache)  # (N, V)
        return torch.log_softmax(logits.float(), dim=-1), cache

    def decode_step_logits(self, tokens: Tensor, enc: EncoderOut, cache: KVCache) -> tuple[Tensor, KVCache]:
        """As ``decode_step`` but unnormalised scores ``(N, V)``: greedy search without scores
        needs only their argmax, which skips a softmax over the vocabulary at every step."""
        states, cache = self.decode_step_states(tokens, enc, cache)  # (N, D)
        return self.project(states), cache

    def decode_step_states(self, tokens: Tensor, enc: EncoderOut, cache: KVCache) -> tuple[Tensor, KVCache]:
        """As ``decode_step`` but the last position's output states ``(N, D)``, before the
        vocabulary projection (``project``, or ``project_ids`` for a few of its scores)."""
        states, cache = self.decoder.step_states(tokens, enc.src_pad_mask, cache)  # (N, t, D)
        return states[:, -1], cache

    def project_ids(self, states: Tensor, ids: Tensor) -> Tensor:
        """The vocabulary scores of ``ids (N, m)`` only, in fp32 whatever the weights' dtype:
        ``(N, D) -> (N, m)``. A bf16 model's ``project`` rounds each score to 8 bits of mantissa
        (12 by up to 0.03), which reorders near-ties: beam search rescores its best this way."""
        return self.decoder.project_ids(states, ids)


# ----------------------------------------------------------------------------- the encoder
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


class TransformerEncoder(nn.Module):
    """Token embedding ×√d_model, positional encoding, dropout, N self-attention layers; the
    config's switches add a token-type embedding and a LayerNorm before the dropout and drop the
    scaling (BERT's input: ``Dropout(LN(token + position + type))``).

    Shapes: ``forward(src (B, S), src_pad_mask (B, S) | None) -> memory (B, S, D)``,
    or ``(memory, [weights (B, H, S, S)] * n_layers)`` with ``need_weights=True``.
    ``forward_embeddings`` takes ``(B, S, D)`` vectors instead of ids.

    Args:
        cfg: sizes and switches (``StackConfig``; the positional factory gets ``causal=False``,
            ``NoPositionalEncoding`` for none at all).
        n_layers: the depth (``cfg.n_encoder_layers`` or ``cfg.n_layers``).
        embedding: an existing ``nn.Embedding`` to share (joint vocabulary).
        residual, feed_forward, layer_norm, attention_score, attention_projections, score_bias: the
            ``EncoderLayer`` switches of every layer; without ``layer_norm`` no final LayerNorm either.
        drop_path: stochastic depth's rate at the top layer, rising from 0 at the bottom (``depth_rates``).
    """

    def __init__(self, cfg: StackConfig, n_layers: int, embedding: nn.Embedding | None = None,
                 residual: bool = True, feed_forward: bool = True, layer_norm: bool = True,
                 attention_score: str = "dot", attention_projections: bool = True, score_bias: bool = False,
                 drop_path: float = 0.0):
        super().__init__()
        self.d_model = d_model = cfg.d_model
        self.pad_id = cfg.pad_id
        self.window = cfg.window
        # An input kind other than text has a front end instead of the token embedding.
        self.frontend = cfg.frontend(d_model=d_model) if cfg.frontend is not None else None
        self.embedding = None if self.frontend is not None else embedding if embedding is not None else \
            nn.Embedding(cfg.vocab_size, d_model, padding_idx=cfg.pad_id)
        self.embed_scale = math.sqrt(d_model) if cfg.scale_embeddings else 1.0
        self.positional = build_positional(cfg.positional, d_model, cfg.n_heads, cfg.max_len, causal=False)
        self.type_embedding = nn.Embedding(cfg.type_vocab_size, d_model) if cfg.type_vocab_size else None
        self.embedding_norm = embedding_norm(d_model, cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = layer_stack(EncoderLayer, cfg, n_layers, drop_path, residual=residual, feed_forward=feed_forward,
                                  layer_norm=layer_norm, attention_score=attention_score,
                                  attention_projections=attention_projections, score_bias=score_bias)
        self.final_norm = final_norm(d_model, cfg.norm_first and layer_norm, cfg.norm_eps)

    def embed_tokens(self, src: Tensor) -> Tensor:
        """``(B, S)`` ids -> ``(B, S, D)``, scaled by √d_model (Vaswani et al. 2017, sec. 3.4)
        unless ``scale_embeddings`` is off."""
        return self.embedding(src) * self.embed_scale

    def embed(self, src: Tensor, src_lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The input front end: token ids ``(B, S)`` through the embedding table (padding from
        ``pad_id``), or a front end's frames ``(B, T, F)`` of ``src_lengths (B,)`` -> vectors
        ``(B, S', D)`` and ``src_pad_mask (B, S')`` (True = real)."""
        if self.frontend is not None:
            if src_lengths is None:
                src_lengths = torch.full(src.shape[:1], src.size(1), dtype=torch.long, device=src.device)
            x, mask = self.frontend(src, src_lengths)  # (B, T', D), (B, T')
            return x * self.embed_scale, mask
        return self.embed_tokens(src), pad_mask(src, self.pad_id)  # (B, S, D), (B, S)

    def forward_embeddings(self, x: Tensor, src_pad_mask: Tensor | None = None, need_weights: bool = False,
                           attn_mask: Tensor | None = None):
        """Encode ``(B, S, D)`` vectors (positions are added here) -> memory ``(B, S, D)``.

        ``attn_mask``: a structural mask ``(S, S)`` or ``(B, S, S)`` bool (True = may attend),
        ANDed with the padding mask in every layer (a graph's ``adjacency_mask``), or an
        ``EdgeMask``, the same adjacency computed along its edges; not with a local ``window``."""
        s = x.size(1)
        x = self.positional(x)
        if self.type_embedding is not None:
            x = x + self.type_embedding.weight[0]  # every piece is of type 0: (B, S, D) + (D,)
        x = self.dropout(self.embedding_norm(x))
        if attn_mask is not None and self.window is not None:
            raise ValueError("an attention mask and a local window both restrict attention: give one")
        grid = getattr(self.frontend, "grid", None)  # a 2-D input (image patches): its window is 2-D
        if isinstance(attn_mask, EdgeMask):  # a graph's edges: attention runs along them (no padding to add)
            mask, bias = attn_mask, self.positional.attention_bias(s, s)
            if bias is not None:
                raise ValueError("a graph's EdgeMask takes no position bias: use NoPositionalEncoding")
        elif self.window is None:
            # (B, 1, 1|S, S), (1, H, S, S)
            mask, bias = merge_masks(src_pad_mask, attn_mask), self.positional.attention_bias(s, s)
        elif grid is not None:
            band = grid_window_mask(*grid, self.window, s, device=x.device)  # (S, S)
            mask, bias = merge_masks(src_pad_mask, band), self.positional.attention_bias(s, s)  # (B, 1, S, S)
        else:  # truncated attention is described, not built as (S, S): attention computes it block by block
            mask, bias = LocalWindow(s, self.window, src_pad_mask, self.positional.attention_bias), None
        rows = None
        if src_pad_mask is not None and not need_weights and packable():
            # Inference only computes the real positions: everything but attention is position-wise,
            # and padding is often most of a batch of mixed lengths. States at padding are zeros.
            # The mask becomes an additive bias once here rather than in every layer.
            mask, pad_bias = padding_bias(mask, x.dtype)
            bias = pad_bias if bias is None else bias if pad_bias is None else bias + pad_bias  # (B|1, H|1, S|1, S)
            rows = PackedRows(src_pad_mask)
            rows = None if rows.fraction == 1.0 else rows
            x = x if rows is None else rows.pack(x)  # (B, S, D) -> (N, D)
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask, bias, need_weights, rows)
            weights.append(w)
        x = self.final_norm(x)
        x = x if rows is None else rows.unpack(x)  # (N, D) -> (B, S, D)
        return (x, weights) if need_weights else x

    def forward(self, src: Tensor, src_pad_mask: Tensor | None = None, need_weights: bool = False,
                src_lengths: Tensor | None = None):
        """``src (B, S)`` -> memory ``(B, S, D)``; padding mask from ``pad_id`` when not given.
        With a front end, ``src (B, T, F)`` frames of ``src_lengths`` -> ``(B, T', D)``."""
        if self.frontend is not None:
            x, src_pad_mask = self.embed(src, src_lengths)
            return self.forward_embeddings(x, src_pad_mask, need_weights)
        if src_pad_mask is None:
            src_pad_mask = pad_mask(src, self.pad_id)
        return self.forward_embeddings(self.embed_tokens(src), src_pad_mask, need_weights)


# ----------------------------------------------------------------------------- the decoder
class AutoregressiveDecoder(nn.Module):
    """Masked self-attention + cross-attention + FFN layers and an output projection.

    Shapes:
        ``forward(tgt_in (B, T), memory (B, S, D), src_pad_mask (B, S), tgt_pad_mask (B, T) | None)
        -> logits (B, T, V)`` (teacher forcing);
        ``init_cache(memory (N / beams, S, D), beams=1) -> KVCache`` (cross K/V projected once,
        shared by the ``beams`` rows of a sentence);
        ``step_states(tokens (N, t), src_pad_mask (N / beams, S), cache) -> (states (N, t, D), cache)``
        where the new tokens sit at positions ``cache.length ..``; ``project(states)``: logits.

    Args:
        cfg: sizes and switches (``TransformerConfig``: ``n_decoder_layers`` deep; the positional
            factory gets ``causal=True``; ``tie_output``: the output projection uses the target
            embedding matrix, Press & Wolf 2017; Vaswani et al. 2017, sec. 3.4).
        vocab_size: the target vocabulary V.
        embedding: an existing ``nn.Embedding`` to share (joint vocabulary).
    """

    def __init__(self, cfg: TransformerConfig, vocab_size: int, embedding: nn.Embedding | None = None):
        super().__init__()
        self.d_model = d_model = cfg.d_model
        self.pad_id = cfg.pad_id
        self.vocab_size = vocab_size
        self.embedding = embedding if embedding is not None else nn.Embedding(vocab_size, d_model,
                                                                              padding_idx=cfg.pad_id)
        self.embed_scale = math.sqrt(d_model) if cfg.scale_embeddings else 1.0
        self.positional = build_positional(cfg.positional, d_model, cfg.n_heads, cfg.max_len, causal=True)
        self.embedding_norm = embedding_norm(d_model, cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = layer_stack(DecoderLayer, cfg, cfg.n_decoder_layers)
        self.final_norm = final_norm(d_model, cfg.norm_first, cfg.norm_eps)
        self.output_proj = VocabProjection(d_model, vocab_size)
        if cfg.tie_output:
            self.output_proj.weight = self.embedding.weight
        self.output_bias = nn.Parameter(torch.zeros(vocab_size)) if cfg.output_bias else None
        self.memory_positional = (SinusoidalPositionalEncoding(d_model, max_len=cfg.max_len) if cfg.memory_positions
                                  else nn.Identity())  # the encoder output as cross-attention reads it

    def _states(self, tokens, memory, src_pad_mask, tgt_pad_mask, cache, need_weights):
        """Decoder output states ``(B, t, D)`` (after the final norm) and per-layer weights."""
        offset = cache.offset if cache is not None else 0  # an int, or a static cache's tensor
        t = tokens.size(1)
        x = self.embedding(tokens) * self.embed_scale  # (B, t, D)
        x = self.dropout(self.embedding_norm(self.positional(x, offset)))
        if cache is None:
            t_k, self_mask = t, causal_mask(t, t, device=x.device)
        else:
            # The cache says which keys the new queries see: with one new query, every cached
            # key and no mask (SDPA's fastest kernel); a static cache masks its unfilled steps.
            t_k, self_mask = cache.self_attention_keys(t, x.device)
        self_mask = merge_masks(tgt_pad_mask, self_mask)  # (B|1, 1, t, T) or None
        if cache is not None and cache.source_mask_set:
            cross_mask = None  # the layers read the cache's additive source bias instead
        else:
            cross_mask = merge_masks(src_pad_mask)  # (B, 1, 1, S)
        bias = self.positional.attention_bias(t, t_k, offset)  # (1, H, t, T) or None
        memory = None if memory is None else self.memory_positional(memory)  # (B, S, D)
        weights = []
        for i, layer in enumerate(self.layers):
            x, w = layer(x, memory, self_mask, cross_mask, bias, cache, i, need_weights)
            weights.append(w)
        return self.final_norm(x), weights

    def project(self, states: Tensor) -> Tensor:
        """Vocabulary scores of output states: ``(..., D) -> (..., V)``, plus ``output_bias``
        when the config has one."""
        logits = self.output_proj(states)
        return logits if self.output_bias is None else logits + self.output_bias

    def project_ids(self, states: Tensor, ids: Tensor) -> Tensor:
        """``project``'s scores of ``ids (N, m)`` only, in fp32: ``(N, D) -> (N, m)``."""
        scores = (self.output_proj.weight[ids].float() @ states.float().unsqueeze(-1)).squeeze(-1)
        return scores if self.output_bias is None else scores + self.output_bias[ids].float()

    def states(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor | None = None,
               tgt_pad_mask: Tensor | None = None) -> Tensor:
        """Teacher-forced output states ``(B, T, D)``: ``forward`` is ``output_proj`` of these."""
        return self._states(tgt_in, memory, src_pad_mask, tgt_pad_mask, None, False)[0]

    def forward(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor | None = None,
                tgt_pad_mask: Tensor | None = None, need_weights: bool = False):
        """Teacher-forced logits ``(B, T, V)``; with ``need_weights`` also per-layer
        ``(self_w (B, H, T, T), cross_w (B, H, T, S))``.

        Every position is projected to the vocabulary, padding included: the shapes depend only
        on ``(B, T)``, never on the data, so a compiled training step is reused across batches
        (the loss ignores padded positions).
        """
        states, weights = self._states(tgt_in, memory, src_pad_mask, tgt_pad_mask, None, need_weights)
        return (self.project(states), weights) if need_weights else self.project(states)

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor | None = None, static: bool = False,
                   beams: int = 1, cross: list[tuple[Tensor, Tensor]] | None = None) -> KVCache:
        """An empty self-attention cache plus every layer's cross K/V ``(B, H, S, d_head)``
        (``cross``: ``cross_kv(memory)`` computed already) and, given ``src_pad_mask (B, S)``, the
        source padding as an additive bias. ``static``: a ``StaticKVCache`` (fixed shapes, for a
        compiled step). ``beams``: decoder rows per source row, which share its cross K/V."""
        cache = (StaticKVCache if static else KVCache).empty(len(self.layers), group=beams)
        cache.set_source_mask(src_pad_mask, memory.dtype)
        for i, kv in enumerate(cross or self.cross_kv(memory, src_pad_mask)):
            cache.set_cross(i, *kv)
        return cache

    def cross_kv(self, memory: Tensor, src_pad_mask: Tensor | None = None) -> list[tuple[Tensor, Tensor]]:
        """Every layer's cross-attention keys and values of ``memory``, each ``(B, H, S, d_head)``."""
        memory = self.memory_positional(memory)  # (B, S, D)
        rows = PackedRows(src_pad_mask) if src_pad_mask is not None and packable() else None
        if rows is None or rows.fraction == 1.0:
            return [layer.cross_attn.project_kv(memory) for layer in self.layers]
        real = rows.pack(memory)  # (N_real, D): padded keys are masked: only real ones are projected
        return [layer.cross_attn.project_packed(real, rows, kv_only=True) for layer in self.layers]

    def step_states(self, tokens: Tensor, src_pad_mask: Tensor | None, cache: KVCache) -> tuple[Tensor, KVCache]:
        """Output states ``(N, t, D)`` for new ``tokens (N, t)`` (``project`` makes them logits);
        their self K/V are appended to ``cache``."""
        states, _ = self._states(tokens, None, src_pad_mask, None, cache, False)
        return states, cache


class VocabProjection(nn.Linear):
    """The output projection from model width to vocabulary scores, ``Linear(D, V, bias=False)``:
    ``(..., D) -> (..., V)``; its ``weight (V, D)`` may be tied to a token embedding.

    A class of its own so that code which treats the vocabulary projection differently (the CPU
    fast paths in ``transformer.accel``) finds it by type, not by attribute name.
    """

    def __init__(self, d_model: int, vocab_size: int, device=None, dtype=None):
        super().__init__(d_model, vocab_size, bias=False, device=device, dtype=dtype)


# ----------------------------------------------------------------------------- the layers
class EncoderLayer(nn.Module):
    """Self-attention + FFN, each in a residual connection with a LayerNorm: post-norm
    ``LN(x + Dropout(sublayer(x)))`` (Vaswani et al. 2017) or, with ``norm_first``, pre-norm
    ``x + Dropout(sublayer(LN(x)))`` (Xiong et al. 2020).

    Three switches take parts away, down to a graph attention layer (Velickovic et al. 2018,
    eq. 5: ``ELU(attention(x))``, no residual, no norm, no FFN): ``residual=False`` replaces
    ``x + sublayer`` by the sublayer's output; ``feed_forward=False`` leaves the FFN out and puts
    ``activation`` after attention instead (the layer's one non-linearity); ``layer_norm=False``
    makes the LayerNorms identities. ``attention_score`` picks the attention class
    (``modules.attention.ATTENTION_SCORES``): ``"dot"`` (scaled dot product) or ``"additive"``
    (GAT's score, ``AdditiveAttention``); ``attention_projections=False`` (additive only) takes its
    input as ``W x`` with no ``W_o``, GAT's layer exactly (``score_bias``: with the authors' score biases).
    ``drop_path``: in training, each residual branch is dropped for a whole sample at this rate
    (stochastic depth, Huang et al. 2016; ``modules.drop_path``).

    ``forward(x (B, S, D), mask (B, 1, 1|S, S) bool | LocalWindow | None, attn_bias (1, H, S, S) | None,
    need_weights, rows) -> (x (B, S, D), weights (B, H, S, S) | None)``; given ``rows``
    (``modules.attention.PackedRows``), ``x`` is ``(N, D)``, the batch's real positions only.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, activation: str = "relu",
                 norm_first: bool = False, norm_eps: float = 1e-5, residual: bool = True,
                 feed_forward: bool = True, layer_norm: bool = True, attention_score: str = "dot",
                 attention_projections: bool = True, score_bias: bool = False, drop_path: float = 0.0):
        super().__init__()
        self.norm_first = norm_first
        self.residual = residual
        if attention_score not in ATTENTION_SCORES:
            raise ValueError(f"attention_score must be one of {sorted(ATTENTION_SCORES)}, got {attention_score!r}")
        if attention_projections:
            self.self_attn = ATTENTION_SCORES[attention_score](d_model, n_heads, dropout)
        elif attention_score == "additive":
            self.self_attn = AdditiveAttention(d_model, n_heads, dropout, projections=False, score_bias=score_bias)
        else:
            raise ValueError("attention_projections=False is GAT's layer: it needs attention_score='additive'")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.ffn = FeedForward(d_model, d_ff, dropout, activation) if feed_forward else None
        self.activation = None if feed_forward else ACTIVATIONS[activation]
        norm = (lambda: nn.LayerNorm(d_model, eps=norm_eps)) if layer_norm else nn.Identity
        self.norm_1 = norm()
        self.norm_2 = norm() if feed_forward else nn.Identity()
        self.dropout = nn.Dropout(dropout)
        self.drop_path = DropPath(drop_path)

    def _self_attention(self, h: Tensor, mask, attn_bias, need_weights,
                        rows: PackedRows | None = None) -> tuple[Tensor, Tensor | None]:
        if rows is None:
            out, w = self.self_attn(h, h, h, mask, attn_bias, need_weights)
        else:
            q, k, v = self.self_attn.project_packed(h, rows)  # (N, D) -> (B, H, S, d_head) each
            out, w = self.self_attn.attend(q, k, v, mask, attn_bias, need_weights)
            out = rows.pack(out)  # (B, S, D) -> (N, D)
        return self.dropout(out), w

    def _add(self, x: Tensor, sublayer: Tensor, rows: PackedRows | None) -> Tensor:
        return x + self.drop_path(sublayer, rows) if self.residual else sublayer

    def forward(self, x: Tensor, mask: Tensor | None = None, attn_bias: Tensor | None = None,
                need_weights: bool = False, rows: PackedRows | None = None) -> tuple[Tensor, Tensor | None]:
        if self.norm_first:
            a, w = self._self_attention(self.norm_1(x), mask, attn_bias, need_weights, rows)
            x = self._add(x, a, rows)
            if self.ffn is not None:
                x = self._add(x, self.dropout(self.ffn(self.norm_2(x))), rows)
        else:
            a, w = self._self_attention(x, mask, attn_bias, need_weights, rows)
            x = self.norm_1(self._add(x, a, rows))
            if self.ffn is not None:
                x = self.norm_2(self._add(x, self.dropout(self.ffn(x)), rows))
        if self.ffn is None:
            x = self.activation(x)
        return x, w


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over ``memory``, FFN; residuals and LayerNorms
    placed by ``norm_first`` as in ``EncoderLayer``.

    ``forward(x (B, t, D), memory (B, S, D) | None, self_mask (B|1, 1, t, T) bool,
    cross_mask (B, 1, 1|t, S) bool, self_bias (1, H, t, T) | None, cache, layer_idx,
    need_weights) -> (x (B, t, D), (self_w (B, H, t, T), cross_w (B, H, t, S)) | None)``.
    ``T = t`` without a cache, ``T = cache.length + t`` with one.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, activation: str = "relu",
                 norm_first: bool = False, norm_eps: float = 1e-5):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm_1 = nn.LayerNorm(d_model, eps=norm_eps)
        self.norm_2 = nn.LayerNorm(d_model, eps=norm_eps)
        self.norm_3 = nn.LayerNorm(d_model, eps=norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor | None = None, self_mask: Tensor | None = None,
                cross_mask: Tensor | None = None, self_bias: Tensor | None = None,
                cache: KVCache | None = None, layer_idx: int = 0, need_weights: bool = False):
        if self.norm_first:
            a, sw = self._self_attention(self.norm_1(x), self_mask, self_bias, cache, layer_idx, need_weights)
            x = x + a
            c, cw = self._cross_attention(self.norm_2(x), memory, cross_mask, cache, layer_idx, need_weights)
            x = x + c
            x = x + self.dropout(self.ffn(self.norm_3(x)))
        else:
            a, sw = self._self_attention(x, self_mask, self_bias, cache, layer_idx, need_weights)
            x = self.norm_1(x + a)
            c, cw = self._cross_attention(x, memory, cross_mask, cache, layer_idx, need_weights)
            x = self.norm_2(x + c)
            x = self.norm_3(x + self.dropout(self.ffn(x)))
        return x, ((sw, cw) if need_weights else None)

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
        if k.size(0) != q.size(0):
            out, w = self._shared_source_attention(q, k, v, mask, bias, need_weights)
        else:
            out, w = self.cross_attn.attend(q, k, v, mask, bias, need_weights)
        return self.dropout(out), w

    def _shared_source_attention(self, q, k, v, mask, bias, need_weights):
        """Cross-attention where ``g`` consecutive rows of ``q (N, H, t, d_head)`` share one
        source row of ``k, v (N / g, H, S, d_head)`` (the beams of a sentence, ``KVCache.group``):
        the g rows' queries become ``g * t`` queries of their source row, so its keys and values
        are read once. The same scores as attending row by row; ``(out (N, t, D), weights
        (N, H, t, S) | None)``."""
        n, h, t, d = q.shape
        b = k.size(0)
        q = q.reshape(b, n // b, h, t, d).transpose(1, 2).reshape(b, h, -1, d)  # (B, H, g * t, d_head)
        out, w = self.cross_attn.attend(q, k, v, mask, bias, need_weights)  # (B, g * t, D)
        if w is not None:
            w = w.reshape(b, h, n // b, t, -1).transpose(1, 2).reshape(n, h, t, -1)  # (N, H, t, S)
        return out.reshape(n, t, -1), w


def target_vocab_size(cfg: TransformerConfig) -> int:
    """The target vocabulary an encoder-decoder builds (the source's when ``tgt_vocab_size`` is
    not given); shared embeddings need one joint vocabulary, else a ``ValueError`` says how to
    fix the config."""
    size = cfg.vocab_size if cfg.tgt_vocab_size is None else cfg.tgt_vocab_size
    if cfg.share_embeddings and size != cfg.vocab_size:
        raise ValueError(f"share_embeddings needs one joint vocabulary, got {cfg.vocab_size} source vs "
                         f"{size} target ids; set share_embeddings=false")
    return size


def final_norm(d_model: int, norm_first: bool, eps: float = 1e-5) -> nn.Module:
    """A stack's last step: a LayerNorm after pre-norm layers, whose output is not normalised
    otherwise (Xiong et al. 2020); nothing (``nn.Identity``, no weights) after post-norm ones."""
    return nn.LayerNorm(d_model, eps=eps) if norm_first else nn.Identity()


def layer_stack(layer: type[nn.Module], cfg: StackConfig, n_layers: int, drop_path: float = 0.0,
                **switches: bool | str) -> nn.ModuleList:
    """``n_layers`` layers of class ``layer`` (:class:`EncoderLayer` or :class:`DecoderLayer`),
    each of ``cfg``'s widths, dropout, activation and norm placement, and an encoder layer's switches;
    ``drop_path`` (encoder layers): stochastic depth, layer ``i`` at ``depth_rates(drop_path, n_layers)[i]``."""
    rates = [{"drop_path": r} if drop_path else {} for r in depth_rates(drop_path, n_layers)]
    return nn.ModuleList(layer(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.activation, cfg.norm_first,
                               cfg.norm_eps, **switches, **rate) for rate in rates)


def embedding_norm(d_model: int, cfg: StackConfig) -> nn.Module:
    """A stack's LayerNorm over its summed input embeddings when ``cfg.embedding_norm`` is on
    (BERT normalises its inputs, since they are not scaled); else ``nn.Identity`` (no weights)."""
    return nn.LayerNorm(d_model, eps=cfg.norm_eps) if cfg.embedding_norm else nn.Identity()


# ----------------------------------------------------------------------------- the feed-forward block
# ELU: a graph attention layer's (Velickovic et al. 2018), for encoder layers without the FFN.
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "elu": F.elu}


class FeedForward(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2, applied to each position alike (Vaswani et al. 2017, sec. 3.3).

    Shapes: ``(B, T, D) -> (B, T, D)`` through ``(B, T, d_ff)``.
    ``activation`` is ``"relu"`` (the paper), ``"gelu"`` (Hendrycks & Gimpel 2016, used by BERT/GPT) or
    ``"silu"`` (x·sigmoid(x), Elfwing et al. 2018; Marian's ``swish``).
    Dropout after the activation follows tensor2tensor's ``relu_dropout``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = ACTIVATIONS[activation]
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.w_1(x))  # (B, T, d_ff)
        return self.w_2(self.dropout(h))  # (B, T, D)


# ----------------------------------------------------------------------------- initialisation and counting
def init_weights(module: nn.Module, d_model: int | None = None) -> None:
    """Initialise every Linear, LayerNorm and Embedding under ``module`` in place.

    A whole model calls this once, last in its ``__init__``; the stacks and layers it is built
    from keep PyTorch's default initialisation until then.

    * Linear: Xavier-uniform weights (Glorot & Bengio 2010, as in tensor2tensor), zero bias.
    * Embedding: normal(0, d_model^-0.5), so that after the ×√d_model input scaling
      (Vaswani et al. 2017, sec. 3.4) token vectors have unit variance; the
      ``padding_idx`` row is zeroed. ``d_model`` defaults to each table's width.
    * LayerNorm: ones and zeros.
    * ``AdditiveAttention``'s score vectors: Xavier-uniform over ``(H, d_head)``; without projections
      (GAT's layer) over each head's own fans (``d_head`` in, 1 out, as the authors' code), biases zero.

    Embeddings are initialised after Linears so that an output projection tied to
    an embedding ends up with the embedding initialisation.
    """
    modules = list(module.modules())
    for m in modules:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, AdditiveAttention):
            bound = math.sqrt(6.0 / (m.d_head + 1))  # without projections: a head's vector, d_head in, 1 out
            for a in (m.a_dst, m.a_src):
                nn.init.xavier_uniform_(a) if m.projections else nn.init.uniform_(a, -bound, bound)
            if not m.projections:  # its score biases (b_dst, b_src) are born zero
                nn.init.zeros_(m.bias)
    for m in modules:
        if isinstance(m, nn.Embedding):
            std = (d_model or m.embedding_dim) ** -0.5
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of parameters; shared (tied) tensors are counted once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


__all__ = [
    "ACTIVATIONS", "AutoregressiveDecoder", "DecoderLayer", "EncoderConfig", "EncoderDecoder", "EncoderLayer",
    "EncoderOut", "FeedForward", "InputHook", "PositionalFactory", "StackConfig", "TransformerConfig",
    "TransformerEncoder", "VocabProjection", "count_parameters", "embedding_norm", "final_norm", "hp", "init_weights",
    "layer_stack", "target_vocab_size",
]
