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
    transcripts = [n[0][0] if n else "" for n in task.translator(decode).translate(list(paths))]
    report = plots.Report(out_dir)
    for k, (path, transcript) in enumerate(zip(paths, transcripts)):
        arrays = {**transcription_attention(task, path), "transcript": np.array(transcript)}
        tokens = list(arrays["tokens"])
        pictures = plots.plot_encoder_layers(arrays, tokens, report.folder(f"sentence_{k}"), max_tokens,
                                             "encoder self-attention over frames")
        report.add(f"sentence_{k}", f"{k}: {path} → {transcript!r}", arrays, pictures)
    return report.close()


__all__ = ["inspect_transcription", "transcription_attention"]
