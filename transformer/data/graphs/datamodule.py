"""Node classification data: one graph, whose nodes are one "sequence", for Lightning.

Every split is the same graph; what differs is which nodes are scored. A batch is the whole
graph (transductive node classification, as GCN and GAT train on Cora):

- ``src (1, N, F [+ K])`` float: each node's features (rows normalized to sum 1 with
  ``normalize_features``), followed by ``K = laplacian_k`` Laplacian eigenvectors when asked;
- ``edge_index (2, E)`` long: the directed edges (the model makes its attention mask from them,
  ``modules.attention.adjacency_mask``);
- ``labels (1, N)`` long: each node's class in the split, :data:`IGNORE` elsewhere;
- ``src_lengths (1,)``: N.

The graph comes from a user's ``nodes.tsv`` and ``edges.tsv`` (``data.graphs.graph`` documents
them) or a preset (``cora``, ``citeseer``: ``data.graphs.planetoid`` writes those files).
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Annotated, Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from transformer.data.graphs.graph import SPLITS, Graph, laplacian_eigenvectors, normalize_rows, read_graph
from transformer.ranges import Range

# The label of a node outside the split a batch scores (``F.cross_entropy``'s ignore_index).
IGNORE = -100
PRESETS = ("cora", "citeseer")
MAX_LAPLACIAN_K = 512


def check_graph(d: dict, where: str = "data", complete: bool = False) -> None:
    """A graph data config before the run folder exists: the input kind, the preset or the two
    files (read here, so a bad row is reported before anything is written), ``laplacian_k``."""
    if d.get("input", "nodes") != "nodes":
        raise ValueError(f"{where}.input={d.get('input')!r}: a graph data module reads nodes")
    preset, nodes, edges = d.get("preset"), d.get("nodes"), d.get("edges")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"{where}.preset={preset!r}: unknown (known: {', '.join(PRESETS)}; null for your own graph)")
    if preset is not None and (nodes or edges):
        raise ValueError(f"{where}.preset={preset} and {where}.{'nodes' if nodes else 'edges'}: two graphs; "
                         f"give a preset or your own files, not both")
    if preset is None and (nodes is None) != (edges is None):
        missing = "edges" if edges is None else "nodes"
        raise ValueError(f"{where}.{missing}: required beside {where}.{'nodes' if edges is None else 'edges'} "
                         f"(a graph is a nodes.tsv and an edges.tsv)")
    if preset is None and nodes is None and complete:
        raise ValueError(f"{where}.nodes and {where}.edges: required (your graph's nodes.tsv and edges.tsv), or "
                         f"{where}.preset=cora|citeseer")
    k = d.get("laplacian_k", 0)
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_LAPLACIAN_K:
        raise ValueError(f"{where}.laplacian_k={k!r}: expected a count of eigenvectors from 0 to {MAX_LAPLACIAN_K}")
    if nodes is not None and edges is not None:
        graph = cached_graph(str(nodes), str(edges), bool(d.get("directed", False)))
        for split in ("train", "dev"):
            if not graph.mask(split).any():
                raise ValueError(f"{nodes}: no node in the {split} split (the split column: train, dev, test)")


@functools.lru_cache(maxsize=4)
def _read(nodes: str, edges: str, directed: bool, stamp: tuple) -> Graph:
    return read_graph(nodes, edges, directed)


def cached_graph(nodes: str | Path, edges: str | Path, directed: bool = False) -> Graph:
    """:func:`read_graph`, read once per process while the files stay as they are (the check
    before a run and the run itself read the same files)."""
    stamp = tuple((p.stat().st_mtime_ns, p.stat().st_size) if p.is_file() else None for p in (Path(nodes), Path(edges)))
    return _read(str(nodes), str(edges), directed, stamp)


def graph_files(settings: dict) -> tuple[Path, Path]:
    """The ``nodes.tsv`` and ``edges.tsv`` a data config or a checkpoint's ``data`` settings name
    (a preset's written into ``data_dir`` first)."""
    if settings.get("preset"):
        try:
            from transformer.data.graphs.planetoid import write_planetoid
        except ImportError as exc:  # scipy: the Planetoid pickles hold its sparse matrices
            raise ValueError(f"data.preset={settings['preset']}: reading the Planetoid files needs {exc.name} "
                             f"(pip install -e \".[graphs]\")") from None

        return write_planetoid(settings["preset"], settings.get("data_dir") or "data/cache", settings.get("mirror_root"))
    return Path(settings["nodes"]), Path(settings["edges"])


def eigenvectors(graph: Graph, k: int, cache_dir: str | os.PathLike | None) -> np.ndarray:
    """``(N, K)`` Laplacian eigenvectors of ``graph`` (``laplacian_eigenvectors``), kept in
    ``cache_dir/graphs/`` by a hash of the edges: a dense eigendecomposition of a few thousand
    nodes takes seconds, every run of a recipe needs the same one."""
    digest = hashlib.sha256(graph.edge_index.tobytes() + str(graph.n_nodes).encode()).hexdigest()[:24]
    path = Path(cache_dir) / "graphs" / f"laplacian-{digest}-{k}.npy" if cache_dir else None
    if path is not None and path.is_file():
        vectors = np.load(path, allow_pickle=False)
        if vectors.shape == (graph.n_nodes, k):
            return vectors
    vectors = laplacian_eigenvectors(graph.edge_index, graph.n_nodes, k)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, vectors, allow_pickle=False)
        tmp.replace(path)
    return vectors


def node_inputs(graph: Graph, normalize_features: bool = True, laplacian_k: int = 0,
                cache_dir: str | os.PathLike | None = None) -> torch.Tensor:
    """``(N, F [+ K])`` float: what the front end reads for each node (module docstring)."""
    x = normalize_rows(graph.features) if normalize_features else graph.features
    if laplacian_k:
        x = np.concatenate([x, eigenvectors(graph, laplacian_k, cache_dir)], axis=1)  # (N, F + K)
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def graph_batch(graph: Graph, src: torch.Tensor, split: str | None) -> dict[str, torch.Tensor]:
    """The whole graph as one batch scoring ``split``'s nodes (None: every labelled node)."""
    labels = torch.from_numpy(graph.labels.copy())  # (N,)
    if split is not None:
        labels[~torch.from_numpy(graph.mask(split))] = IGNORE
    labels[labels < 0] = IGNORE
    return {"src": src.unsqueeze(0), "edge_index": torch.from_numpy(graph.edge_index.copy()),
            "labels": labels.unsqueeze(0), "src_lengths": torch.tensor([graph.n_nodes])}


class GraphDataModule(L.LightningDataModule):
    """One graph's node splits (module docstring).

    Args:
        nodes, edges: a user's ``nodes.tsv`` and ``edges.tsv`` (``data.graphs.graph``).
        preset: ``cora`` or ``citeseer`` (the Planetoid public split) instead of files.
        name: what runs and outputs are called; None: the preset's name, else ``graph``.
        directed: read ``edges.tsv`` as directed edges (a node attends to the nodes with an edge
            into it); default undirected, each edge both ways.
        normalize_features: divide each feature row by its sum (GCN's and GAT's preprocessing).
        laplacian_k: append this many Laplacian eigenvectors to each node's features, for
            ``LaplacianNodeFeatures`` (the front end's ``laplacian_k`` must match); 0 = none.
        data_dir: where a preset's files are fetched and written, and eigenvectors kept.
        mirror_root: a preset's byte-for-byte mirror root (None: ``$TRANSFORMER_DATA_MIRROR``, else download).
        input: the input kind (``transformer.kinds``): ``nodes``.
    """

    check_config = staticmethod(check_graph)  # before the run folder is written
    #: The one batch (the whole graph) is the same every epoch: the loader is never made again.
    draws_each_epoch = False

    def __init__(self, nodes: str | None = None, edges: str | None = None, preset: str | None = None,
                 name: str | None = None, directed: bool = False, normalize_features: bool = True,
                 laplacian_k: Annotated[int, Range(0, MAX_LAPLACIAN_K)] = 0,
                 data_dir: str | os.PathLike = "data/cache", mirror_root: str | None = None,
                 input: str = "nodes", seed: int = 0, num_workers: Annotated[int, Range(0, 1024)] = 0):
        super().__init__()
        check_graph({"nodes": nodes, "edges": edges, "preset": preset, "laplacian_k": laplacian_k, "input": input})
        self.nodes = str(Path(nodes).resolve()) if nodes else None
        self.edges = str(Path(edges).resolve()) if edges else None
        self.preset, self.name, self.directed = preset, name or preset or "graph", directed
        self.normalize_features, self.laplacian_k = normalize_features, laplacian_k
        self.data_dir, self.mirror_root = str(data_dir), mirror_root
        self.tokenizer = None
        self.graph: Graph | None = None
        self.src: torch.Tensor | None = None

    def settings(self) -> dict[str, Any]:
        """What a checkpoint keeps to read the graph again: the files (absolute) or the preset,
        and how the nodes' inputs are made."""
        return {"name": self.name, "input": "nodes", "nodes": self.nodes, "edges": self.edges, "preset": self.preset,
                "directed": self.directed, "normalize_features": self.normalize_features,
                "laplacian_k": self.laplacian_k, "data_dir": self.data_dir, "mirror_root": self.mirror_root}

    def prepare_data(self) -> None:
        graph_files(self.settings())

    def setup(self, stage: str | None = None) -> None:
        if self.graph is not None:
            return
        nodes, edges = graph_files(self.settings())
        self.graph = cached_graph(nodes, edges, self.directed)
        self.src = node_inputs(self.graph, self.normalize_features, self.laplacian_k, self.data_dir)

    @property
    def classes(self) -> list[str]:
        return list(self.graph.classes)

    @property
    def n_features(self) -> int:
        """F: the feature columns (without the eigenvectors)."""
        return int(self.graph.features.shape[1])

    def _loader(self, split: str) -> DataLoader:
        return DataLoader([graph_batch(self.graph, self.src, split)], batch_size=None, shuffle=False)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("dev")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")


__all__ = ["GraphDataModule", "IGNORE", "PRESETS", "SPLITS", "cached_graph", "check_graph", "graph_batch",
           "graph_files", "node_inputs"]
