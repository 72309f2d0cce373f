"""Node classification from the command line on a user's tiny graph: training reports test
accuracy, the checkpoint evaluates to the same number on its own, inspect draws a node's
attention over its neighbours, the full-attention variant with Laplacian positions trains, and
a bad row of the graph files ends with one ``error:`` line naming the file and row, nothing
written."""

from __future__ import annotations

import json

import pytest

from tests.cli.hydra_helpers import main_status
from tests.data.graphs.graph_files import EDGES, NODES, write_tiny_graph
from transformer.cli import evaluate as evaluate_cli
from transformer.cli import inspect as inspect_cli
from transformer.cli import train as train_cli

TINY = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "model.d_ff=16", "trainer.max_epochs=4",
        "logger.tensorboard=null"]
FULL = ["model.attention=full", "model.attention_dropout=0.0", "data.laplacian_k=2",
        "model.frontend._target_=transformer.modules.frontends.LaplacianNodeFeatures", "+model.frontend.laplacian_k=2"]


def train(tmp_path, capsys, monkeypatch, *extra: str, nodes=NODES, edges=EDGES) -> tuple[int, str]:
    n, e = write_tiny_graph(tmp_path / "graph", nodes, edges)
    return main_status(train_cli, ["experiment=graph_nodes", f"data.nodes={n}", f"data.edges={e}",
                                   f"data.data_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}",
                                   *TINY, *extra], capsys, monkeypatch)


def test_a_graph_trains_evaluates_from_its_checkpoint_and_shows_a_nodes_attention(tmp_path, capsys, monkeypatch):
    code, err = train(tmp_path, capsys, monkeypatch)
    assert code == 0, err[-3000:]
    summary = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert summary["global_step"] == 4  # one update an epoch: the graph is the batch
    test = summary["test"]["test"]
    assert test["n"] == 2 and 0 <= test["acc"] <= 1
    code, err = main_status(evaluate_cli, [f"ckpt_path={summary['best_checkpoint']}", "split=test",
                                           f"output_dir={tmp_path / 'eval'}"], capsys, monkeypatch)
    assert code == 0, err[-3000:]
    metrics = json.loads((tmp_path / "eval" / "graph.test.metrics.json").read_text())
    assert metrics["acc"] == test["acc"] and metrics["n"] == 2
    predictions = (tmp_path / "eval" / "graph.test.predictions.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in predictions] == ["d", "h"]
    pytest.importorskip("matplotlib")
    code, err = main_status(inspect_cli, [f"ckpt_path={summary['best_checkpoint']}", "text=e",
                                          f"output_dir={tmp_path / 'inspect'}"], capsys, monkeypatch)
    assert code == 0, err[-3000:]
    arrays = __import__("numpy").load(tmp_path / "inspect" / "node_e" / "attention.npz")
    assert [n.split(" ")[0] for n in arrays["neighbours"]] == ["e", "d", "f", "g"]  # itself, then its neighbours
    assert arrays["weights"].shape == (1, 2, 4) and abs(arrays["others"]).max() == 0  # all weight on the edges
    assert (tmp_path / "inspect" / "node_e" / "attention.png").is_file()


def test_full_attention_with_laplacian_positions_trains(tmp_path, capsys, monkeypatch):
    code, err = train(tmp_path, capsys, monkeypatch, *FULL)
    assert code == 0, err[-3000:]
    summary = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert summary["test"]["test"]["n"] == 2


BAD = {
    "edge": (NODES, EDGES[:3] + [("c", "zz")] + EDGES[3:], "edges.tsv:5: node 'zz' is not in nodes.tsv"),
    "width": (NODES[:2] + [("c", "x", "dev", 1, 1)] + NODES[3:], EDGES, "nodes.tsv:4: 2 feature values"),
    "label": (NODES[:3] + [("d", "", "test", 0, 0, 1)] + NODES[4:], EDGES, "nodes.tsv:5: node 'd' is in the test "
              "split but has no label"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_row_of_the_graph_is_one_error_line_and_nothing_is_written(tmp_path, capsys, monkeypatch, case):
    nodes, edges, message = BAD[case]
    code, err = train(tmp_path, capsys, monkeypatch, nodes=nodes, edges=edges)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and lines[-1].startswith("error: ") and message in lines[-1], err[-2000:]
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_a_graph_trains_in_bf16_mixed_precision(tmp_path, capsys, monkeypatch):
    # GAT's network under autocast: bf16 projections, the softmax along the edges in float32
    code, err = train(tmp_path, capsys, monkeypatch, "trainer.precision=bf16-mixed")
    assert code == 0, err[-3000:]
    summary = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert summary["global_step"] == 4 and summary["test"]["test"]["n"] == 2
