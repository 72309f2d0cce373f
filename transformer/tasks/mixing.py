"""Mixing training inputs: mixup (Zhang et al. 2018) of images and of speech frames, and CutMix
(Yun et al. 2019) of images.

Each image of a batch is blended with another image of the same batch (a random pairing), and
the loss is the same blend of the two labels' losses: mixup averages the pixels with weight
``lam ~ Beta(a, a)``; CutMix pastes a box of the partner over the image, ``lam`` being the share
of the image left its own. A ViT has no locality built in, and on a few thousand images it
memorises them; mixing asks it for labels between the training images (DeiT, Touvron et al.
2021, trains with both, choosing one per batch).

Frames (B, T, F) blend the same way, position by position from the start; a pair of recordings
of different lengths blends over the longer one's frames, the shorter one's padding adding nothing
(audio mixup as PANNs trains it, Kong et al. 2020).

Shape legend: B images or recordings, C channels, H height, W width, T frames, F features.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class Mixed:
    """A mixed batch: ``src (B, C, H, W)``, each image ``lam`` of its own and ``1 - lam`` of
    image ``partner[b]`` (``partner (B,)``); its loss is ``lam`` × the loss with the labels plus
    ``1 - lam`` × the loss with ``labels[partner]``."""

    src: torch.Tensor
    partner: torch.Tensor
    lam: float
    lengths: torch.Tensor | None = None  # frames: each mixed recording's real frames (B,)


def cutmix_box(height: int, width: int, lam: float) -> tuple[int, int, int, int]:
    """``(top, bottom, left, right)`` of a box of about ``1 - lam`` of an ``height x width`` image
    (sides scaled by ``sqrt(1 - lam)``), centred on a random pixel and cut at the edges."""
    cut = math.sqrt(1.0 - lam)
    h, w = int(round(height * cut)), int(round(width * cut))
    cy, cx = int(torch.randint(height, ())), int(torch.randint(width, ()))
    top, left = max(cy - h // 2, 0), max(cx - w // 2, 0)
    return top, min(cy - h // 2 + h, height), left, min(cx - w // 2 + w, width)


def mix_images(src: torch.Tensor, mixup: float = 0.0, cutmix: float = 0.0) -> Mixed:
    """``src (B, C, H, W)`` mixed within the batch: with ``mixup`` > 0 (the Beta parameter)
    pixels are blended, with ``cutmix`` > 0 a box is pasted; with both, one of the two is drawn
    for the batch with equal odds. Both 0: ``src`` itself (``lam = 1``). Draws from torch's
    global generator (seeded with the run)."""
    if src.dim() != 4:
        raise ValueError(f"mixup and CutMix mix images (B, C, H, W); got a batch of shape {tuple(src.shape)}")
    if mixup <= 0 and cutmix <= 0:
        return Mixed(src, torch.arange(src.size(0), device=src.device), 1.0)
    use_cutmix = cutmix > 0 and (mixup <= 0 or bool(torch.rand(()) < 0.5))
    alpha = torch.tensor(float(cutmix if use_cutmix else mixup))
    lam = float(torch.distributions.Beta(alpha, alpha).sample())
    partner = torch.randperm(src.size(0)).to(src.device)
    if not use_cutmix:
        return Mixed(lam * src + (1 - lam) * src[partner], partner, lam)
    _, _, height, width = src.shape
    top, bottom, left, right = cutmix_box(height, width, lam)
    out = src.clone()
    out[:, :, top:bottom, left:right] = src[partner][:, :, top:bottom, left:right]
    # lam is what is left of each image's own pixels once the box is cut at the edges.
    return Mixed(out, partner, 1.0 - (bottom - top) * (right - left) / (height * width))


def mix_frames(src: torch.Tensor, lengths: torch.Tensor, mixup: float) -> Mixed:
    """``src (B, T, F)`` padded frames with ``lengths (B,)``, each recording blended with a partner
    of the batch by ``lam ~ Beta(mixup, mixup)``; the mixed recording is as long as the longer of
    the two. Draws from torch's global generator (seeded with the run)."""
    if src.dim() != 3 or lengths is None:
        raise ValueError(f"mixup of frames mixes (B, T, F) batches with their lengths; got {tuple(src.shape)}")
    alpha = torch.tensor(float(mixup))
    lam = float(torch.distributions.Beta(alpha, alpha).sample())
    partner = torch.randperm(src.size(0)).to(src.device)
    return Mixed(lam * src + (1 - lam) * src[partner], partner, lam, torch.maximum(lengths, lengths[partner]))


__all__ = ["Mixed", "cutmix_box", "mix_frames", "mix_images"]
