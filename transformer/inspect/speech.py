"""What a transcript model (speech in, text out: CTC or autoregressive, ``transformer.kinds``
input kind ``frames``) attends to: the encoder's self-attention over a recording's frames, the
lectures' n×n matrix of positions (the truncated band shows when ``model.window`` is set),
with the model's own transcript of the recording.

Shape legend: H heads, T the front end's output positions (a recording's frames after
subsampling).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from transformer.inspect import plots
from transformer.inspect.attention import capture_encoder_attention
from transformer.inspect.classification import _frames
from transformer.inspect.report import _save_npz


@torch.no_grad()
def transcription_attention(task, path: str) -> dict[str, np.ndarray]:
    """One recording through a transcript model's encoder: ``tokens`` (each position's start
    time, the axis labels) and ``encoder.layer{i} (H, T, T)``, each row a position's weights."""
    model = task.model
    device = next(model.parameters()).device
    src, lengths, labels = _frames(task, path, device)  # (1, T_frames, M), (1,)
    with capture_encoder_attention(model.encoder) as calls:
        model.encode(src, lengths)
    arrays = {"tokens": np.array(labels)}
    for i, w in enumerate(calls[0]):
        arrays[f"encoder.layer{i}"] = w[0].float().cpu().numpy()  # (H, T, T)
    return arrays


def inspect_transcription(task, paths: Sequence[str], decode, out_dir: str | Path, max_tokens: int = 80) -> list[Path]:
    """Per recording ``k`` a folder ``sentence_{k}/`` with ``encoder_layer{i}.png`` (a panel per
    head, positions by time on both axes) and ``attention.npz`` (:func:`transcription_attention`
    and ``transcript``, the model's own with the settings ``decode``, as ``transformer-decode``
    writes it); an ``index.html`` lists them under each recording and its transcript."""
    out_dir = Path(out_dir)
    transcripts = [n[0][0] if n else "" for n in task.translator(decode).translate(list(paths))]
    written: list[Path] = []
    sections: dict[str, list[str]] = {}
    for k, (path, transcript) in enumerate(zip(paths, transcripts)):
        arrays = {**transcription_attention(task, path), "transcript": np.array(transcript)}
        tokens = list(arrays["tokens"])
        folder = out_dir / f"sentence_{k}"
        pictures = []
        layer = 0
        while f"encoder.layer{layer}" in arrays:
            plots.plot_heads(arrays[f"encoder.layer{layer}"], tokens, tokens,
                             f"encoder self-attention over frames, layer {layer}",
                             folder / f"encoder_layer{layer}.png", max_tokens)
            pictures.append(f"encoder_layer{layer}.png")
            layer += 1
        written.append(_save_npz(folder / "attention.npz", arrays))
        written += [folder / p for p in pictures]
        sections[f"{k}: {path} → {transcript!r}"] = [f"sentence_{k}/{p}" for p in pictures]
    written.append(plots.write_index(out_dir, "attention", sections))
    return written


__all__ = ["inspect_transcription", "transcription_attention"]
