"""PyTorch Geometric's Data fields in and out, without the library: a stand-in with the same
fields round-trips, and the real ``Data`` does too where torch_geometric is installed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.data.graphs.graph_files import write_tiny_graph
from transformer.data.graphs.graph import read_graph, write_graph
from transformer.data.graphs.pyg import from_pyg, to_pyg


def test_a_graph_goes_to_data_fields_and_back(tmp_path):
    graph = read_graph(*write_tiny_graph(tmp_path))
    data = to_pyg(graph, data_class=SimpleNamespace)
    assert data.x.shape == (9, 3) and data.edge_index.shape == (2, 20) and data.y.dtype == torch.int64
    assert [int(data.train_mask.sum()), int(data.val_mask.sum()), int(data.test_mask.sum())] == [4, 2, 2]
    back = from_pyg(data, classes=graph.classes, ids=graph.ids)
    assert np.array_equal(back.features, graph.features) and np.array_equal(back.edge_index, graph.edge_index)
    assert list(back.split) == list(graph.split)
    labelled = graph.labels >= 0
    assert np.array_equal(back.labels[labelled], graph.labels[labelled])
    again = read_graph(*write_graph(back, tmp_path / "from_pyg"))  # the files training reads
    assert np.array_equal(again.edge_index, graph.edge_index)


def test_fields_a_data_object_lacks_or_gets_wrong_are_named():
    x, y = torch.zeros(3, 2), torch.tensor([0, 1, 0])
    with pytest.raises(ValueError, match="'edge_index'"):
        from_pyg(SimpleNamespace(x=x, y=y))
    with pytest.raises(ValueError, match="outside 0..2"):
        from_pyg(SimpleNamespace(x=x, y=y, edge_index=torch.tensor([[0], [3]])))
    with pytest.raises(ValueError, match="2 labels for 3 nodes"):
        from_pyg(SimpleNamespace(x=x, y=y[:2], edge_index=torch.tensor([[0], [1]])))


def test_without_torch_geometric_writing_data_says_what_to_install(tmp_path, monkeypatch):
    import importlib.util

    graph = read_graph(*write_tiny_graph(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ImportError, match="pip install torch_geometric"):
        to_pyg(graph)


def test_the_real_data_class_round_trips(tmp_path):
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    graph = read_graph(*write_tiny_graph(tmp_path))
    data = to_pyg(graph)
    assert isinstance(data, Data) and data.num_nodes == 9
    assert np.array_equal(from_pyg(data).edge_index, graph.edge_index)
