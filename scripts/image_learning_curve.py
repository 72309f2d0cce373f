"""The lectures' claim on the UCI digits: a CNN (a restricted self-attention) wins with little
data, self-attention over patches with more. Test accuracy of the ViT (``experiment=digits``),
the windowed ViT (``experiment=digits model.window=1``: each patch attends to its 3x3
neighbourhood of patches) and the CNN (``experiment=digits model=cnn``) trained on 10 %, 25 %, 50 % and
100 % of the training images (``data.train_fraction``; per class, drawn by the seed), each with 3
seeds, on the same fixed, seeded test set (20 % of each class, ``data.split_seed=0``).

Every run takes the same number of updates (the recipes' ``trainer.max_steps``) and validates
every 20 updates whatever its share of the data. Runs go one at a time on one thread, in
this process; a run whose ``train_summary.json`` exists is read back, not trained again.

    python3 scripts/image_learning_curve.py --out runs/curve [--plot docs/images_learning_curve.png] [-- key=value ...]

Prints the table (mean ± std of test accuracy, % over the seeds; Markdown) and writes every run's
accuracy to ``<out>/curve.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

CONF = Path(__file__).resolve().parents[1] / "conf"

MODELS = {"ViT": ["experiment=digits"], "windowed ViT": ["experiment=digits", "model.window=1"],
          "CNN": ["experiment=digits", "model=cnn"]}
FRACTIONS = (0.1, 0.25, 0.5, 1.0)
SEEDS = (1, 2, 3)
# Updates between validations, whatever the run's share of the data (an epoch of 10 % is 3 updates).
VALIDATE_EVERY = 20


def run_name(model: str, fraction: float, seed: int) -> str:
    return f"{model.replace(' ', '_')}-{fraction}-{seed}"


def train(out: Path, model: str, fraction: float, seed: int, overrides: list[str]) -> float:
    """One run's test accuracy, trained (in this process: the runs share one start-up) unless its
    summary is already there."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from transformer.cli import train as train_cli

    run = out / run_name(model, fraction, seed)
    summary = run / "train_summary.json"
    if not summary.is_file():
        args = [*MODELS[model], f"data.train_fraction={fraction}", f"seed={seed}",
                "trainer.check_val_every_n_epoch=null", f"trainer.val_check_interval={VALIDATE_EVERY}",
                f"output_dir={run}", "callbacks.progress_bar=null",
                "logger.tensorboard=null", *overrides]
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="train", overrides=args)
        with open_dict(cfg):
            cfg.pop("hydra", None)
        began = time.perf_counter()
        train_cli.run(cfg)
        print(f"{run.name}: {time.perf_counter() - began:.0f} s, test acc "
              f"{json.loads(summary.read_text())['test']['test']['acc']:.4f}", file=sys.stderr, flush=True)
    return json.loads(summary.read_text())["test"]["test"]["acc"]


def table(results: dict) -> str:
    """Markdown: a row per model, a column per fraction, mean ± std of test accuracy in %."""
    head = "| model | " + " | ".join(f"{f:.0%} of the training images" for f in FRACTIONS) + " |"
    rows = [head, "|---|" + "---:|" * len(FRACTIONS)]
    for model in MODELS:
        cells = []
        for f in FRACTIONS:
            accs = [100 * a for a in results[model][str(f)]]
            cells.append(f"{statistics.mean(accs):.2f} ± {statistics.stdev(accs):.2f}")
        rows.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4), dpi=100)
    for model in MODELS:
        means = [100 * statistics.mean(results[model][str(f)]) for f in FRACTIONS]
        stds = [100 * statistics.stdev(results[model][str(f)]) for f in FRACTIONS]
        ax.errorbar([100 * f for f in FRACTIONS], means, yerr=stds, marker="o", capsize=3, label=model)
    ax.set_xscale("log")
    ax.set_xticks([100 * f for f in FRACTIONS], [f"{f:.0%}" for f in FRACTIONS])
    ax.set_xlabel("share of the 1,295 training images")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("UCI digits, 359 test images, 3 seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a folder for the runs and their logs")
    parser.add_argument("--plot", type=Path, help="write the learning curves here (PNG)")
    parser.add_argument("overrides", nargs="*", help="training overrides for every run (after --)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {m: {str(f): [] for f in FRACTIONS} for m in MODELS}
    for seed in SEEDS:  # a whole table per seed first: a stopped sweep still compares every cell
        for model in MODELS:
            for f in FRACTIONS:
                results[model][str(f)].append(train(args.out, model, f, seed, args.overrides))
                (args.out / "curve.json").write_text(json.dumps(results, indent=2) + "\n")
    if args.plot:
        plot(results, args.plot)
    print(table(results))


if __name__ == "__main__":
    main()
