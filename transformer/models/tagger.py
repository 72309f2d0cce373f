"""Sequence tagging (POS, chunking) with a Transformer encoder over subword pieces.

Shape legend: B batch, T pieces, W words (max in batch), D = d_model, C tags.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transformer.models.encoder import TransformerEncoder
from transformer.models.init import init_weights
from transformer.modules.masks import pad_mask

POOLINGS = ("first", "mean")


def pool_words(h: Tensor, word_ids: Tensor, pooling: str = "first") -> Tensor:
    """Pool piece vectors into word vectors.

    Args:
        h: ``(B, T, D)`` piece vectors.
        word_ids: ``(B, T)`` long, the word index of each piece, ``-1`` for pieces
            that belong to no word (padding, specials).
        pooling: ``"first"`` — a word's first piece (Devlin et al. 2019, sec. 5.3);
            ``"mean"`` — the average of its pieces.

    Returns:
        ``(B, W, D)`` with ``W = max(word_ids) + 1``; words with no piece are zeros.
    """
    b, t, d = h.shape
    valid = word_ids >= 0  # (B, T)
    n_words = int(word_ids.max().item()) + 1 if valid.any() else 0
    idx = word_ids.clamp(min=0)  # (B, T); invalid pieces are neutralised below
    if pooling == "mean":
        hv = h * valid.unsqueeze(-1).to(h.dtype)  # (B, T, D)
        sums = h.new_zeros(b, n_words, d).scatter_add_(1, idx.unsqueeze(-1).expand(-1, -1, d), hv)  # (B, W, D)
        counts = h.new_zeros(b, n_words).scatter_add_(1, idx, valid.to(h.dtype))  # (B, W)
        return sums / counts.clamp(min=1).unsqueeze(-1)
    if pooling == "first":
        pos = torch.arange(t, device=h.device).expand(b, t)  # (B, T)
        pos = torch.where(valid, pos, torch.full_like(pos, t))  # invalid pieces point past the end
        first = torch.full((b, n_words), t, dtype=torch.long, device=h.device)
        first = first.scatter_reduce(1, idx, pos, reduce="amin")  # (B, W): first piece of each word
        h_ext = torch.cat([h, h.new_zeros(b, 1, d)], dim=1)  # (B, T + 1, D); row T = "no piece"
        return h_ext.gather(1, first.unsqueeze(-1).expand(-1, -1, d))  # (B, W) -> (B, W, D)
    raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")


class Tagger(nn.Module):
    """Transformer encoder + per-word linear classifier.

    ``forward(src (B, T), word_ids (B, T)) -> logits (B, W, C)``.

    Args:
        n_tags: number of tag classes C.
        pooling: ``"first"`` or ``"mean"`` piece pooling per word.
        Others as in ``TransformerEncoder``.
    """

    def __init__(
        self,
        vocab_size: int,
        n_tags: int,
        pad_id: int,
        d_model: int = 256,
        n_heads: int = 4,
        n_layers: int = 4,
        d_ff: int = 1024,
        dropout: float = 0.1,
        positional=None,
        norm_first: bool = False,
        activation: str = "relu",
        window: int | None = None,
        max_len: int = 1024,
        pooling: str = "first",
    ):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.pad_id = pad_id
        self.vocab_size = vocab_size
        self.n_tags = n_tags
        self.pooling = pooling
        self.encoder = TransformerEncoder(
            vocab_size, d_model, n_heads, n_layers, d_ff, dropout, pad_id,
            positional=positional, norm_first=norm_first, activation=activation, window=window, max_len=max_len,
        )
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, n_tags)
        init_weights(self, d_model)

    def forward(self, src: Tensor, word_ids: Tensor) -> Tensor:
        h = self.encoder(src, pad_mask(src, self.pad_id))  # (B, T, D)
        words = pool_words(h, word_ids, self.pooling)  # (B, W, D)
        return self.classifier(self.dropout(words))  # (B, W, C)
