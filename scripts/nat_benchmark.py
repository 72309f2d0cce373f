"""Decoding latency (batch 1) and throughput (batch 64) of autoregressive vs non-autoregressive
translation, from trained checkpoints, on the same Multi30k sentences in the same process.

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/nat_benchmark.py \
        --at-ckpt at.ckpt --nat-ckpt nat.ckpt --split test_2016_flickr --output bench.json

Systems: AT greedy, AT beam 5, NAT one pass, NAT length beam 3, Mask-Predict T=4 and T=10
(each skipped when its checkpoint is not given). Everything goes through the tasks'
``translator`` (tokenize, batch, search, detokenize), as ``transformer-decode`` does.

* Latency: the first ``--latency-sentences`` sentences one at a time (batch 1); mean, median
  and 90th percentile milliseconds per sentence, after ``--warmup`` untimed sentences. The
  systems take turns sentence by sentence, so background load hits all of them alike.
* Throughput: the first ``--throughput-sentences`` sentences in batches of exactly
  ``--batch-size`` (64); sentences/s and output subword tokens/s. The systems alternate
  batch by batch, so background load on a shared machine hits all of them alike.

Also reported per system: average NAT decoder passes and, as a sanity check, corpus BLEU of
the throughput run's outputs against the references (an untrained checkpoint is fast for the
wrong reasons: AT models that never stop are slow, NAT speed barely depends on quality).
Numbers depend on the machine and its load: the JSON records threads, CPU and date.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transformer.evaluation.hardware import cpu_name  # noqa: E402

SYSTEMS = [
    ("AT greedy", "at", {"strategy": "greedy", "max_len_a": 1.2, "max_len_b": 10}),
    ("AT beam 5", "at", {"strategy": "beam", "beam_size": 5, "length_penalty": 1.0, "max_len_a": 1.2, "max_len_b": 10}),
    ("NAT one pass", "nat", {"strategy": "nat_one_pass"}),
    ("NAT length beam 3", "nat", {"strategy": "nat_length_beam", "length_beam": 3}),
    ("Mask-Predict T=4", "nat", {"strategy": "mask_predict", "iterations": 4, "length_beam": 1}),
    ("Mask-Predict T=10", "nat", {"strategy": "mask_predict", "iterations": 10, "length_beam": 1}),
]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at-ckpt", help="autoregressive checkpoint (transformer-train, task=translation)")
    p.add_argument("--nat-ckpt", help="non-autoregressive checkpoint (task=nat)")
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
    p.add_argument("--only", nargs="*", help="names of systems to run (default: all available)")
    p.add_argument("--output", help="write the results JSON here")
    return p.parse_args(argv)


def count_tokens(tok, texts: list[str]) -> int:
    return sum(len(ids) for ids in tok.encode_batch(texts))


def latency(translators: dict, sentences: list[str], warmup: int, turn: int = 1) -> dict[str, dict]:
    """Milliseconds per sentence at batch size 1, for every system.

    The systems take turns, ``turn`` sentences each (the order rotating), so a change in
    background load hits all of them alike instead of whichever system was running then. With
    ``turn=1`` every sentence follows another system's, whose weights have pushed this one's out
    of the CPU caches; a larger ``turn`` measures a system that runs sentence after sentence, as
    one serving requests does, with only each turn's first sentence cold.
    """
    names = list(translators)
    for s in sentences[:warmup]:
        for name in names:
            translators[name].translate([s])
    times: dict[str, list[float]] = {name: [] for name in names}
    for i, lo in enumerate(range(0, len(sentences), turn)):
        for name in names[i % len(names):] + names[: i % len(names)]:
            for s in sentences[lo: lo + turn]:
                start = time.perf_counter()
                translators[name].translate([s])
                times[name].append((time.perf_counter() - start) * 1000.0)
    out = {}
    for name, ts in times.items():
        ts = sorted(ts)
        out[name] = {
            "sentences": len(ts),
            "mean_ms": round(statistics.fmean(ts), 2),
            "median_ms": round(statistics.median(ts), 2),
            "p90_ms": round(ts[int(0.9 * (len(ts) - 1))], 2),
        }
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    from sacrebleu.metrics import BLEU

    from transformer.data.readers import read_multi30k
    from transformer.tasks.checkpoint import load_task

    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = {}
    for kind, path in (("at", args.at_ckpt), ("nat", args.nat_ckpt)):
        if path:
            tasks[kind] = load_task(path).to(args.device)
    if not tasks:
        raise SystemExit("give --at-ckpt and/or --nat-ckpt")
    hp = next(iter(tasks.values())).hparams
    pairs = read_multi30k(args.split, hp.src_lang, hp.tgt_lang, cache_dir=args.data_dir, mirror_root=args.mirror_root)
    n = max(args.latency_sentences, args.throughput_sentences)
    sources, refs = [s for s, _ in pairs[:n]], [t for _, t in pairs[:n]]
    systems = [(name, kind, cfg) for name, kind, cfg in SYSTEMS
               if kind in tasks and (not args.only or name in args.only)]
    # A token budget far above 64 sentences, so that each throughput batch is exactly one batch.
    translators = {name: tasks[kind].translator(dict(cfg, max_tokens=10**9), device=args.device)
                   for name, kind, cfg in systems}

    results: dict[str, dict] = {name: {"decode": cfg, "checkpoint": getattr(args, f"{kind}_ckpt")}
                                for name, kind, cfg in systems}
    with torch.inference_mode():
        for name, lat in latency(translators, sources[: args.latency_sentences], args.warmup, args.turn).items():
            results[name]["latency_batch1"] = lat
            print(f"{name:20s} batch 1: {lat}", flush=True)
        # Throughput: alternate systems batch by batch.
        outputs = {name: [] for name, _, _ in systems}
        seconds = {name: 0.0 for name, _, _ in systems}
        thr_sources = sources[: args.throughput_sentences]
        for lo in range(0, len(thr_sources), args.batch_size):
            chunk = thr_sources[lo: lo + args.batch_size]
            for name, _, _ in systems:
                start = time.perf_counter()
                out = translators[name].translate(chunk)
                seconds[name] += time.perf_counter() - start
                outputs[name].extend(n[0][0] for n in out)
    for name, kind, _ in systems:
        tok = tasks[kind].tgt_tokenizer
        hyps = outputs[name]
        results[name]["throughput_batch%d" % args.batch_size] = {
            "sentences": len(hyps),
            "seconds": round(seconds[name], 3),
            "sentences_per_second": round(len(hyps) / max(seconds[name], 1e-9), 2),
            "output_tokens_per_second": round(count_tokens(tok, hyps) / max(seconds[name], 1e-9), 1),
        }
        results[name]["bleu"] = round(BLEU().corpus_score(hyps, [refs[: len(hyps)]]).score, 2)
        results[name].update(translators[name].extra_stats())
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "split": args.split,
        "device": args.device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
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


def markdown_table(report: dict, batch_size: int) -> str:
    """The results as a Markdown table (latency ms at batch 1, sentences/s at batch 64)."""
    key = f"throughput_batch{batch_size}"
    at = report["systems"].get("AT greedy")
    lines = [f"| system | latency b=1 mean / p90 (ms) | speed-up b=1 vs AT greedy | throughput b={batch_size} "
             "(sent/s) | tokens/s | avg passes | BLEU |",
             "|---|---|---|---|---|---|---|"]
    for name, r in report["systems"].items():
        lat, thr = r["latency_batch1"], r[key]
        ratio = f"{at['latency_batch1']['mean_ms'] / lat['mean_ms']:.2f}x" if at else "-"
        lines.append(f"| {name} | {lat['mean_ms']} / {lat['p90_ms']} | {ratio} | {thr['sentences_per_second']} | "
                     f"{thr['output_tokens_per_second']} | {r.get('avg_iterations', '-')} | {r['bleu']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
