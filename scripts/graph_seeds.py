"""Test accuracy of the node classification recipes over seeds, mean ± std, as GCN and GAT
report Planetoid: each seed trains ``experiment=<experiment> data.preset=<preset> seed=<s>`` (the
whole ``transformer-train`` run: early stopping on dev accuracy, the best checkpoint scored on the
test split) and reads the test accuracy back from its ``train_summary.json``.

Runs go one after another in this process (one thread), so the libraries load once; each run's
row is written to ``<out>/results.jsonl`` as it ends, and a rerun skips the seeds already there.

    python3 scripts/graph_seeds.py cora citeseer --seeds 10 --out runs/graphs [-- key=value ...]
    python3 scripts/graph_seeds.py cora citeseer --experiment graph_nodes_full --out runs/graphs_full

Prints a table, a row per recipe (the preset, and the experiment unless it is graph_nodes): test
accuracy mean ± std (population std, as the GAT paper's), its seeds, the mean dev accuracy, and
the mean epochs and seconds of a run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"


def recipe_name(experiment: str, preset: str) -> str:
    """A table row's name: the preset, with the experiment when it is not ``graph_nodes``."""
    return preset if experiment == "graph_nodes" else f"{preset} ({experiment})"


def train_one(experiment: str, preset: str, seed: int, out: Path, overrides: list[str]) -> dict:
    """One ``transformer-train`` run of ``experiment`` on ``preset`` at ``seed`` in
    ``out/<experiment>_<preset>/seed<seed>``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from transformer.cli.train import run

    GlobalHydra.instance().clear()
    folder = out / f"{experiment}_{preset}" / f"seed{seed}"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", [f"experiment={experiment}", f"data.preset={preset}", f"seed={seed}",
                                f"output_dir={folder}", "logger.tensorboard=null", *overrides])
    start = time.perf_counter()
    summary = run(cfg)
    return {"recipe": recipe_name(experiment, preset), "seed": seed, "acc": summary["test"]["test"]["acc"],
            "epochs": summary["epochs"], "dev_acc": summary["best_score"],
            "seconds": round(time.perf_counter() - start, 1)}


def table(rows: list[dict]) -> str:
    """A markdown row per recipe: test accuracy mean ± std over its seeds."""
    lines = ["| recipe | test accuracy (%) | seeds | dev accuracy (%) | epochs | seconds a run |",
             "|---|---|---|---|---|---|"]
    for recipe in dict.fromkeys(r["recipe"] for r in rows):
        mine = [r for r in rows if r["recipe"] == recipe]
        acc = [100 * r["acc"] for r in mine]
        lines.append(f"| {recipe} | {statistics.mean(acc):.1f} ± {statistics.pstdev(acc):.1f} | {len(mine)} | "
                     f"{statistics.mean(100 * r['dev_acc'] for r in mine):.1f} | "
                     f"{statistics.mean(r['epochs'] for r in mine):.0f} | "
                     f"{statistics.mean(r['seconds'] for r in mine):.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("presets", nargs="+", help="graphs to run (data.preset: cora, citeseer)")
    parser.add_argument("--experiment", default="graph_nodes", help="graph_nodes (along the edges) or graph_nodes_full")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/graph_seeds"))
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    overrides = argv[cut + 1:]  # -- key=value ...: for every run
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.is_file() else []
    done = {(r["recipe"], r["seed"]) for r in rows}
    recipes = [recipe_name(args.experiment, preset) for preset in args.presets]
    for preset, recipe in zip(args.presets, recipes):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            if (recipe, seed) in done:
                continue
            row = train_one(args.experiment, preset, seed, args.out, overrides)
            rows.append(row)
            with results.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    print(table([r for r in rows if r["recipe"] in recipes]))


if __name__ == "__main__":
    main()
