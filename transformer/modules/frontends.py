"""Front ends: an input kind's frames turned into ``d_model`` vectors and a padding mask.

Self-attention takes a set of vectors whatever made them; a front end is the only part that
knows the input kind. Token ids have their embedding (in the models); speech frames have
:class:`ConvSubsampling`. What follows a front end (positions, layers, heads) is shared.

Shape legend: B batch, T input frames, T' = output frames (about T / 4), M mel bins per frame,
C conv channels, D = d_model.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

KERNEL, STRIDE = 3, 2


class ConvSubsampling(nn.Module):
    """Two 3x3 stride-2 convolutions with ReLU over (time, mel), then a linear map to ``d_model``:
    ESPnet's ``Conv2dSubsampling`` (Dong et al. 2018, Speech-Transformer), without its positional
    encoding, which the encoder adds.

    Subsampling time by 4 turns 100 frames a second into 25 vectors a second: attention over a
    minute of audio costs 16x less, and each vector still covers 40 ms.

    No padding in the convolutions: output frame ``t`` sees input frames ``4t .. 4t+6`` only, so
    the ``T'`` valid outputs of an utterance depend on its own frames alone, never on the zeros
    padding it in a batch. Output length: ``T' = ((T - 1) // 2 - 1) // 2`` (0 below 7 frames).

    Args:
        n_mels: features per input frame (M).
        d_model: output width (D).
        channels: convolution channels (C); ``None`` is ``d_model``, as in ESPnet.

    Shapes:
        src ``(B, T, M)`` float, src_lengths ``(B,)`` long ->
        ``(B, T', D)`` vectors and ``src_pad_mask`` ``(B, T')`` bool (True = a real frame).
    """

    def __init__(self, n_mels: int, d_model: int, channels: int | None = None):
        super().__init__()
        channels = channels or d_model
        self.n_mels, self.d_model = n_mels, d_model
        self.conv = nn.Sequential(
            nn.Conv2d(1, channels, KERNEL, STRIDE), nn.ReLU(),
            nn.Conv2d(channels, channels, KERNEL, STRIDE), nn.ReLU(),
        )
        freq = self.output_lengths(torch.tensor(n_mels)).item()  # the mel axis shrinks as time does
        if freq < 1:
            raise ValueError(f"ConvSubsampling needs n_mels >= 7, got {n_mels}")
        self.out = nn.Linear(channels * freq, d_model)

    @staticmethod
    def output_lengths(lengths: Tensor) -> Tensor:
        """Output frames for input lengths: each 3-wide stride-2 convolution maps ``L`` to
        ``(L - 1) // 2``; lengths under 7 give 0."""
        for _ in range(2):
            lengths = torch.div(lengths - 1, STRIDE, rounding_mode="floor")
        return lengths.clamp(min=0)

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Subsample frames into ``d_model`` vectors.

        Args:
            src: ``(B, T, M)`` features, zero-padded after each utterance's frames.
            src_lengths: ``(B,)`` real frames per utterance.

        Returns:
            ``(x, src_pad_mask)``: ``(B, T', D)`` and ``(B, T')`` bool, True where the output
            frame comes from real input frames only.
        """
        b, t, m = src.shape
        if m != self.n_mels:
            raise ValueError(f"ConvSubsampling expects {self.n_mels} features per frame, got {m}")
        if t < 7:
            raise ValueError(f"ConvSubsampling needs at least 7 frames (70 ms at a 10 ms hop), got {t}")
        x = self.conv(src.unsqueeze(1))  # (B, T, M) -> (B, 1, T, M) -> (B, C, T', M')
        c, t_out, m_out = x.shape[1:]
        x = self.out(x.transpose(1, 2).reshape(b, t_out, c * m_out))  # (B, T', C, M') -> (B, T', C*M') -> (B, T', D)
        lengths = self.output_lengths(src_lengths.to(x.device))  # (B,)
        # Padding mask from lengths, in the convention of transformer/modules/attention.py:
        # True = a real position.
        src_pad_mask = torch.arange(t_out, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)  # (1, T') < (B, 1)
        return x, src_pad_mask
