"""A small convolutional image classifier: the baseline self-attention over patches is measured
against (the lectures' claim: a CNN is a restricted self-attention, better with little data).

Each block is two 3x3 convolutions (ReLU after each) and a 2x2 max-pool; channels double from
block to block; the last block's map, a set of ``H' x W'`` vectors, becomes one vector through
the same pooling step as the encoder's states (``models.pooling``: ``MeanPooling`` is global
average pooling) and a linear layer scores the labels.
It is trained by the same classification task as the ``SequenceClassifier`` (chosen by the model
config's ``_target_``), on the same image batches.

Shape legend: B images, C image channels, H, W height and width, K channels of a block (the
last block's is D), H', W' the last map's size, L labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn

from transformer.models.config import hp
from transformer.models.pooling import MeanPooling
from transformer.ranges import Probability, Range


@dataclass(kw_only=True)
class ConvClassifierConfig:
    """The CNN's sizes.

    Fields:
        n_classes: number of labels L (from the data).
        in_channels: image channels C (1 grey, 3 RGB).
        channels: the first block's channels K (doubled by each further block).
        n_blocks: conv-conv-pool blocks; each halves H and W (floor), so an 8x8 image takes 3.
        dropout: before the linear classifier.
        pooling: a factory called with ``d_model`` (the last block's channels) and ``n_heads=1``
            (``MeanPooling``, global average pooling, or ``AttentionPooling``); None = mean.
        vocab_size, pad_id: unused (an image has no pieces); the classification task supplies
            them to every model it builds.
    """

    n_classes: int = hp(within=Range(1, 2**20))
    in_channels: int = hp(1, within=Range(1, 4))
    channels: int = hp(32, within=Range(1, 2**12))
    n_blocks: int = hp(2, within=Range(1, 16))
    dropout: float = hp(0.1, within=Probability())
    vocab_size: int = hp(1, within=Range(1, 2**24))
    pad_id: int = hp(0, within=Range(0, 2**24))
    pooling: Callable[..., nn.Module] | None = hp(None, factory=True)


class ConvClassifier(nn.Module):
    """Conv blocks + global average pooling + linear classifier.

    ``forward(src (B, C, H, W)) -> logits (B, L)``; it takes (and refuses) the classification
    task's ``input_hook`` and ignores ``src_lengths``, as a front end does.

    Args:
        cfg: the sizes (``ConvClassifierConfig``).
    """

    config_class = ConvClassifierConfig

    def __init__(self, cfg: ConvClassifierConfig):
        super().__init__()
        if cfg.n_classes < 2:
            raise ValueError(f"a classifier needs at least 2 labels, got {cfg.n_classes}")
        self.cfg = cfg
        self.n_classes = cfg.n_classes
        blocks, c_in = [], cfg.in_channels
        for i in range(cfg.n_blocks):
            c_out = cfg.channels * 2**i
            blocks += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.Conv2d(c_out, c_out, 3, padding=1),
                       nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True)]
            c_in = c_out
        self.features = nn.Sequential(*blocks)
        self.pooling = (cfg.pooling or MeanPooling)(d_model=c_in, n_heads=1)
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(c_in, cfg.n_classes)

    def forward(self, src: Tensor, input_hook=None, src_lengths: Tensor | None = None) -> Tensor:
        if input_hook is not None:
            raise ValueError("a ConvClassifier has no input vectors to perturb: task.adversarial_eps must be 0")
        x = self.features(src)  # (B, C, H, W) -> (B, D, H', W')
        x = x.flatten(2).transpose(1, 2)  # -> (B, D, H'·W') -> (B, H'·W', D): the map as a set of vectors
        x, mask = self.pooling.prepare(x, torch.ones(x.shape[:2], dtype=torch.bool, device=x.device))
        vector, _ = self.pooling(x, mask)  # (B, D)
        return self.classifier(self.dropout(vector))  # (B, L)


__all__ = ["ConvClassifier", "ConvClassifierConfig"]
