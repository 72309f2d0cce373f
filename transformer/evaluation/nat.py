"""Speed of autoregressive vs non-autoregressive decoding on the same sentences in one process:
latency at batch 1 and throughput at a fixed batch size, plus BLEU (cased and lowercased) of
the outputs as a sanity check. ``scripts/nat_benchmark.py`` is the command line around it.

Everything goes through the tasks' ``translator`` (tokenize, batch, search, detokenize), as
``transformer-decode`` does; the systems, each a decoding block, are the caller's
(``scripts/nat_benchmark.py``). Systems take turns (sentence by sentence for latency, batch by
batch for throughput), so background load on a shared machine hits all of them alike.
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Sequence

import torch
from sacrebleu.metrics import BLEU

def count_tokens(tok, texts: list[str]) -> int:
    """Subword tokens of ``texts`` under ``tok``."""
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


def throughput(translators: dict, sentences: list[str], batch_size: int) -> tuple[dict, dict]:
    """Outputs and seconds per system, the systems alternating batch by batch."""
    outputs: dict[str, list[str]] = {name: [] for name in translators}
    seconds = {name: 0.0 for name in translators}
    for lo in range(0, len(sentences), batch_size):
        chunk = sentences[lo: lo + batch_size]
        for name, translator in translators.items():
            start = time.perf_counter()
            out = translator.translate(chunk)
            seconds[name] += time.perf_counter() - start
            outputs[name].extend(n[0][0] for n in out)
    return outputs, seconds


def system_translator(task, cfg: dict, device: str = "cpu", shortlist: str | None = None,
                      blank_penalty: float = 0.0):
    """A translator for one system: ``cfg``'s ``quantize: int8`` runs a quantized copy of the
    task's model, ``shortlist: True`` the ``shortlist`` file, ``blank_penalty`` (read by the CTC
    strategies only); a token budget far above one batch, so that each throughput batch is
    exactly one batch."""
    cfg = dict(cfg, max_tokens=10**9, blank_penalty=blank_penalty)
    if cfg.pop("quantize", None) == "int8":
        from transformer.accel import is_fast
        from transformer.accel.quantize import apply_quantize

        fast = any(is_fast(m) for m in task.model.modules())
        task = copy.deepcopy(task)
        task.model = apply_quantize(task.model, "int8", "cpu" if fast else "none")
    if cfg.get("shortlist") is True:
        cfg["shortlist"] = shortlist
    return task.translator(cfg, device=device)


def benchmark(tasks: dict, sources: Sequence[str], refs: Sequence[str], systems: list, latency_sentences: int,
              throughput_sentences: int, batch_size: int = 64, warmup: int = 5, turn: int = 1,
              device: str = "cpu", shortlist: str | None = None, blank_penalty: float = 0.0) -> dict[str, dict]:
    """Latency, throughput and BLEU of each ``(name, kind, decode_cfg)`` system (the recipe:
    ``scripts/nat_benchmark.py``'s ``SYSTEMS``) whose checkpoint kind is in ``tasks`` (``{"at": task, "nat": task, "ctc": task}``); shortlist
    systems only with a ``shortlist`` file, int8 ones only on a CPU."""
    systems = [(name, kind, cfg) for name, kind, cfg in systems if kind in tasks
               and (shortlist or not cfg.get("shortlist")) and (device == "cpu" or not cfg.get("quantize"))]
    translators = {name: system_translator(tasks[kind], cfg, device, shortlist, blank_penalty)
                   for name, kind, cfg in systems}
    results: dict[str, dict] = {name: {"decode": cfg, "kind": kind} for name, kind, cfg in systems}
    with torch.inference_mode():
        for name, lat in latency(translators, list(sources[:latency_sentences]), warmup, turn).items():
            results[name]["latency_batch1"] = lat
            print(f"{name:20s} batch 1: {lat}", flush=True)
        outputs, seconds = throughput(translators, list(sources[:throughput_sentences]), batch_size)
    for name, kind, _ in systems:
        hyps, secs = outputs[name], max(seconds[name], 1e-9)
        results[name][f"throughput_batch{batch_size}"] = {
            "sentences": len(hyps),
            "seconds": round(seconds[name], 3),
            "sentences_per_second": round(len(hyps) / secs, 2),
            "output_tokens_per_second": round(count_tokens(tasks[kind].tgt_tokenizer, hyps) / secs, 1),
        }
        gold = [list(refs[: len(hyps)])]
        results[name]["bleu"] = round(BLEU().corpus_score(hyps, gold).score, 2)
        results[name]["bleu_lowercase"] = round(BLEU(lowercase=True).corpus_score(hyps, gold).score, 2)
        results[name].update(translators[name].extra_stats())
    return results


def markdown_table(report: dict, batch_size: int) -> str:
    """The results as a Markdown table (latency ms at batch 1, sentences/s at ``batch_size``)."""
    key = f"throughput_batch{batch_size}"
    at = report["systems"].get("AT greedy")
    lines = [f"| system | latency b=1 mean / p90 (ms) | speed-up b=1 vs AT greedy | throughput b={batch_size} "
             "(sent/s) | tokens/s | avg passes | BLEU | BLEU lc |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in report["systems"].items():
        lat, thr = r["latency_batch1"], r[key]
        ratio = f"{at['latency_batch1']['mean_ms'] / lat['mean_ms']:.2f}x" if at else "-"
        lines.append(f"| {name} | {lat['mean_ms']} / {lat['p90_ms']} | {ratio} | {thr['sentences_per_second']} | "
                     f"{thr['output_tokens_per_second']} | {r.get('avg_iterations', '-')} | {r['bleu']} | "
                     f"{r.get('bleu_lowercase', '-')} |")
    return "\n".join(lines)
