"""What a node of a graph attends to: its attention over its neighbours (and itself), per layer
and head, for a node classifier (``models.nodes``).

With attention along the edges every weight of a node falls on its neighbours; with full
attention the figure shows the neighbours' share beside the rest of the graph's (``others``), so
one sees whether the model found the graph on its own.

Shape legend: N nodes, L layers, H heads, K = the node's neighbours and itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from transformer.data.graphs.datamodule import cached_graph, graph_batch, graph_files, node_inputs
from transformer.inspect import plots


def load_graph(data: dict, classes: Sequence[str]):
    """``(graph, batch)`` of a checkpoint's ``data`` settings (every labelled node scored)."""
    nodes, edges = graph_files(data)
    graph = cached_graph(nodes, edges, bool(data.get("directed", False)))
    if list(graph.classes) != list(classes):
        raise ValueError(f"{nodes}: the classes are {graph.classes}, the model's {list(classes)}")
    src = node_inputs(graph, bool(data.get("normalize_features", True)), int(data.get("laplacian_k") or 0),
                      data.get("data_dir"))
    return graph, graph_batch(graph, src, None)


@torch.no_grad()
def node_attention(model: torch.nn.Module, graph, batch: dict, node: str, classes: Sequence[str]) -> dict[str, np.ndarray]:
    """One node's attention: ``neighbours`` (axis labels ``id (class)``, itself first),
    ``weights (L, H, K)`` on them, ``others (L, H)`` the weight on every other node (0 along the
    edges), ``probabilities (C,)`` of its classes."""
    index = {name: i for i, name in enumerate(graph.ids)}
    if node not in index:
        raise ValueError(f"node {node!r} is not a node of the checkpoint's graph ({graph.n_nodes} nodes)")
    i = index[node]
    model.eval()
    logits, weights = model(batch["src"], batch["edge_index"], batch["src_lengths"], need_weights=True)
    near = [i] + sorted(set(graph.edge_index[0][graph.edge_index[1] == i].tolist()) - {i})  # senders into i
    rows = torch.stack([w[0, :, i] for w in weights]).float()  # L x (H, N) -> (L, H, N)
    on = rows[:, :, near]  # (L, H, K)
    labels = [graph.classes[c] if c >= 0 else "?" for c in graph.labels.tolist()]
    names = [f"{graph.ids[j]} ({labels[j]})" + (" self" if j == i else "") for j in near]
    return {"neighbours": np.array(names), "weights": on.numpy(), "others": (rows.sum(-1) - on.sum(-1)).numpy(),
            "probabilities": torch.softmax(logits[0, i].float(), dim=-1).numpy(), "classes": np.array(list(classes))}


def inspect_nodes(model: torch.nn.Module, classes: Sequence[str], data: dict, nodes: Sequence[str],
                  out_dir: str | Path, max_tokens: int = 80) -> list[Path]:
    """Per node a folder ``node_<id>/`` with ``attention.png`` (a row per layer and head, a
    column per neighbour, and ``others`` for the rest of the graph) and ``attention.npz``
    (:func:`node_attention`); an ``index.html`` lists them under each node and its predicted class."""
    report = plots.Report(out_dir)
    graph, batch = load_graph(data, classes)
    for node in nodes:
        arrays = node_attention(model, graph, batch, node, classes)
        w, others = arrays["weights"], arrays["others"]  # (L, H, K), (L, H)
        n_layers, n_heads, _ = w.shape
        matrix = np.concatenate([w, others[..., None]], axis=-1).reshape(n_layers * n_heads, -1)  # (L·H, K + 1)
        rows = [f"layer {layer} head {h}" for layer in range(n_layers) for h in range(n_heads)]
        folder = report.folder(f"node_{node}")
        plots.plot_matrix(matrix, rows, [*arrays["neighbours"], "others"],
                          f"node {node}: attention over its neighbours", folder / "attention.png",
                          xlabel="neighbour (class)", ylabel="layer, head", max_tokens=max_tokens)
        best = int(arrays["probabilities"].argmax())
        gold = graph.labels[graph.ids.index(node)]
        truth = f", gold {classes[gold]}" if gold >= 0 else ""
        report.add(f"node_{node}", f"node {node} → {classes[best]} ({arrays['probabilities'][best]:.2f}{truth})",
                   arrays, ["attention.png"])
    return report.close()


__all__ = ["inspect_nodes", "load_graph", "node_attention"]
