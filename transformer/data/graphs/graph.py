"""A graph for node classification, and the plain files a user keeps one in.

Two tab-separated files, each with a header row (the form Planetoid, OGB and PyTorch Geometric
users export to):

``nodes.tsv``, one row per node::

    id      label   split   f0      f1      ...
    paper1  Theory  train   0       1       ...
    paper2          test    1       0       ...   <- a test node without a label: refused
    paper3                  0       0       ...   <- an unlabelled node, in no split: fine

- ``id``: any string without tabs, unique; ``label``: the node's class name, empty when unknown;
  ``split``: ``train``, ``dev``, ``test`` or empty (the node is in the graph, attended to,
  never scored); a node in a split needs a label.
- every further column is one feature (its header names it); each row has exactly as many
  numbers as the header has feature columns.

``edges.tsv``, one row per edge: ``source<TAB>target`` (header ``source  target``), node ids
of ``nodes.tsv``. ``directed=False`` (the default, citation graphs) reads each edge both ways.

A bad row is a ``ValueError`` ``<file>:<line>: ...`` naming what is wrong, raised before
anything is written.

Shape legend: N nodes, F features, E directed edges, K eigenvectors.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

SPLITS = ("train", "dev", "test")
NODE_COLUMNS = ("id", "label", "split")
EDGE_COLUMNS = ("source", "target")
# Labels of nodes without one (PyTorch Geometric's ignore index is any negative; -1 here).
NO_LABEL = -1


@dataclass
class Graph:
    """One graph: ``features (N, F)`` float32, ``edge_index (2, E)`` int64 (row 0 sources, row 1
    targets, PyTorch Geometric's layout), ``labels (N,)`` int64 (``NO_LABEL`` = unknown),
    ``split (N,)`` the split of each node (``""``: none), ``ids``: each node's name,
    ``classes``: the class names (label ``c`` is ``classes[c]``), ``feature_names``."""

    features: np.ndarray
    edge_index: np.ndarray
    labels: np.ndarray
    split: np.ndarray
    ids: list[str]
    classes: list[str]
    feature_names: list[str] = field(default_factory=list)

    @property
    def n_nodes(self) -> int:
        return int(self.features.shape[0])

    def mask(self, split: str) -> np.ndarray:
        """``(N,)`` bool: the nodes of ``split``."""
        return self.split == split


def _rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and ``(line number, fields)`` of every non-empty row of a TSV file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with path.open(encoding="utf-8", newline="") as f:
        rows = [(i, row) for i, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), start=1)
                if row and any(cell.strip() for cell in row)]
    if not rows:
        raise ValueError(f"{path}: empty; expected a header row and one row per {'node' if 'node' in path.name else 'edge'}")
    return rows[0][1], rows[1:]


def read_nodes(path: str | Path) -> tuple[list[str], np.ndarray, list[str], list[str], list[str]]:
    """``(ids, features (N, F), labels (class names or ""), splits, feature names)`` of a
    ``nodes.tsv`` (module docstring)."""
    path = Path(path)
    header, rows = _rows(path)
    if tuple(c.strip() for c in header[:3]) != NODE_COLUMNS:
        raise ValueError(f"{path}:1: the header must begin id<TAB>label<TAB>split, then one column per feature; "
                         f"got {header[:3]}")
    width = len(header) - 3
    if width < 1:
        raise ValueError(f"{path}:1: no feature columns after id, label, split")
    ids, labels, splits = [], [], []
    features = np.zeros((len(rows), width), dtype=np.float32)
    seen: dict[str, int] = {}
    for n, (line, row) in enumerate(rows):
        where = f"{path}:{line}"
        if len(row) != width + 3:
            raise ValueError(f"{where}: {len(row) - 3} feature values, but the header names {width}")
        node, label, split = row[0].strip(), row[1].strip(), row[2].strip()
        if not node:
            raise ValueError(f"{where}: the node has no id")
        if node in seen:
            raise ValueError(f"{where}: node {node!r} again (first on line {seen[node]})")
        seen[node] = line
        if split not in SPLITS and split != "":
            raise ValueError(f"{where}: split {split!r}: expected train, dev, test or nothing")
        if split and not label:
            raise ValueError(f"{where}: node {node!r} is in the {split} split but has no label")
        try:
            values = np.asarray(row[3:], dtype=np.float32)  # (F,)
        except ValueError:
            bad = next(v for v in row[3:] if not _is_number(v))
            raise ValueError(f"{where}: feature value {bad!r} of node {node!r} is not a number") from None
        if not np.isfinite(values).all():
            raise ValueError(f"{where}: node {node!r} has a feature that is not finite")
        features[n] = values
        ids.append(node)
        labels.append(label)
        splits.append(split)
    if not rows:
        raise ValueError(f"{path}: no nodes, only a header")
    return ids, features, labels, splits, [c.strip() for c in header[3:]]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_edges(path: str | Path, index: dict[str, int], nodes_path: str | Path, directed: bool = False) -> np.ndarray:
    """``edge_index (2, E)`` of an ``edges.tsv`` over the nodes ``index`` (id -> row); an id not
    in ``nodes_path`` is an error naming the row; undirected edges are listed both ways."""
    path = Path(path)
    header, rows = _rows(path)
    if tuple(c.strip() for c in header) != EDGE_COLUMNS:
        raise ValueError(f"{path}:1: the header must be source<TAB>target; got {header}")
    edges = np.zeros((2, len(rows)), dtype=np.int64)
    for e, (line, row) in enumerate(rows):
        if len(row) != 2:
            raise ValueError(f"{path}:{line}: {len(row)} fields; expected source<TAB>target")
        for side, node in enumerate(cell.strip() for cell in row):
            if node not in index:
                raise ValueError(f"{path}:{line}: node {node!r} is not in {Path(nodes_path).name}")
            edges[side, e] = index[node]
    if not directed:
        edges = np.concatenate([edges, edges[::-1]], axis=1)  # (2, 2E): each edge both ways
    return np.unique(edges, axis=1) if edges.size else edges  # duplicates dropped, sorted by source


def read_graph(nodes: str | Path, edges: str | Path, directed: bool = False,
               classes: Sequence[str] | None = None) -> Graph:
    """The graph of a ``nodes.tsv`` and an ``edges.tsv`` (module docstring). ``classes``: the
    class order (a checkpoint's); by default the sorted labels of the file."""
    ids, features, names, splits, feature_names = read_nodes(nodes)
    found = sorted({name for name in names if name})
    if classes is None:
        classes = found
    else:
        order = {c: i for i, c in enumerate(classes)}
        unknown = [n for n in found if n not in order]
        if unknown:
            raise ValueError(f"{nodes}: label {unknown[0]!r} is not one of the model's classes ({', '.join(classes)})")
    order = {c: i for i, c in enumerate(classes)}
    labels = np.array([order[n] if n else NO_LABEL for n in names], dtype=np.int64)
    edge_index = read_edges(edges, {node: i for i, node in enumerate(ids)}, nodes, directed)
    return Graph(features, edge_index, labels, np.array(splits, dtype=object), ids, list(classes), feature_names)


def write_graph(graph: Graph, folder: str | Path) -> tuple[Path, Path]:
    """Write ``graph`` as ``nodes.tsv`` and ``edges.tsv`` in ``folder`` (each edge once per
    direction it has: read back with ``directed=True``, or with the default when every edge has
    its reverse). Returns the two paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = graph.feature_names or [f"f{j}" for j in range(graph.features.shape[1])]
    nodes, edges = folder / "nodes.tsv", folder / "edges.tsv"
    tmp = nodes.with_suffix(".tsv.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write("\t".join([*NODE_COLUMNS, *names]) + "\n")
        for i, node in enumerate(graph.ids):
            label = graph.classes[graph.labels[i]] if graph.labels[i] != NO_LABEL else ""
            values = "\t".join(f"{v:g}" for v in graph.features[i])
            f.write(f"{node}\t{label}\t{graph.split[i] or ''}\t{values}\n")
    tmp.replace(nodes)
    tmp = edges.with_suffix(".tsv.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write("source\ttarget\n")
        for s, t in graph.edge_index.T:
            f.write(f"{graph.ids[s]}\t{graph.ids[t]}\n")
    tmp.replace(edges)
    return nodes, edges


def normalize_rows(features: np.ndarray) -> np.ndarray:
    """Each feature row divided by its sum (rows of zeros stay zeros): what GCN and GAT do to
    Cora's bag-of-words rows (PyTorch Geometric's ``NormalizeFeatures``)."""
    sums = features.sum(axis=1, keepdims=True)  # (N, 1)
    return (features / np.where(sums == 0, 1.0, sums)).astype(np.float32)


def laplacian_eigenvectors(edge_index: np.ndarray, n_nodes: int, k: int) -> np.ndarray:
    """``(N, K)``: the eigenvectors of the symmetric normalized Laplacian
    ``L = I - D^-1/2 A D^-1/2`` with the ``K`` smallest eigenvalues, the graph positional encoding
    of Dwivedi & Bresson 2021 (a graph of several components has one eigenvalue 0 per component,
    whose eigenvectors tell the components apart). Fewer than ``K`` nodes: zero columns pad."""
    a = np.zeros((n_nodes, n_nodes), dtype=np.float64)  # (N, N) dense: eigh on a few thousand nodes takes seconds
    a[edge_index[0], edge_index[1]] = 1.0
    a = np.maximum(a, a.T)  # the Laplacian of the undirected graph
    np.fill_diagonal(a, 0.0)
    deg = a.sum(axis=1)
    inv_sqrt = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-12)), 0.0)
    lap = np.eye(n_nodes) - inv_sqrt[:, None] * a * inv_sqrt[None, :]  # (N, N)
    _, vectors = np.linalg.eigh(lap)  # ascending eigenvalues, (N, N) columns
    out = np.zeros((n_nodes, k), dtype=np.float32)
    take = min(k, n_nodes)
    out[:, :take] = vectors[:, :take]
    return out


__all__ = ["EDGE_COLUMNS", "Graph", "NODE_COLUMNS", "NO_LABEL", "SPLITS", "laplacian_eigenvectors", "normalize_rows",
           "read_edges", "read_graph", "read_nodes", "write_graph"]
