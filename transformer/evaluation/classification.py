"""Sentence classification scores: accuracy, macro-F1 and per-class counts from gold and
predicted label ids, and evaluating a classifier on a split (writing its predictions and
scores). Validation, ``transformer-evaluate`` and ensembles all score through
:func:`classification_metrics`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import torch

from transformer.data.core.readers import DataFormatError
from transformer.data.labelled.corpus import label_ids, read_split, split_path
from transformer.files import inside, write_text


def confusion_matrix(gold: torch.Tensor, pred: torch.Tensor, n_classes: int) -> torch.Tensor:
    """``(C, C)`` long counts, row = gold label, column = predicted label."""
    flat = gold.long() * n_classes + pred.long()  # (N,)
    return torch.bincount(flat, minlength=n_classes * n_classes).view(n_classes, n_classes)


def classification_metrics(confusion: torch.Tensor, labels: Sequence[str]) -> dict:
    """Accuracy, macro-F1 (the unweighted mean of the per-class F1 over every label, so a
    rare class weighs as much as a frequent one) and per class: ``gold`` (support),
    ``predicted``, ``correct``, precision, recall, F1 (0 where undefined)."""
    c = confusion.double()
    correct = c.diagonal()  # (C,)
    gold, predicted = c.sum(1), c.sum(0)  # (C,), (C,)
    precision = torch.where(predicted > 0, correct / predicted.clamp(min=1), torch.zeros_like(correct))
    recall = torch.where(gold > 0, correct / gold.clamp(min=1), torch.zeros_like(correct))
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall).clamp(min=1e-12),
                     torch.zeros_like(correct))
    n = int(c.sum())
    per_class = {
        label: {"gold": int(gold[i]), "predicted": int(predicted[i]), "correct": int(correct[i]),
                "precision": float(precision[i]), "recall": float(recall[i]), "f1": float(f1[i])}
        for i, label in enumerate(labels)
    }
    return {"n": n, "correct": int(correct.sum()), "acc": float(correct.sum() / max(n, 1)),
            "macro_f1": float(f1.mean()), "per_class": per_class}


def evaluate_classification(classifier, data: dict, split: str, output_dir: Path | str = "eval",
                            data_labels: Sequence[str] | None = None) -> dict:
    """Classify a split with ``classifier`` (an ``inference.classifier.SentenceClassifier``)
    and score it against its labels. ``data_labels``: the labels as the files write them, in
    the order of ``classifier.labels`` (their names, which the report and predictions show);
    None: the same.

    Writes ``{name}.{split}.predictions.tsv`` (predicted label, its probability, gold label,
    text; file order; labels by name) and ``{name}.{split}.metrics.json`` into ``output_dir``; returns the
    metrics. A row whose label the training file did not have is a ``DataFormatError``, and so
    is a speech manifest without a speaker column for a speaker-normalised checkpoint.
    """
    path = split_path(data, split)
    rows = read_split(data, split)
    names = classifier.labels
    gold = torch.as_tensor(label_ids(rows, data_labels or names), dtype=torch.long)  # (N,)
    speakers = {}
    if data.get("normalize", "utterance") != "utterance":  # a speech checkpoint normalised per speaker
        if not rows.speakers:
            raise DataFormatError(path, 1, f"no speaker column; the checkpoint's data.normalize={data['normalize']} "
                                           f"needs each row's speaker (audio path<TAB>label<TAB>speaker)")
        speakers = {"speakers": rows.speakers}
    start = time.perf_counter()
    probs = classifier.probabilities(rows.texts, **speakers)  # (N, C)
    seconds = time.perf_counter() - start
    best, pred = probs.max(dim=-1)  # (N,), (N,)
    metrics = {"split": split, "file": str(path), "dataset": data.get("name"),
               **classification_metrics(confusion_matrix(gold, pred, len(names)), names),
               "truncated": classifier.truncated, "classify_seconds": round(seconds, 3)}
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # The dataset's name comes from the checkpoint: it names a file in ``out``, nothing more.
    stem = f"{data.get('name') or 'classification'}.{Path(split).stem if split not in data.get('paths', {}) else split}"
    lines = [f"{names[p]}\t{b:.4f}\t{names[g]}\t{rows.texts[i]}"
             for i, (p, b, g) in enumerate(zip(pred.tolist(), best.tolist(), gold.tolist()))]
    write_text(inside(out, f"{stem}.predictions.tsv"), "".join(line + "\n" for line in lines))
    write_text(inside(out, f"{stem}.metrics.json"), json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    return metrics


__all__ = ["classification_metrics", "confusion_matrix", "evaluate_classification"]
