"""Sequence classification: one label for a whole sentence.

The encoder reads the tokens, a pooling step (``models.pooling``) turns its states into one
vector, and a linear classifier scores the labels.

Shape legend: B sentences, T pieces, D = d_model, H heads, C labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import Tensor, nn

from transformer.models.pooling import AttentionPooling
from transformer.models.transformer import EncoderConfig, InputHook, TransformerEncoder, hp, init_weights
from transformer.ranges import Probability, Range


@dataclass
class Pooled:
    """What ``SequenceClassifier.pool`` gives: ``vector (B, D)``; ``weights (B, H, T')`` the
    attention pooling's weights over the encoder positions (None for other poolings);
    ``offset``: how many positions the pooling put before the tokens (1 for ``[CLS]``)."""

    vector: Tensor
    weights: Tensor | None
    offset: int


@dataclass(kw_only=True)
class ClassifierConfig(EncoderConfig):
    """``EncoderConfig`` plus the labels and the pooling.

    Fields:
        n_classes: number of labels C (from the data).
        pooling: a factory called with ``d_model, n_heads`` (a ``_partial_`` config of
            ``ClsPooling``, ``FirstPooling``, ``MeanPooling`` or ``AttentionPooling``); ``None`` = attention.
        drop_path: stochastic depth (Huang et al. 2016) in the encoder's layers: in training each
            residual branch is dropped for a whole sample, at this rate in the top layer and less
            below it, linearly down to 0 in the first (``modules.drop_path.depth_rates``; DeiT's
            ViTs use 0.1); 0 = off.
    """

    n_classes: int = hp(within=Range(1, 2**20))
    pooling: Callable[..., nn.Module] | None = hp(None, factory=True)
    drop_path: float = hp(0.0, within=Probability())


class SequenceClassifier(nn.Module):
    """Transformer encoder + pooling + linear classifier.

    ``forward(src (B, T)) -> logits (B, C)`` (speech: ``forward(frames (B, T, F), src_lengths=
    (B,))`` through the encoder's front end); ``pool(src)`` gives the pooled vector and the
    pooling weights (what ``transformer-inspect`` draws).

    Args:
        cfg: the sizes, labels and pooling (``ClassifierConfig``).
    """

    config_class = ClassifierConfig

    def __init__(self, cfg: ClassifierConfig):
        super().__init__()
        if cfg.n_classes < 2:
            raise ValueError(f"a classifier needs at least 2 labels, got {cfg.n_classes}")
        self.cfg = cfg
        self.pad_id = cfg.pad_id
        self.vocab_size = cfg.vocab_size
        self.n_classes = cfg.n_classes
        self.encoder = TransformerEncoder(cfg, cfg.n_layers, drop_path=cfg.drop_path)
        self.pooling = (cfg.pooling or AttentionPooling)(d_model=cfg.d_model, n_heads=cfg.n_heads)
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(cfg.d_model, cfg.n_classes)
        init_weights(self, cfg.d_model)

    def pool(self, src: Tensor, input_hook: InputHook | None = None, src_lengths: Tensor | None = None) -> Pooled:
        """The sequence vector of ``src`` (token ids ``(B, T)``, or a front end's frames
        ``(B, T, F)`` of ``src_lengths``) and the pooling weights; ``input_hook`` (optional)
        receives the input vectors ``(B, T, D)`` and returns the vectors to encode instead
        (adversarial training, ``tasks.adversarial``)."""
        x, mask = self.encoder.embed(src, src_lengths)  # (B, T, D), (B, T): True = real
        if input_hook is not None:
            x = input_hook(x)
        x2, mask2 = self.pooling.prepare(x, mask)  # (B, T', D), (B, T')
        h = self.encoder.forward_embeddings(x2, mask2)  # (B, T', D)
        vector, weights = self.pooling(h, mask2)  # (B, D), (B, H, T') | None
        return Pooled(vector, weights, x2.size(1) - x.size(1))

    def classify(self, vector: Tensor) -> Tensor:
        """The label logits ``(B, C)`` of pooled vectors ``(B, D)``."""
        return self.classifier(self.dropout(vector))  # (B, C)

    def forward(self, src: Tensor, input_hook: InputHook | None = None, src_lengths: Tensor | None = None) -> Tensor:
        return self.classify(self.pool(src, input_hook, src_lengths).vector)  # (B, C)


class ClassifierEnsemble(nn.Module):
    """Several classifiers kept together for inference (``SentenceClassifier`` averages their
    probabilities), each with the tokenizer and input length it was trained with.

    It holds the members' weights (so ``.to(device)`` moves them all) but has no ``forward``
    of its own: the members may read different pieces of the same sentence.
    """

    def __init__(self, members: list[tuple[nn.Module, object, int]]):
        super().__init__()
        self.models = nn.ModuleList(m for m, _, _ in members)
        self._extras = [(tok, n) for _, tok, n in members]

    def members(self) -> list[tuple[nn.Module, object, int]]:
        """``(model, tokenizer, max_len)`` per member, in checkpoint order."""
        return [(m, tok, n) for m, (tok, n) in zip(self.models, self._extras)]

    def forward(self, *args, **kwargs):
        raise TypeError("an ensemble has no single forward: classify through SentenceClassifier")


__all__ = ["ClassifierConfig", "ClassifierEnsemble", "Pooled", "SequenceClassifier"]
