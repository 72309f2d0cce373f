"""scripts/graph_seeds.py: the table of a recipe's seeds is their test accuracy's mean and
population standard deviation, as the GAT paper reports them."""

from __future__ import annotations

from tests.script_module import load_script


def load():
    return load_script("graph_seeds")


def test_the_table_gives_mean_and_std_over_seeds():
    rows = [{"recipe": "cora", "seed": s, "acc": a, "dev_acc": 0.8, "epochs": 100, "seconds": 30}
            for s, a in enumerate([0.82, 0.84])]
    rows.append({"recipe": "citeseer", "seed": 0, "acc": 0.7, "dev_acc": 0.72, "epochs": 90, "seconds": 20})
    lines = load().table(rows).splitlines()
    assert lines[2] == "| cora | 83.0 ± 1.0 | 2 | 80.0 | 100 | 30 |"
    assert lines[3].startswith("| citeseer | 70.0 ± 0.0 | 1 |")


def test_a_row_is_named_by_its_preset_and_any_experiment_but_graph_nodes():
    seeds = load()
    assert seeds.recipe_name("graph_nodes", "cora") == "cora"
    assert seeds.recipe_name("graph_nodes_full", "citeseer") == "citeseer (graph_nodes_full)"
