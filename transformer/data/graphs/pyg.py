"""PyTorch Geometric's ``Data`` fields, read and written without depending on the library.

A PyG graph for node classification carries ``x (N, F)``, ``edge_index (2, E)``, ``y (N,)``
and the boolean ``train_mask``, ``val_mask``, ``test_mask`` ``(N,)``. :func:`from_pyg` reads
those fields from any object that has them (a ``torch_geometric.data.Data``, or anything alike)
into a :class:`~transformer.data.graphs.graph.Graph`, which ``write_graph`` saves as the plain
files training reads; :func:`to_pyg` makes a ``Data`` of a graph when ``torch_geometric`` is
installed (or of ``data_class``, any class taking those fields as keywords).

    from transformer.data.graphs.graph import write_graph
    write_graph(from_pyg(dataset[0]), "my_graph")   # then: transformer-train experiment=graph_nodes \\
                                                     #   data.nodes=my_graph/nodes.tsv data.edges=my_graph/edges.tsv
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Sequence

import numpy as np
import torch

from transformer.data.graphs.graph import NO_LABEL, Graph

#: PyG's mask fields and the split each marks.
MASKS = {"train_mask": "train", "val_mask": "dev", "test_mask": "test"}


def _array(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def from_pyg(data: Any, classes: Sequence[str] | None = None, ids: Sequence[str] | None = None,
             directed: bool = False) -> Graph:
    """The graph of a PyG ``Data`` (or any object with its fields): ``x``, ``edge_index``, ``y``
    and the three masks (missing masks: no node in that split). ``classes``: the names of
    classes ``0 .. C-1`` (default ``"0"``, ``"1"`` ...); ``ids``: node names (default their
    index); ``directed=False`` adds each edge's reverse where the graph lacks it."""
    for name in ("x", "edge_index", "y"):
        if getattr(data, name, None) is None:
            raise ValueError(f"a PyG graph needs the field {name!r}")
    x = _array(data.x).astype(np.float32)
    if x.ndim != 2:
        raise ValueError(f"x: expected (nodes, features), got shape {tuple(x.shape)}")
    n = x.shape[0]
    edge_index = _array(data.edge_index).astype(np.int64)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index: expected (2, edges), got shape {tuple(edge_index.shape)}")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        raise ValueError(f"edge_index: an edge names a node outside 0..{n - 1}")
    if not directed:
        edge_index = np.concatenate([edge_index, edge_index[::-1]], axis=1)
    edge_index = np.unique(edge_index, axis=1) if edge_index.size else edge_index
    y = _array(data.y).astype(np.int64).reshape(-1)
    if y.shape[0] != n:
        raise ValueError(f"y: {y.shape[0]} labels for {n} nodes")
    split = np.full(n, "", dtype=object)
    for field, name in MASKS.items():
        mask = getattr(data, field, None)
        if mask is not None:
            split[_array(mask).astype(bool)] = name
    n_classes = int(y.max()) + 1 if (y >= 0).any() else 0
    classes = list(classes) if classes is not None else [str(c) for c in range(n_classes)]
    if len(classes) < n_classes:
        raise ValueError(f"y: class {n_classes - 1} but {len(classes)} class names")
    labels = np.where(y >= 0, y, NO_LABEL)
    return Graph(x, edge_index, labels, split, list(ids) if ids is not None else [str(i) for i in range(n)], classes)


def pyg_fields(graph: Graph) -> dict[str, torch.Tensor]:
    """A graph as ``Data``'s fields (``y`` 0 for nodes without a label, as PyG's Planetoid gives
    CiteSeer's missing test rows; no mask holds them)."""
    fields = {"x": torch.from_numpy(graph.features.copy()), "edge_index": torch.from_numpy(graph.edge_index.copy()),
              "y": torch.from_numpy(np.where(graph.labels >= 0, graph.labels, 0))}
    for field, name in MASKS.items():
        fields[field] = torch.from_numpy(graph.mask(name).astype(bool))
    return fields


def to_pyg(graph: Graph, data_class: Callable[..., Any] | None = None) -> Any:
    """A ``torch_geometric.data.Data`` of ``graph`` (:func:`pyg_fields`), or a ``data_class``
    built with the same keywords; without either, an ``ImportError`` saying what to install."""
    if data_class is None:
        if importlib.util.find_spec("torch_geometric") is None:
            raise ImportError("to_pyg needs torch_geometric (pip install torch_geometric), or a data_class")
        from torch_geometric.data import Data

        data_class = Data
    return data_class(**pyg_fields(graph))


__all__ = ["MASKS", "from_pyg", "pyg_fields", "to_pyg"]
