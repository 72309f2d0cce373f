"""The Planetoid citation graphs (Cora, CiteSeer) as a preset of the plain graph files.

Yang, Cohen & Salakhutdinov 2016 (github.com/kimiyoung/planetoid, MIT) published each graph as
eight files, ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}``: Python 2 pickles of scipy
sparse feature rows, numpy one-hot labels and a dict-of-lists adjacency, and a text file of the
test nodes. Every file is fetched like any other dataset file (cache, then the mirror root, then
the commit-pinned upstream URL, sha256-checked: ``planetoid.sha256`` beside this module) and
unpickled by :class:`RestrictedUnpickler`, which admits only the classes those files hold: a
crafted file cannot run code.

The split is the standard "public" one every GNN paper reports (GCN, GAT; PyTorch Geometric's
and DGL's ``Planetoid`` readers): training nodes ``0 .. len(y) - 1`` (20 per class), the next
500 validate, the 1,000 of ``test.index`` test. CiteSeer's test indices skip 15 nodes of the
graph that have no row in ``tx``/``ty`` (the "isolated" test nodes of the libraries' notes); as
those libraries do, they get zero feature rows, and here no label and no split (PyTorch
Geometric gives them label 0, never scored). Their edges stay.

:func:`write_planetoid` writes the graph as ``nodes.tsv`` and ``edges.tsv``
(``data.graphs.graph``): what a user with their own graph has, the main path.
"""

from __future__ import annotations

import collections
import functools
import io
import os
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse

from transformer.data.core.sources import Source, fetch_source, pinned_sources
from transformer.data.graphs.graph import NO_LABEL, Graph, write_graph

PLANETOID_COMMIT = "af6abf4"
PLANETOID_URL = f"https://raw.githubusercontent.com/kimiyoung/planetoid/{PLANETOID_COMMIT}/data/"
NAMES = ("cora", "citeseer")
PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
N_DEV = 500


def _reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct as fn  # numpy 2
    except ImportError:  # numpy 1
        from numpy.core.multiarray import _reconstruct as fn
    return fn


# Exactly the globals the Planetoid pickles name (protocol 2, written by Python 2): numpy arrays
# (ndarray, dtype, the _reconstruct helper their __reduce__ names), scipy's CSR matrix, and the
# adjacency's defaultdict(list). Anything else is refused before it is looked up.
ALLOWED = {
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("scipy.sparse.csr", "csr_matrix"): lambda: scipy.sparse.csr_matrix,
    ("collections", "defaultdict"): lambda: collections.defaultdict,
    ("__builtin__", "list"): lambda: list,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds only the classes of :data:`ALLOWED`; any other global (``os.system``,
    ``builtins.eval``, ...) is a ``pickle.UnpicklingError`` naming it, and nothing is called."""

    def find_class(self, module: str, name: str):
        make = ALLOWED.get((module, name))
        if make is None:
            raise pickle.UnpicklingError(f"refused global {module}.{name}: a Planetoid file holds only numpy arrays, "
                                         f"a scipy CSR matrix and a dict of lists")
        return make()


def restricted_load(path: str | Path):
    """Unpickle ``path`` with :class:`RestrictedUnpickler` (latin-1 for Python 2's byte strings);
    a refused or broken file is a ``ValueError`` naming it."""
    data = Path(path).read_bytes()
    try:
        return RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except pickle.UnpicklingError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except Exception as exc:  # truncated or garbage bytes
        raise ValueError(f"{path}: not a readable Planetoid pickle ({type(exc).__name__}: {exc})") from None


@functools.lru_cache(maxsize=1)
def planetoid_sources() -> dict[str, Source]:
    """Each file's :class:`Source` (relative path ``planetoid/ind.<name>.<part>``, pinned URL, sha256)."""
    return pinned_sources(Path(__file__).with_name("planetoid.sha256"), PLANETOID_URL)


def fetch_planetoid(name: str, cache_dir: str | os.PathLike, mirror_root: str | os.PathLike | None = None,
                    base_url: str | None = None) -> dict[str, Path]:
    """The eight local, checksum-verified files of ``name`` by part (``fetch_source``'s order:
    cache, mirror, download)."""
    if name not in NAMES:
        raise ValueError(f"data.preset={name!r}: the Planetoid graphs are {', '.join(NAMES)}")
    sources = planetoid_sources()
    return {part: fetch_source(sources[f"planetoid/ind.{name}.{part}"], cache_dir, mirror_root, base_url)
            for part in PARTS}


def _typed(value, kind, path: Path):
    if not isinstance(value, kind):
        raise ValueError(f"{path}: holds a {type(value).__name__}, expected a {kind.__name__}")
    return value


def planetoid_graph(files: dict[str, Path]) -> Graph:
    """The graph of the eight files (:func:`fetch_planetoid`), split as the libraries split it
    (module docstring)."""
    x, tx, allx = (_typed(restricted_load(files[p]), scipy.sparse.spmatrix, files[p]) for p in ("x", "tx", "allx"))
    y, ty, ally = (_typed(restricted_load(files[p]), np.ndarray, files[p]) for p in ("y", "ty", "ally"))
    adjacency = _typed(restricted_load(files["graph"]), dict, files["graph"])
    test_index = np.array([int(line) for line in files["test.index"].read_text().split()], dtype=np.int64)
    sorted_test = np.sort(test_index)
    lo, hi = int(sorted_test[0]), int(sorted_test[-1])
    if hi - lo + 1 > tx.shape[0]:
        # CiteSeer: test indices skip 15 nodes without rows; they get zero rows (and no label).
        tx_full = scipy.sparse.lil_matrix((hi - lo + 1, tx.shape[1]), dtype=np.float32)
        tx_full[sorted_test - lo, :] = tx
        ty_full = np.zeros((hi - lo + 1, ty.shape[1]), dtype=ty.dtype)
        ty_full[sorted_test - lo, :] = ty
        tx, ty = tx_full.tocsr(), ty_full
    features = np.asarray(scipy.sparse.vstack([allx, tx]).todense(), dtype=np.float32)  # (N, F)
    onehot = np.concatenate([ally, ty], axis=0)  # (N, C)
    features[test_index] = features[sorted_test]  # the files list test rows in sorted order
    onehot[test_index] = onehot[sorted_test]
    n = features.shape[0]
    labels = np.where(onehot.sum(axis=1) > 0, onehot.argmax(axis=1), NO_LABEL).astype(np.int64)
    split = np.full(n, "", dtype=object)
    split[: y.shape[0]] = "train"
    split[y.shape[0]: y.shape[0] + N_DEV] = "dev"
    split[sorted_test] = "test"
    pairs = {(int(s), int(t)) for s, targets in adjacency.items() for t in targets}
    pairs |= {(t, s) for s, t in pairs}  # undirected citations, both ways
    pairs = {(s, t) for s, t in pairs if s != t}  # self-citations dropped, as the libraries do: attention adds self-loops
    edge_index = np.array(sorted(pairs), dtype=np.int64).T.reshape(2, -1)  # (2, E)
    if edge_index.size and (edge_index.max() >= n or edge_index.min() < 0):
        raise ValueError(f"{files['graph']}: an edge names a node outside 0..{n - 1}")
    return Graph(features, edge_index, labels, split, [str(i) for i in range(n)],
                 [str(c) for c in range(onehot.shape[1])])


def write_planetoid(name: str, data_dir: str | os.PathLike, mirror_root: str | os.PathLike | None = None,
                    base_url: str | None = None) -> tuple[Path, Path]:
    """``(nodes.tsv, edges.tsv)`` of Planetoid's ``name`` under ``data_dir/planetoid/<name>/``,
    written once from the fetched files (each undirected edge once, ``source < target``)."""
    folder = Path(data_dir) / "planetoid" / name
    nodes, edges = folder / "nodes.tsv", folder / "edges.tsv"
    if nodes.is_file() and edges.is_file():
        return nodes, edges
    graph = planetoid_graph(fetch_planetoid(name, data_dir, mirror_root, base_url))
    once = graph.edge_index[:, graph.edge_index[0] <= graph.edge_index[1]]  # (2, E / 2 + self-loops)
    graph.edge_index = once
    graph.feature_names = [f"w{j}" for j in range(graph.features.shape[1])]
    return write_graph(graph, folder)


__all__ = ["ALLOWED", "NAMES", "RestrictedUnpickler", "fetch_planetoid", "planetoid_graph", "planetoid_sources",
           "restricted_load", "write_planetoid"]
