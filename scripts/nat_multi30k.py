"""The NAT recipe on Multi30k, end to end: AT teacher -> distilled training set -> NAT on raw
and on distilled targets -> BLEU with one pass and Mask-Predict T=1,4,10.

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/nat_multi30k.py --pair de_en --out runs/nat
    # reuse a trained teacher, CPU-sized students, a time budget per training run:
    python3 scripts/nat_multi30k.py --at-ckpt at.ckpt --students cpu \
        --train-extra trainer.max_epochs=100 trainer.max_time=00:00:30:00

Each step is one of the project's CLIs run as a subprocess (the commands are printed and kept
in ``<out>/commands.txt``); a step whose output already exists is skipped, so the recipe can
be resumed. The results table goes to ``<out>/results.json`` and ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ITERATIONS = (1, 4, 10)
# The GPU command conf/experiment/multi30k_nat_cpu.yaml gives (experiment=multi30k's size, batches and
# schedule, 120 epochs, every test split's length beam of 3).
GPU_STUDENTS = ["accel=none", "model=medium", "trainer.accelerator=gpu", "trainer.precision=bf16-mixed",
                "data.max_tokens=8192", "data.pad_to_multiple=8", "task.lr=7e-4", "task.warmup_steps=1000",
                "trainer.max_epochs=120", "test_decode.length_beam=3"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="de_en", choices=["de_en", "en_de"])
    p.add_argument("--out", default="runs/nat_multi30k", type=Path)
    p.add_argument("--at-ckpt", help="a trained AT checkpoint (skip training the teacher)")
    p.add_argument("--at-experiment", default="multi30k", help="trained on the pair (multi30k or multi30k_cpu)")
    p.add_argument("--students", default="gpu", choices=["gpu", "cpu"],
                   help="experiment=multi30k_nat_cpu with the GPU command its comment gives, or as it is")
    p.add_argument("--train-extra", nargs="*", default=[], help="overrides for every training run")
    p.add_argument("--at-extra", nargs="*", default=[], help="overrides for the teacher only")
    p.add_argument("--nat-extra", nargs="*", default=[], help="overrides for both NAT runs")
    p.add_argument("--distill-beam", type=int, default=5)
    p.add_argument("--distill-limit", type=int, default=None, help="distil only the first N pairs")
    p.add_argument("--eval-split", default="test_2016_flickr")
    p.add_argument("--length-beam", type=int, default=1, help="length candidates for Mask-Predict")
    p.add_argument("--device", default="auto")
    return p.parse_args(argv)


class Runner:
    """Runs CLI steps, logging each command line to ``commands.txt``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.log = out / "commands.txt"

    def __call__(self, module: str, *overrides: str) -> None:
        cmd = [sys.executable, "-m", f"transformer.cli.{module}", *overrides]
        line = shlex.join(cmd)
        print(f"+ {line}", flush=True)
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        subprocess.run(cmd, check=True)


def best_checkpoint(run_dir: Path) -> Path:
    summary = json.loads((run_dir / "train_summary.json").read_text())
    return Path(summary["best_checkpoint"] or summary["last_checkpoint"])


def train(run: Runner, run_dir: Path, experiment: str, *overrides: str) -> Path:
    if not (run_dir / "train_summary.json").is_file():
        # name= and test_splits= on the command line: they win over the entry config.
        run("train", f"experiment={experiment}", f"name={run_dir.name}", f"output_dir={run_dir}",
            "test_splits=[]", *overrides)
    return best_checkpoint(run_dir)


def evaluate(run: Runner, ckpt: Path, out: Path, split: str, device: str, *decode: str) -> dict:
    stem = decode[0].split("=", 1)[1]
    tag = "_".join(d.split("=", 1)[1] for d in decode)
    eval_dir = out / tag
    metrics_file = eval_dir / f"{split}.{stem}.json"
    if not metrics_file.is_file():
        run("evaluate", f"ckpt_path={ckpt}", f"split={split}", f"output_dir={eval_dir}", f"device={device}", *decode)
    return json.loads(metrics_file.read_text())


def main(argv=None) -> dict:
    args = parse_args(argv)
    run = Runner(args.out)
    src, tgt = args.pair.split("_")
    rows: dict[str, dict] = {}

    pair = (f"data.src_lang={src}", f"data.tgt_lang={tgt}")
    at_ckpt = Path(args.at_ckpt) if args.at_ckpt else train(
        run, args.out / "at", args.at_experiment, *pair, *args.train_extra, *args.at_extra)
    m = evaluate(run, at_ckpt, args.out / "eval_at", args.eval_split, args.device,
                 "decode.strategy=beam", f"decode.beam_size={args.distill_beam}")
    rows[f"AT beam {args.distill_beam}"] = m

    distill_dir = args.out / "distill"
    if not (distill_dir / "distill.json").is_file():
        limit = [f"limit={args.distill_limit}"] if args.distill_limit else []
        run("distill", f"ckpt_path={at_ckpt}", "split=train", f"output_dir={distill_dir}", "decode.strategy=beam",
            f"decode.beam_size={args.distill_beam}", f"device={args.device}", *limit)

    nat = "multi30k_nat_cpu"
    nat_recipe = [*pair, *(GPU_STUDENTS if args.students == "gpu" else [])]
    # Both students use the teacher's tokenizer, so only the training targets differ.
    shared_vocab = f"++data.tokenizer_path={distill_dir}/tokenizer.json"
    students = {
        "raw": train(run, args.out / "nat_raw", nat, *nat_recipe, *args.train_extra, *args.nat_extra, shared_vocab),
        "distilled": train(
            run, args.out / "nat_distill", nat, *nat_recipe, *args.train_extra, *args.nat_extra, shared_vocab,
            f"++data.train_files.src={distill_dir}/train.{src}", f"++data.train_files.tgt={distill_dir}/train.{tgt}"),
    }
    for data_name, ckpt in students.items():
        for t in ITERATIONS:
            m = evaluate(run, ckpt, args.out / f"eval_nat_{data_name}", args.eval_split, args.device,
                         "decode.strategy=mask_predict", f"decode.iterations={t}", f"decode.length_beam={args.length_beam}")
            rows[f"NAT {data_name}, Mask-Predict T={t}"] = m
    table = ["| system | BLEU | chrF | sent/s | avg passes |", "|---|---|---|---|---|"]
    for name, m in rows.items():
        table.append(f"| {name} | {m['bleu']} | {m['chrf']} | {m['sentences_per_second']} | {m.get('avg_iterations', '-')} |")
    (args.out / "results.json").write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    (args.out / "results.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return rows


if __name__ == "__main__":
    main()
