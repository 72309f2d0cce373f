"""A user's graph in plain files: read back as written, edges both ways unless directed, and
every bad row refused with the file and line named."""

from __future__ import annotations

import numpy as np
import pytest

from tests.data.graphs.graph_files import EDGES, NODES, write_tiny_graph
from transformer.data.graphs.datamodule import IGNORE, GraphDataModule, check_graph, graph_batch
from transformer.data.graphs.graph import laplacian_eigenvectors, normalize_rows, read_graph, write_graph


def test_a_graph_reads_as_written_and_writes_back(tmp_path):
    graph = read_graph(*write_tiny_graph(tmp_path / "in"))
    assert graph.ids == [row[0] for row in NODES] and graph.classes == ["x", "y"]
    assert graph.labels.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, -1]
    assert graph.features[1].tolist() == [1, 0, 1]
    assert [int(graph.mask(s).sum()) for s in ("train", "dev", "test")] == [4, 2, 2]
    pairs = {(graph.ids[s], graph.ids[t]) for s, t in graph.edge_index.T}
    assert pairs == set(EDGES) | {(t, s) for s, t in EDGES}  # undirected: both ways
    again = read_graph(*write_graph(graph, tmp_path / "out"), directed=True)
    assert np.array_equal(again.edge_index, graph.edge_index) and np.array_equal(again.features, graph.features)
    assert again.ids == graph.ids and list(again.split) == list(graph.split)


def test_directed_edges_are_read_one_way(tmp_path):
    graph = read_graph(*write_tiny_graph(tmp_path), directed=True)
    assert graph.edge_index.shape == (2, len(EDGES))


BAD = {
    "an edge to a node that does not exist": (
        NODES, EDGES[:3] + [("c", "zz")] + EDGES[3:], "edges.tsv:5: node 'zz' is not in nodes.tsv"),
    "a feature row of the wrong width": (
        NODES[:2] + [("c", "x", "dev", 1, 1)] + NODES[3:], EDGES, "nodes.tsv:4: 2 feature values, but the header names 3"),
    "a label missing in a split": (
        NODES[:3] + [("d", "", "test", 0, 0, 1)] + NODES[4:], EDGES,
        "nodes.tsv:5: node 'd' is in the test split but has no label"),
    "a feature that is not a number": (
        NODES[:1] + [("b", "x", "train", 1, "lots", 1)] + NODES[2:], EDGES,
        "nodes.tsv:3: feature value 'lots' of node 'b' is not a number"),
    "an unknown split": (NODES[:1] + [("b", "x", "validation", 1, 0, 1)] + NODES[2:], EDGES,
                         "nodes.tsv:3: split 'validation'"),
    "a node twice": (NODES + [("a", "x", "", 0, 0, 0)], EDGES, "nodes.tsv:11: node 'a' again"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_row_is_refused_naming_the_file_and_line(tmp_path, case):
    nodes, edges, message = BAD[case]
    n, e = write_tiny_graph(tmp_path, nodes, edges)
    with pytest.raises(ValueError) as info:
        read_graph(n, e)
    assert message in str(info.value) and str(tmp_path) in str(info.value)


def test_the_data_config_is_checked_before_anything_is_read_or_written(tmp_path):
    n, e = write_tiny_graph(tmp_path)
    check_graph({"nodes": str(n), "edges": str(e)}, complete=True)
    with pytest.raises(ValueError, match="data.edges: required"):
        check_graph({"nodes": str(n)})
    with pytest.raises(ValueError, match="data.preset=cora and data.nodes: two graphs"):
        check_graph({"preset": "cora", "nodes": str(n), "edges": str(e)})
    with pytest.raises(ValueError, match="data.nodes and data.edges: required"):
        check_graph({}, complete=True)
    with pytest.raises(ValueError, match="data.preset='pubmed'"):
        check_graph({"preset": "pubmed"})
    with pytest.raises(ValueError, match="data.laplacian_k=-1"):
        check_graph({"preset": "cora", "laplacian_k": -1})
    no_dev = [row if row[2] != "dev" else (*row[:2], "train", *row[3:]) for row in NODES]
    n, e = write_tiny_graph(tmp_path / "nodev", no_dev)
    with pytest.raises(ValueError, match="no node in the dev split"):
        check_graph({"nodes": str(n), "edges": str(e)})


def test_a_batch_is_the_whole_graph_scoring_one_split(tmp_path):
    dm = GraphDataModule(*write_tiny_graph(tmp_path), laplacian_k=2, data_dir=str(tmp_path / "cache"))
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    assert batch["src"].shape == (1, 9, 3 + 2) and batch["src_lengths"].tolist() == [9]
    assert batch["labels"].tolist() == [[IGNORE, IGNORE, 0, IGNORE, IGNORE, IGNORE, 1, IGNORE, IGNORE]]
    assert np.allclose(batch["src"][0, :8, :3].sum(-1), 1) and batch["src"][0, 8, :3].sum() == 0  # rows normalized
    assert batch["edge_index"].shape == (2, 2 * len(EDGES))
    assert graph_batch(dm.graph, dm.src, None)["labels"].ne(IGNORE).sum() == 8  # every labelled node


def test_laplacian_eigenvectors_are_the_smallest_of_the_normalized_laplacian():
    # a path of four nodes: eigenvalue 0's eigenvector is sqrt(degree), normalized
    edges = np.array([[0, 1, 2], [1, 2, 3]])
    vectors = laplacian_eigenvectors(edges, 4, 2)
    first = np.sqrt([1, 2, 2, 1]) / np.sqrt(6)
    assert np.allclose(np.abs(vectors[:, 0]), first, atol=1e-6)
    degree = np.array([1, 2, 2, 1.0])
    a = np.zeros((4, 4))
    a[edges[0], edges[1]] = a[edges[1], edges[0]] = 1
    lap = np.eye(4) - a / np.sqrt(np.outer(degree, degree))
    value = vectors[:, 1] @ lap @ vectors[:, 1]
    assert np.allclose(lap @ vectors[:, 1], value * vectors[:, 1], atol=1e-5) and 0 < value < 1
    assert laplacian_eigenvectors(edges, 4, 6)[:, 4:].tolist() == [[0, 0]] * 4  # more than N: zero columns


def test_rows_are_normalized_to_sum_one_and_zero_rows_stay_zero():
    out = normalize_rows(np.array([[1, 3], [0, 0]], dtype=np.float32))
    assert out.tolist() == [[0.25, 0.75], [0, 0]]


def test_a_graph_is_named_by_its_preset_unless_named(tmp_path):
    # experiment=graph_nodes data.preset=cora runs and writes as "cora"; a user's files as "graph".
    assert GraphDataModule(preset="cora").name == "cora"
    assert GraphDataModule(preset="citeseer", name="mine").name == "mine"
    assert GraphDataModule(*write_tiny_graph(tmp_path)).name == "graph"
