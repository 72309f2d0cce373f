"""Speaker-adversarial training: a classifier that learns to name each training recording's
speaker from the sequence vector, while the encoder learns to keep it from doing so
(domain-adversarial training, Ganin et al. 2016; speaker-invariant training for speech,
Meng et al. 2018).

Between the vector and the speaker classifier sits a gradient reversal: the forward pass is the
identity, the backward pass multiplies the gradient by ``-weight``. One loss, one optimizer:
the speaker classifier descends on its cross-entropy, the encoder ascends on it, so the vector
the label classifier reads carries less of what tells the training voices apart. The weight
ramps from 0 to its value over the run (:func:`ramp`, Ganin et al.'s schedule), since early
in training the speaker classifier's gradient is noise.

Shape legend: B recordings, D = d_model, S training speakers.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer import kinds


class _Reverse(torch.autograd.Function):
    """Identity forward; gradient times ``-weight`` backward."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: float) -> Tensor:
        ctx.weight = weight
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return -ctx.weight * grad, None


def reverse_gradient(x: Tensor, weight: float) -> Tensor:
    """``x`` unchanged; what flows back through it is multiplied by ``-weight``."""
    return _Reverse.apply(x, float(weight))


def ramp(progress: float) -> float:
    """Ganin et al.'s schedule, ``2 / (1 + exp(-10 p)) - 1``: 0 at the start of the run
    (``progress`` 0), 0.76 at a fifth, 0.99 at half, 1 at the end."""
    p = min(max(float(progress), 0.0), 1.0)
    return 2.0 / (1.0 + math.exp(-10.0 * p)) - 1.0


class SpeakerAdversary(nn.Module):
    """The speaker classifier: ``(B, D)`` sequence vectors -> ``(B, S)`` speaker logits,
    through one hidden layer (DANN's domain classifier is a small MLP; a linear one is beaten
    by an encoder that merely rotates the speaker information).

    Args:
        d_model: the vector's size D.
        speakers: the training speakers, id ``s`` is ``speakers[s]``.
    """

    def __init__(self, d_model: int, speakers: Sequence[str]):
        super().__init__()
        self.index = {name: s for s, name in enumerate(speakers)}
        self.net = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, len(self.index)))

    def ids(self, speakers: Sequence[str], device: torch.device) -> Tensor:
        """``(B,)`` the ids of a batch's speakers; one not among the training speakers is a
        ``ValueError`` naming it."""
        missing = next((s for s in speakers if s not in self.index), None)
        if missing is not None:
            raise ValueError(f"speaker {missing!r} is not among the training speakers {sorted(self.index)}")
        return torch.tensor([self.index[s] for s in speakers], dtype=torch.long, device=device)

    def loss(self, vector: Tensor, speakers: Tensor, weight: float) -> tuple[Tensor, Tensor]:
        """Cross-entropy of the speakers ``(B,)`` from ``vector (B, D)``, whose gradient reaches
        ``vector`` reversed and scaled by ``weight``, and the speaker logits ``(B, S)``."""
        logits = self.net(reverse_gradient(vector, weight))  # (B, S)
        return F.cross_entropy(logits.float(), speakers), logits


def check_speakers(weight: float, speakers: Sequence[str] | None) -> None:
    """``task.speaker_adversarial`` is a weight >= 0 (0 = off), and above 0 it needs at least two
    training speakers; else a ``ValueError`` names the key."""
    if not weight >= 0:
        raise ValueError(f"task.speaker_adversarial={weight!r}: expected a weight >= 0 (0 = off)")
    if weight > 0 and len(speakers or ()) < 2:
        raise ValueError(f"task.speaker_adversarial={weight!r}: needs the training recordings' speakers, at least "
                         f"two (a speech manifest's third column: audio path<TAB>label<TAB>speaker); the training "
                         f"data names {len(speakers or ())}")


def check_speaker_data(weight: float, data: dict) -> None:
    """Before any data is read: with ``task.speaker_adversarial`` set, the run reads recordings,
    and a training manifest of one names every row's speaker; else one error naming the key (or
    the manifest and row)."""
    why = f"task.speaker_adversarial={weight}"
    if kinds.input_kind(data) is not kinds.FRAMES:
        raise ValueError(f"{why}: the speakers are a speech manifest's third column; this run reads "
                         f"{kinds.input_kind(data).name}")
    if data.get("train") is not None and data.get("preset") is None:
        from transformer.data.speech.datamodule import check_speakers as check_rows
        from transformer.data.speech.manifest import read_manifest

        check_rows(read_manifest(data["train"]), why)


__all__ = ["SpeakerAdversary", "check_speaker_data", "check_speakers", "ramp", "reverse_gradient"]
