"""What a sentence classifier attends to: the pooling's attention over the sentence (for
attention pooling) and the encoder's self-attention, drawn per sentence; for an image model (input
kind ``patches``) the input is an image file's path, and the class vector's attention over the
patches is also drawn on top of the image."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from transformer import kinds
from transformer.inspect import plots
from transformer.inspect.attention import capture_encoder_attention
from transformer.inspect.report import piece_labels


def _frames(task, path: str, device) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """A recording as a speech model reads it: ``frames (1, T, M)``, ``lengths (1,)`` and the
    axis labels of the front end's output positions (their start times: 40 ms apart after ×4
    subsampling of 10 ms frames, 80 ms after ×8)."""
    from transformer.data.speech.datamodule import frames_of

    src, lengths = frames_of([path], task.hparams.data)
    from transformer.data.speech.datamodule import feature_settings
    from transformer.modules.frontends import STRIDE

    frontend = task.model.encoder.frontend
    n = int(frontend.lengths_out(lengths)[0])
    step = feature_settings(task.hparams.data).hop_ms * STRIDE**frontend.n_convs  # stride-2 convolutions
    return src.to(device), lengths.to(device), [f"{i * step:g} ms" for i in range(n)]


def _image(task, path: str, device) -> tuple[torch.Tensor, None, list[str]]:
    """An image as an image model reads it: ``pixels (1, C, H, W)`` and the axis labels of its
    patches (grid row and column, ``r0c0`` first, row-major)."""
    from transformer.data.images.datamodule import images_of

    rows, cols = task.model.encoder.frontend.grid
    return images_of([path], task.hparams.data).to(device), None, [f"r{i // cols}c{i % cols}" for i in range(rows * cols)]


@torch.no_grad()
def classification_attention(task, sentence: str) -> dict[str, np.ndarray]:
    """One sentence (or, for a speech model, one recording's path: ``transformer.kinds``) through
    a classification task's model: ``tokens`` (axis labels: pieces, ``[CLS]`` first with a
    ``[CLS]`` pooling; a recording's positions by time), ``probabilities (C,)``,
    ``encoder.layer{i} (H, T, T)`` (a truncated model's band shows) and, for attention pooling,
    ``pooling (H, T)``."""
    model = task.model
    if not hasattr(model, "pool"):
        raise ValueError("inspect one classification checkpoint at a time (an ensemble has no single attention)")
    device = next(model.parameters()).device
    if kinds.input_kind(task.hparams) is kinds.FRAMES:
        src, lengths, labels = _frames(task, sentence, device)
    elif kinds.input_kind(task.hparams) is kinds.PATCHES:
        src, lengths, labels = _image(task, sentence, device)
    else:
        ids = task.tokenizer.encode(sentence)[: task.members()[0][2] - 1]
        src, lengths = torch.tensor([ids], dtype=torch.long, device=device), None  # (1, T)
        labels = piece_labels(task.tokenizer, ids)
    with capture_encoder_attention(model.encoder) as calls:
        pooled = model.pool(src, src_lengths=lengths)
    probs = torch.softmax(model.classifier(pooled.vector).float(), dim=-1)[0]  # (C,)
    tokens = ["[CLS]"] * pooled.offset + labels
    arrays = {"tokens": np.array(tokens), "labels": np.array(task.labels), "probabilities": probs.cpu().numpy()}
    for i, w in enumerate(calls[0]):
        arrays[f"encoder.layer{i}"] = w[0].float().cpu().numpy()  # (H, T, T)
    if pooled.weights is not None:
        arrays["pooling"] = pooled.weights[0].float().cpu().numpy()  # (H, T)
    if kinds.input_kind(task.hparams) is kinds.PATCHES:
        arrays["image"] = src[0].permute(1, 2, 0).squeeze(-1).cpu().numpy()  # (C, H, W) -> (H, W[, C])
    return arrays


def class_vector_maps(arrays: dict[str, np.ndarray], grid: tuple[int, int]) -> np.ndarray:
    """The class vector's attention over the patches, per encoder layer and averaged over heads:
    ``(L, R, C)``, row ``0`` of each layer's weights without its own column, as the patch grid."""
    layers = sorted((k for k in arrays if k.startswith("encoder.layer")), key=lambda k: int(k.removeprefix("encoder.layer")))
    rows, cols = grid
    return np.stack([arrays[k][:, 0, 1:].mean(0).reshape(rows, cols) for k in layers])  # (H, N) -> (N,) -> (R, C)


def inspect_classification(task, sentences: Sequence[str], out_dir: str | Path, max_tokens: int = 80) -> list[Path]:
    """Per sentence ``k`` a folder ``sentence_{k}/`` with ``pooling.png`` (attention pooling
    only: each head's weight on every token, and their mean), ``encoder_layer{i}.png`` (a panel
    per head) and ``attention.npz`` (see :func:`classification_attention`); an ``index.html``
    lists them under each sentence and its predicted label."""
    report = plots.Report(out_dir)
    for k, sentence in enumerate(sentences):
        arrays = classification_attention(task, sentence)
        tokens = list(arrays["tokens"])
        folder = report.folder(f"sentence_{k}")
        pictures = []
        if "pooling" in arrays:
            w = arrays["pooling"]  # (H, T)
            rows = [f"head {h}" for h in range(w.shape[0])] + ["mean"]
            plots.plot_matrix(np.concatenate([w, w.mean(0, keepdims=True)]), rows, tokens,
                              "attention pooling: weight of each token in the sentence vector",
                              folder / "pooling.png", xlabel="token", ylabel="query", max_tokens=max_tokens,
                              vmax=None)  # weights near 1/T: a 0..1 scale would show one flat colour
            pictures.append("pooling.png")
        if "image" in arrays and tokens[0] == "[CLS]":  # an image model with a class vector
            maps = class_vector_maps(arrays, task.model.encoder.frontend.grid)  # (L, R, C)
            plots.plot_image_attention(arrays["image"], maps, [f"layer {i}" for i in range(len(maps))],
                                       "the class vector's attention over the patches (mean of the heads)",
                                       folder / "class_attention.png")
            pictures.append("class_attention.png")
        pictures += plots.plot_encoder_layers(arrays, tokens, folder, max_tokens)
        best = int(arrays["probabilities"].argmax())
        label = f"{task.labels[best]} ({arrays['probabilities'][best]:.2f})"
        report.add(f"sentence_{k}", f"{k}: {sentence} → {label}", arrays, pictures)
    return report.close()


__all__ = ["class_vector_maps", "classification_attention", "inspect_classification"]
