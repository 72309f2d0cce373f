"""Scoring a node classifier on one split of its graph: accuracy (what GCN and GAT report on
Planetoid) and the per-class figures of ``evaluation.classification``.

Shape legend: N nodes, C classes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import torch

from transformer.data.graphs.datamodule import SPLITS, cached_graph, graph_batch, graph_files, node_inputs
from transformer.evaluation.classification import classification_metrics, confusion_matrix
from transformer.files import inside, write_text


def graph_of(data: dict, classes: Sequence[str]):
    """``(graph, batch inputs)`` of a checkpoint's ``data`` settings, the classes checked
    against the model's."""
    nodes, edges = graph_files(data)
    graph = cached_graph(nodes, edges, bool(data.get("directed", False)))
    if list(graph.classes) != list(classes):
        raise ValueError(f"{nodes}: the classes are {graph.classes}, the model's {list(classes)}: the file changed "
                         f"since training")
    src = node_inputs(graph, bool(data.get("normalize_features", True)), int(data.get("laplacian_k") or 0),
                      data.get("data_dir"))
    return graph, src


@torch.no_grad()
def predict_nodes(model: torch.nn.Module, batch: dict, device: torch.device | str = "cpu") -> torch.Tensor:
    """Class probabilities ``(N, C)`` of every node of a one-graph batch."""
    model.eval()
    logits = model(batch["src"].to(device), batch["edge_index"].to(device), batch["src_lengths"].to(device))
    return torch.softmax(logits[0].float(), dim=-1).cpu()  # (1, N, C) -> (N, C)


def evaluate_nodes(model: torch.nn.Module, classes: Sequence[str], data: dict, split: str,
                   output_dir: Path | str = "eval", device: torch.device | str = "cpu") -> dict:
    """Classify every node, score ``split``'s (``train``, ``dev`` or ``test``).

    Writes ``{name}.{split}.predictions.tsv`` (node id, predicted class, its probability, gold
    class) and ``{name}.{split}.metrics.json`` into ``output_dir``; returns the metrics
    (``acc``, ``macro_f1``, ``n`` ...)."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: a graph's splits are {', '.join(SPLITS)}")
    graph, src = graph_of(data, classes)
    batch = graph_batch(graph, src, split)
    start = time.perf_counter()
    probs = predict_nodes(model, batch, device)  # (N, C)
    seconds = time.perf_counter() - start
    scored = batch["labels"][0].ne(-100)  # (N,)
    if not bool(scored.any()):
        raise ValueError(f"split={split}: no labelled node of the graph is in it")
    best, pred = probs.max(dim=-1)  # (N,), (N,)
    gold = batch["labels"][0]
    metrics = {"split": split, "dataset": data.get("name"), "nodes": int(graph.n_nodes),
               **classification_metrics(confusion_matrix(gold[scored], pred[scored], len(classes)), list(classes)),
               "classify_seconds": round(seconds, 3)}
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{data.get('name') or 'graph'}.{split}"
    lines = [f"{graph.ids[i]}\t{classes[pred[i]]}\t{best[i]:.4f}\t{classes[gold[i]]}\n"
             for i in scored.nonzero().flatten().tolist()]
    write_text(inside(out, f"{stem}.predictions.tsv"), "".join(lines))
    write_text(inside(out, f"{stem}.metrics.json"), json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    return metrics


__all__ = ["evaluate_nodes", "graph_of", "predict_nodes"]
