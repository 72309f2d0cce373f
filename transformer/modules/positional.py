"""Positional information: absolute (sinusoidal, learned) or relative (T5 bias).

Every class takes the same keyword arguments ``d_model, n_heads, max_len, causal``
and ignores what it does not need, so one Hydra ``_partial_: true`` factory can
build any of them. Two hooks:

* ``forward(x (B, T, D), offset=0) -> (B, T, D)`` adds absolute positions
  ``offset .. offset + T - 1`` (identity for relative schemes); ``offset`` is an int, or a
  0-dim tensor when a static cache keeps the position on the device;
* ``attention_bias(t_q, t_k, offset=0) -> (1, H, T_q, T_k) | None`` is added to
  self-attention scores; query ``i`` sits at absolute position ``offset + i``,
  key ``j`` at ``j`` (so cached decoding passes ``offset = cache.length``).

Dropout after adding positions belongs to the model.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import Tensor, nn

from transformer.ranges import Range


#: Where a sinusoid table puts its sines and cosines: ``interleaved`` (the paper, tensor2tensor's
#: ``sin, cos, sin, cos, ...``), ``halves`` (all sines, then all cosines: Marian's and
#: Hugging Face's ``MarianSinusoidalPositionalEmbedding``) or ``fairseq`` (halves whose
#: frequencies are spaced over D/2 - 1 steps instead of D/2: fairseq's and M2M100's, NLLB's).
SINUSOID_LAYOUTS = ("interleaved", "halves", "fairseq")


def sinusoid_table(n_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """``(n_positions, d_model)`` with PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...)
    (``layout="interleaved"``), or the same ceil(D/2) sines in columns ``0 .. ceil(D/2) - 1`` and
    the floor(D/2) cosines after them (``layout="halves"``, Marian's). ``layout="fairseq"``:
    floor(D/2) sines of frequencies 10000^(-i / (floor(D/2) - 1)), then their cosines, and a zero
    column when D is odd (fairseq's ``SinusoidalPositionalEmbedding``, M2M100's and NLLB's).

    Each (sin, cos) pair rotates by a fixed angle per step, so PE(pos + k) is a
    linear function of PE(pos) (Vaswani et al. 2017, sec. 3.5).
    """
    if layout not in SINUSOID_LAYOUTS:
        raise ValueError(f"sinusoid layout must be one of {SINUSOID_LAYOUTS}, got {layout!r}")
    pos = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    if layout == "fairseq":
        half = d_model // 2
        step = math.log(10000.0) / max(half - 1, 1)
        angle = pos * torch.exp(torch.arange(half, dtype=torch.float64) * -step)  # (P, 1) * (D/2,) -> (P, D/2)
        table = torch.zeros(n_positions, d_model, dtype=torch.float64)
        table[:, :half], table[:, half:2 * half] = torch.sin(angle), torch.cos(angle)
        return table.float()
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, 1) / (ceil(D/2),) -> (P, ceil(D/2))
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    half = angle.size(1)
    if layout == "halves":
        table[:, :half] = torch.sin(angle)
        table[:, half:] = torch.cos(angle[:, : d_model // 2])
    else:
        table[:, 0::2] = torch.sin(angle)
        table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoidal encodings added to the input (Vaswani et al. 2017, sec. 3.5).

    Shapes: ``x (B, T, D) -> (B, T, D)``. Positions past ``max_len`` are computed
    on the fly, since the formula extrapolates.

    ``layout``: ``"interleaved"`` (the paper), ``"halves"`` (Marian's) or ``"fairseq"`` (M2M100's,
    NLLB's), see :func:`sinusoid_table`. ``first_position``: the table row of the first piece
    (0; fairseq's models start at ``padding_idx + 1``, M2M100's at 2). Padding gets its
    position like any piece (fairseq gives it a zero row instead: a padded position, which no
    real one attends to).
    """

    def __init__(self, d_model: int, n_heads: int | None = None, max_len: int = 1024, causal: bool = False,
                 layout: str = "interleaved", first_position: Annotated[int, Range(0, 2**20)] = 0):
        super().__init__()
        if layout not in SINUSOID_LAYOUTS:
            raise ValueError(f"sinusoid layout must be one of {SINUSOID_LAYOUTS}, got {layout!r}")
        self.d_model = d_model
        self.layout = layout
        self.first_position = first_position
        # Not persistent: it is a function of d_model, no need to store it in checkpoints.
        self.register_buffer("pe", sinusoid_table(max_len + first_position, d_model, layout), persistent=False)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        t = x.size(1)
        offset = offset + self.first_position
        if isinstance(offset, Tensor):  # a static cache's position, inside the table by its size
            return x + self.pe[offset + torch.arange(t, device=x.device)].to(x.dtype)
        pe = self.pe if offset + t <= self.pe.size(0) else sinusoid_table(offset + t, self.d_model,
                                                                          self.layout).to(x.device)
        return x + pe[offset : offset + t].to(x.dtype)  # (B, T, D) + (T, D)

    def attention_bias(self, t_q: int, t_k: int, offset: int = 0) -> None:
        return None


class LearnedPositionalEncoding(nn.Module):
    """A trained embedding per absolute position (Gehring et al. 2017; Vaswani et al. 2017, Table 3 (E)).

    Shapes: ``x (B, T, D) -> (B, T, D)``; the table has ``max_len`` rows.

    ``first_position``: the table row of the first piece. RoBERTa's (and fairseq's) tables keep
    rows ``0 .. padding_idx`` for padding, so its pieces start at row ``padding_idx + 1`` = 2 and
    a sequence has ``max_len - first_position`` positions.
    """

    def __init__(self, d_model: int, n_heads: int | None = None, max_len: int = 1024, causal: bool = False,
                 first_position: Annotated[int, Range(0, 2**20)] = 0):
        super().__init__()
        if first_position >= max_len:
            raise ValueError(f"first_position={first_position} leaves no row of a {max_len}-row table")
        self.max_len = max_len - first_position  # the most pieces a sequence has
        self.first_position = first_position
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        t = x.size(1)
        if not isinstance(offset, Tensor) and offset + t > self.max_len:
            raise ValueError(f"position {offset + t - 1} exceeds max_len={self.max_len} of the learned table")
        pos = self.first_position + offset + torch.arange(t, device=x.device)
        return x + self.embedding(pos).to(x.dtype)  # (B, T, D) + (T, D)

    def attention_bias(self, t_q: int, t_k: int, offset: int = 0) -> None:
        return None


class NoPositionalEncoding(nn.Module):
    """No position information at all (ablation; the encoder becomes permutation-equivariant)."""

    def __init__(self, d_model: int | None = None, n_heads: int | None = None, max_len: int | None = None,
                 causal: bool = False):
        super().__init__()

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return x

    def attention_bias(self, t_q: int, t_k: int, offset: int = 0) -> None:
        return None


def relative_position_bucket(relative_position: Tensor, causal: bool, num_buckets: int, max_distance: int) -> Tensor:
    """Map ``key_pos - query_pos`` to a bucket id (Raffel et al. 2020, T5, sec. 2.1).

    Half the buckets are exact small distances, the rest grow logarithmically up
    to ``max_distance``; bidirectional attention spends half of the buckets on
    each direction, causal attention only sees the past.
    """
    bucket = torch.zeros_like(relative_position)
    if causal:
        n = (-relative_position).clamp(min=0)  # distance into the past
    else:
        num_buckets //= 2
        bucket = bucket + (relative_position > 0).long() * num_buckets
        n = relative_position.abs()
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # log-spaced buckets for larger distances; clamp(min=1) only avoids log(0) on small n.
    large = max_exact + (
        torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(is_small, n, large)


class RelativePositionBias(nn.Module):
    """T5-style learned scalar bias per head and relative-distance bucket (Raffel et al. 2020).

    ``forward`` is the identity; ``attention_bias(t_q, t_k, offset)`` returns
    ``(1, H, T_q, T_k)`` to add to self-attention scores (shared by all layers of a
    stack, as in T5). ``causal=True`` for decoders (past only), False for encoders.
    """

    def __init__(
        self,
        d_model: int | None = None,
        n_heads: int = 8,
        max_len: int | None = None,
        causal: bool = False,
        num_buckets: Annotated[int, Range(1, 2**16)] = 32,
        max_distance: Annotated[int, Range(1, 2**20)] = 128,
    ):
        super().__init__()
        self.n_heads = n_heads
        self.causal = causal
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.embedding = nn.Embedding(num_buckets, n_heads)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return x

    def attention_bias(self, t_q: int, t_k: int, offset: int = 0) -> Tensor:
        device = self.embedding.weight.device
        q_pos = (offset + torch.arange(t_q, device=device)).unsqueeze(1)  # (T_q, 1); offset may be a tensor
        k_pos = torch.arange(t_k, device=device).unsqueeze(0)  # (1, T_k)
        buckets = relative_position_bucket(k_pos - q_pos, self.causal, self.num_buckets, self.max_distance)
        bias = self.embedding(buckets)  # (T_q, T_k) -> (T_q, T_k, H)
        return bias.permute(2, 0, 1).unsqueeze(0)  # -> (1, H, T_q, T_k)


def build_positional(factory, d_model: int, n_heads: int, max_len: int, causal: bool) -> nn.Module:
    """Call a positional factory (class or Hydra ``_partial_`` callable) with the uniform kwargs.

    ``None`` means sinusoidal, the paper's default (Vaswani et al. 2017, sec. 3.5).
    """
    if factory is None:
        factory = SinusoidalPositionalEncoding
    if isinstance(factory, nn.Module):
        raise TypeError("pass a positional *factory* (class or _partial_), not a module: "
                        "encoder and decoder each need their own instance")
    return factory(d_model=d_model, n_heads=n_heads, max_len=max_len, causal=causal)
