"""Pooling: one vector for a whole sequence of encoder states, chosen by config ``_target_``.

Shape legend: B batch, T tokens, D = d_model, H heads.

Each class is built as ``Pooling(d_model, n_heads)`` (the model passes both; a class takes
what it needs) and offers two steps around the encoder:

* ``prepare(x (B, T, D), mask (B, T)) -> (x', mask')``: what the encoder reads (the
  ``[CLS]`` pooling prepends its learned vector here; the others pass ``x`` through);
* ``forward(h (B, T', D), mask' (B, T')) -> (pooled (B, D), weights (B, H, T') | None)``:
  the sequence vector and, for attention pooling, how much each head took from each token.

Masks are boolean, True = a real token. Padding never changes the result: every pooling reads
real positions only, and a sequence with no real token pools to a finite vector, never NaN.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from transformer.modules.attention import attention_weights, head_width

#: The activations :class:`FirstPooling`'s dense layer may take.
DENSE_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class ClsPooling(nn.Module):
    """A learned ``[CLS]`` vector placed before the tokens; its encoder output is the sequence
    vector (Devlin et al. 2019, sec. 3): every layer lets it attend to the whole sentence."""

    def __init__(self, d_model: int, n_heads: int = 1):
        super().__init__()
        # Scaled like a token embedding after the ×√d_model input scaling (unit variance).
        self.cls = nn.Parameter(torch.randn(d_model))

    def prepare(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        b = x.size(0)
        cls = self.cls.to(x.dtype).expand(b, 1, -1)  # (B, 1, D)
        x = torch.cat([cls, x], dim=1)  # (B, 1 + T, D)
        mask = torch.cat([mask.new_ones(b, 1), mask], dim=1)  # (B, 1 + T)
        return x, mask

    def forward(self, h: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        return h[:, 0], None  # (B, D): the [CLS] position


class FirstPooling(nn.Module):
    """The first position's final state: the ``[CLS]`` (``<s>``) piece a pretrained family's
    tokenizer frames every sentence with, which its own sequence classifiers read
    (``BertForSequenceClassification``). Unlike :class:`ClsPooling` nothing is added: the
    vector comes from the tokenizer's framing and the pretrained embedding of that piece, so
    use it with a family's tokenizer (``init_from=hf:...``). Padding is on the right, so
    position 0 is a real piece whatever the row's length.

    ``dense``: the activation of a ``D -> D`` layer the first state then goes through, as the
    families' sequence classifiers have one: ``"tanh"`` (BERT's pooler, RoBERTa's
    classification head's ``dense``), ``"relu"`` (DistilBERT's ``pre_classifier``); ``None``:
    the state as it is."""

    def __init__(self, d_model: int, n_heads: int = 1, dense: str | None = None):
        super().__init__()
        if dense is not None and dense not in DENSE_ACTIVATIONS:
            raise ValueError(f"pooling.dense={dense!r}: expected null or one of {', '.join(DENSE_ACTIVATIONS)}")
        self.dense = nn.Linear(d_model, d_model) if dense is not None else None
        self.activation = DENSE_ACTIVATIONS[dense]() if dense is not None else None

    def prepare(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        return x, mask

    def forward(self, h: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        first = h[:, 0]  # (B, T, D) -> (B, D): the first position
        if self.dense is None:
            return first, None
        return self.activation(self.dense(first)), None  # (B, D)


class MeanPooling(nn.Module):
    """The mean of the encoder states over real tokens (padding excluded from sum and count)."""

    def __init__(self, d_model: int, n_heads: int = 1):
        super().__init__()

    def prepare(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        return x, mask

    def forward(self, h: Tensor, mask: Tensor) -> tuple[Tensor, None]:
        real = mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
        total = (h * real).sum(dim=1)  # (B, D)
        return total / real.sum(dim=1).clamp(min=1.0), None  # (B, D)


class AttentionPooling(nn.Module):
    """A learned query attending over the encoder states: multi-head attention with one
    query, the seed vector of Lee et al. 2019's pooling by multihead attention (PMA).

    Each head ``h`` scores every token by ``q_h · W_k x_t / √d_head``, softmax over real tokens,
    and takes the weighted mean of its slice of ``W_v x``; the heads are concatenated and
    projected back to ``D``. The weights say which tokens the sequence vector came from
    (``transformer-inspect`` draws them).
    """

    def __init__(self, d_model: int, n_heads: int = 1):
        super().__init__()
        self.n_heads, self.d_head = n_heads, head_width(d_model, n_heads)
        self.query = nn.Parameter(torch.randn(n_heads, 1, self.d_head) / math.sqrt(self.d_head))
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def prepare(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        return x, mask

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, D) -> (B, H, T, d_head)

    def forward(self, h: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        b = h.size(0)
        k, v = self._heads(self.key(h)), self._heads(self.value(h))  # (B, H, T, d_head)
        q = self.query.to(h.dtype).expand(b, -1, -1, -1)  # (B, H, 1, d_head)
        w = attention_weights(q, k, mask=mask[:, None, None, :])  # (B, H, 1, T); no real token: zeros
        pooled = (w @ v).reshape(b, -1)  # (B, H, 1, T) @ (B, H, T, d_head) -> (B, H, 1, d_head) -> (B, D)
        return self.out(pooled), w.squeeze(2)  # (B, D), (B, H, T)


__all__ = ["AttentionPooling", "ClsPooling", "FirstPooling", "MeanPooling"]
