"""What a masked language model attends to: its encoder's self-attention on each sentence,
drawn per layer and head, with each ``[MASK]`` labelled by the piece the model fills it with."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from transformer.data.core.tokenizer import SPECIAL_TOKENS
from transformer.inspect import plots
from transformer.inspect.attention import capture_encoder_attention
from transformer.inspect.report import piece_labels


@torch.no_grad()
def mlm_attention(task, sentence: str) -> dict[str, np.ndarray]:
    """One sentence through a masked-LM task's model: ``tokens`` (axis labels; a mask reads
    ``[MASK→filler]``), ``fillers`` (the best filler of each mask) and ``encoder.layer{i}
    (H, T, T)``. The sentence is read as ``transformer-fill`` reads it (its fill-mask
    predictor's ``encode``), cut to the pieces the model takes."""
    filler = task.filler()
    ids, positions = filler.encode(sentence)
    ids = ids[: filler.max_len]
    model = task.model
    src = torch.tensor([ids], dtype=torch.long, device=next(model.parameters()).device)  # (1, T)
    with capture_encoder_attention(model.encoder) as calls:
        model.encode(src)  # the encoder fine-tuning takes (with ELECTRA, the discriminator)
    logits = filler.model(src)[0].float()  # (T, V): the masked LM's, or ELECTRA's generator's
    logits[:, : len(SPECIAL_TOKENS)] = float("-inf")  # never a special token as a filler
    best = logits.argmax(-1).tolist()
    tokens = piece_labels(task.tokenizer, ids)
    fillers = []
    for p in positions:
        if p < len(ids):
            fillers.append(task.tokenizer.decode([best[p]]).strip())
            tokens[p] = f"[MASK→{fillers[-1]}]"
    arrays = {"tokens": np.array(tokens), "fillers": np.array(fillers)}
    for i, w in enumerate(calls[0]):
        arrays[f"encoder.layer{i}"] = w[0].float().cpu().numpy()  # (H, T, T)
    return arrays


def inspect_mlm(task, sentences: Sequence[str], out_dir: str | Path, max_tokens: int = 80) -> list[Path]:
    """Per sentence ``k`` a folder ``sentence_{k}/`` with ``encoder_layer{i}.png`` (a panel per
    head) and ``attention.npz`` (see :func:`mlm_attention`); an ``index.html`` lists them under
    each sentence and its fillers."""
    report = plots.Report(out_dir)
    for k, sentence in enumerate(sentences):
        arrays = mlm_attention(task, sentence)
        tokens = list(arrays["tokens"])
        pictures = plots.plot_encoder_layers(arrays, tokens, report.folder(f"sentence_{k}"), max_tokens)
        fillers = ", ".join(arrays["fillers"].tolist())
        report.add(f"sentence_{k}", f"{k}: {sentence}" + (f" → {fillers}" if fillers else ""), arrays, pictures)
    return report.close()


__all__ = ["inspect_mlm", "mlm_attention"]
