"""Decoding latency (batch 1) and throughput (batch 64) of autoregressive vs non-autoregressive
translation, from trained checkpoints, on the same Multi30k sentences in the same process.

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/nat_benchmark.py \
        --at-ckpt at.ckpt --nat-ckpt nat.ckpt --ctc-ckpt ctc.ckpt --split test_2016_flickr --output bench.json

Systems: AT greedy, AT beam 5, NAT one pass, NAT length beam 3, Mask-Predict T=4 and T=10, CTC
one pass, CTC prefix beam 5, and the int8 (``quantize=int8``) and shortlist (``--shortlist``:
``decode.shortlist``) variants of the CTC pass and AT greedy (each skipped when its checkpoint is
not given; a CTC checkpoint given as --nat-ckpt counts as --ctc-ckpt). Models run with the CPU
fast paths as ``transformer-decode`` does (``--accel``). The measuring code is ``transformer.evaluation.nat``:

* Latency: the first ``--latency-sentences`` sentences one at a time (batch 1); mean, median
  and 90th percentile milliseconds per sentence, after ``--warmup`` untimed sentences. The
  systems take turns sentence by sentence, so background load hits all of them alike.
* Throughput: the first ``--throughput-sentences`` sentences in batches of exactly
  ``--batch-size`` (64); sentences/s and output subword tokens/s. The systems alternate
  batch by batch, so background load on a shared machine hits all of them alike.

Also reported per system: average NAT decoder passes and, as a sanity check, corpus BLEU (cased
and lowercased) of the throughput run's outputs against the references (an untrained checkpoint
is fast for the wrong reasons: AT models that never stop are slow, NAT speed barely depends on
quality). Numbers depend on the machine and its load: the JSON records threads, CPU and date.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone

import torch

from transformer.evaluation.hardware import cpu_name


# (name, checkpoint kind, decode settings): "at", "nat" (length-predicting NAT) or "ctc".
SYSTEMS = [
    ("AT greedy", "at", {"strategy": "greedy", "max_len_a": 1.2, "max_len_b": 10}),
    ("AT beam 5", "at", {"strategy": "beam", "beam_size": 5, "length_penalty": 1.0, "max_len_a": 1.2, "max_len_b": 10}),
    ("NAT one pass", "nat", {"strategy": "nat_one_pass"}),
    ("NAT length beam 3", "nat", {"strategy": "nat_length_beam", "length_beam": 3}),
    ("Mask-Predict T=4", "nat", {"strategy": "mask_predict", "iterations": 4, "length_beam": 1}),
    ("Mask-Predict T=10", "nat", {"strategy": "mask_predict", "iterations": 10, "length_beam": 1}),
    ("CTC one pass", "ctc", {"strategy": "ctc_one_pass", "shortlist": None}),
    # The same pass with int8 linear layers (accel.quantize), and with the output projection cut
    # to a target-side shortlist (inference.shortlist; run when a shortlist file is given).
    ("CTC one pass int8", "ctc", {"strategy": "ctc_one_pass", "shortlist": None, "quantize": "int8"}),
    ("CTC one pass shortlist", "ctc", {"strategy": "ctc_one_pass", "shortlist": True}),
    ("CTC one pass shortlist int8", "ctc", {"strategy": "ctc_one_pass", "shortlist": True, "quantize": "int8"}),
    ("CTC prefix beam 5", "ctc", {"strategy": "ctc_beam", "beam_size": 5, "top_k": 8, "shortlist": None}),
    ("AT greedy int8", "at", {"strategy": "greedy", "max_len_a": 1.2, "max_len_b": 10, "quantize": "int8"}),
]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at-ckpt", help="autoregressive checkpoint (transformer-train, task=translation)")
    p.add_argument("--nat-ckpt", help="non-autoregressive checkpoint (task=nat; a task=nat_ctc one counts as --ctc-ckpt)")
    p.add_argument("--ctc-ckpt", help="CTC non-autoregressive checkpoint (task=nat_ctc)")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--latency-sentences", type=int, default=100)
    p.add_argument("--throughput-sentences", type=int, default=640)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--turn", type=int, default=1,
                   help="latency: sentences each system decodes before the next takes over (1: every "
                        "sentence starts with cold caches; e.g. 20: warm, as a server running one model)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-dir", default="data/cache")
    p.add_argument("--mirror-root", default=None)
    p.add_argument("--accel", default="none", choices=("none", "cpu"),
                   help="CPU fast paths (transformer/accel), as transformer-decode's accel=")
    p.add_argument("--shortlist", help="train or a target-side text file: also run the CTC systems with their "
                                       "output projection cut to those tokens (decode.shortlist)")
    p.add_argument("--blank-penalty", type=float, default=0.0,
                   help="decode.blank_penalty of the CTC systems (subtracted from the blank's logit)")
    p.add_argument("--only", nargs="*", help="names of systems to run (default: all available)")
    p.add_argument("--output", help="write the results JSON here")
    return p.parse_args(argv)


def load_tasks(args) -> tuple[dict, dict]:
    """``{kind: task}`` and ``{kind: checkpoint path}`` for the checkpoints given."""
    from transformer import accel
    from transformer.tasks.checkpoint import load_task

    tasks, paths = {}, {}
    backend = args.accel
    for kind, path in (("at", args.at_ckpt), ("nat", args.nat_ckpt), ("ctc", args.ctc_ckpt)):
        if path:
            task = load_task(path).to(args.device)
            task.model = accel.apply(task.model, backend)
            kind = "ctc" if getattr(task, "task_name", "") == "nat_ctc" else kind
            tasks[kind], paths[kind] = task, path
    if not tasks:
        raise SystemExit("give --at-ckpt, --nat-ckpt and/or --ctc-ckpt")
    return tasks, paths


def main(argv=None) -> dict:
    args = parse_args(argv)
    from transformer import accel
    from transformer.data.parallel.corpus import multi30k, read_pairs
    from transformer.evaluation.nat import benchmark, markdown_table

    if args.threads:
        torch.set_num_threads(args.threads)
    tasks, paths = load_tasks(args)
    hp = next(iter(tasks.values())).hparams
    pairs = read_pairs(multi30k(hp.src_lang, hp.tgt_lang), args.split, args.data_dir, args.mirror_root)
    n = max(args.latency_sentences, args.throughput_sentences)
    sources, refs = [s for s, _ in pairs[:n]], [t for _, t in pairs[:n]]
    systems = [s for s in SYSTEMS if not args.only or s[0] in args.only]
    results = benchmark(tasks, sources, refs, systems, args.latency_sentences, args.throughput_sentences,
                        args.batch_size, args.warmup, args.turn, args.device, args.shortlist, args.blank_penalty)
    for r in results.values():
        r["checkpoint"] = paths[r.pop("kind")]
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "split": args.split,
        "device": args.device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "accel": args.accel,
        "shortlist": args.shortlist,
        "blank_penalty": args.blank_penalty,
        "latency_turn": args.turn,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "systems": results,
    }
    print(json.dumps(report, indent=2, ensure_ascii=False))
    print(markdown_table(report, args.batch_size))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)
            f.write("\n")
    return report


if __name__ == "__main__":
    main()
