"""Our decoding against the same checkpoint exported to CTranslate2 (float32 and int8 weights):
sacreBLEU on a Multi30k test set and sentences per second on this CPU, greedy and beam 5, one
thread each, in one run.

    pip install -e ".[export]"
    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/bench_export.py \
        --ckpt best.ckpt --split test_2016_flickr --json bench_export.json

Ours runs three times: eager, with ``decode.compile=true`` (its first pass over the split, which
compiles, is timed apart as ``warm_up_seconds``), and with int8 linear layers (``quantize=int8``).
``--rounds R`` times every system R times, the systems taking turns, and reports the median pass
(on a 2-core virtual machine one run's ratios moved by up to 5 % from the next). ``--bf16`` adds
ours with ``decode.dtype=bf16``, compiled (a CPU with bf16 instructions). Both sides translate raw sentences with the
checkpoint's tokenizer and the same length cap (``floor(1.2 * (source pieces + EOS) + 10)``
tokens, EOS included), length penalty 1.0. Ours is
``TranslationTask.translator`` (batches under a ``--max-tokens`` budget, longest first);
CTranslate2's is ``transformer.export.ctranslate2.CTranslate2Translator`` (beam: one call per
length cap; greedy: one call to the longest cap and one per cap for the sentences theirs cuts;
batches of at most as many tokens). Each timing covers tokenization, search and
detokenization of the whole split. Batch-1 latency: the first ``--latency-sentences`` sentences
one at a time, the systems taking turns sentence by sentence; greedy's also per decoder step (the
output's target pieces plus EOS, from our output re-tokenized, the same for every system: their
outputs are equal) beside what one step's products alone cost on this machine
(``scripts/bench_limit.py``'s ``step_floor``, the model's sizes). ``--latency-only`` skips the
whole-file runs. ``identical`` counts outputs equal to ours, string for string.
Each whole-file row also carries its ceiling: the matrix products of ours over the split
(``products_gflop``: every product torch runs in one eager fp32 pass of our search, the linear
layers' and attention's, counted by ``torch.utils.flop_counter``), divided by that system's
seconds, beside this machine's matmul limit at the model's shapes, fp32 and bf16
(``scripts/bench_limit.py``, measured at the start of the run). CTranslate2's rows divide the
same count by its time: the work its search does, up to how it batches.
The process keeps the memory it frees (``transformer.cli.common.keep_freed_memory``), as the inference
commands do; CTranslate2, in the same process, has its own caching allocator.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from datetime import date
from pathlib import Path

import torch

from transformer.accel.quantize import apply_quantize
from transformer.evaluation.hardware import cpu_name
from transformer.cli.common import bound_onednn_caches, keep_freed_memory

from transformer.data.parallel.corpus import multi30k, read_pairs
from transformer.evaluation import score_translations
from transformer.export.ctranslate2 import CTranslate2Translator, export_ctranslate2
from transformer.tasks.checkpoint import load_task


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None, help="first N sentences only")
    parser.add_argument("--export-dir", default=None,
                        help="where to write the exports, kept (default: a temporary folder, removed at the end)")
    parser.add_argument("--latency-sentences", type=int, default=100,
                        help="also decode the first N one at a time (batch-1 latency; 0: skip)")
    parser.add_argument("--max-tokens", type=int, default=2048,
                        help="source tokens per batch, both systems (decode.max_tokens's default)")
    parser.add_argument("--latency-only", action="store_true", help="only the batch-1 latency runs")
    parser.add_argument("--rounds", type=int, default=1,
                        help="passes over the split per system, the systems in turn; the median is reported")
    parser.add_argument("--bf16", action="store_true",
                        help="also ours in bf16, compiled (decode.dtype=bf16; a CPU with bf16 instructions)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the inference commands do (transformer.cli.common)
    bound_onednn_caches()
    task = load_task(args.ckpt)
    hp = task.hparams
    pairs = read_pairs(multi30k(hp.src_lang, hp.tgt_lang), args.split, mirror_root=os.environ.get("TRANSFORMER_DATA_MIRROR"))
    pairs = pairs[: args.limit] if args.limit else pairs
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]

    # Without --export-dir the exports go to a temporary folder, removed when the script ends.
    scratch = None if args.export_dir else tempfile.TemporaryDirectory(prefix="ct2_export_")
    export_root = Path(args.export_dir or scratch.name)
    engines = {}
    for weights in ("float32", "int8"):
        directory = export_ctranslate2(task, export_root / weights, None if weights == "float32" else weights, force=True)
        engines[weights] = CTranslate2Translator(directory, compute_type=weights, threads=args.threads,
                                                 max_batch_size=args.max_tokens, batch_type="tokens")

    limits = None if args.latency_only else matmul_limits(task)
    results, latency = [], []
    for name, beam in (("greedy", 1), (f"beam{args.beam_size}", args.beam_size)):
        decode_cfg = ({"strategy": "greedy"} if beam == 1 else
                      {"strategy": "beam", "beam_size": beam, "length_penalty": 1.0}) | {"max_tokens": args.max_tokens}
        translator = task.translator(decode_cfg)
        compiled = task.translator(decode_cfg | {"compile": True})
        if args.latency_only:
            latency += batch_one(args, name, beam, sources, translator, compiled, engines["float32"], task)
            continue
        results += whole_file(args, name, beam, decode_cfg, sources, refs, task, translator, compiled, engines, limits)
        latency += batch_one(args, name, beam, sources, translator, compiled, engines["float32"], task)

    import ctranslate2

    report = {
        "checkpoint": args.ckpt, "split": args.split, "threads": args.threads, "max_tokens": args.max_tokens, "date": str(date.today()),
        "cpu": cpu_name(), "torch": torch.__version__, "ctranslate2": ctranslate2.__version__,
        "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip(),
        "limit_gflop_per_second": None if limits is None else {d: round(max(v.values()), 1) for d, v in limits.items()},
        "results": results, "latency": latency,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def matmul_limits(task) -> dict:
    """``scripts/bench_limit.py``'s GFLOP/s at the checkpoint's model shapes, fp32 and bf16."""
    from bench_limit import measure, model_shapes

    cfg = task.hparams.model
    return measure(shapes=model_shapes(cfg["d_model"], cfg["d_ff"], task.model.vocab_size))


def products_flops(translator, sources: list[str]) -> float:
    """The matrix products (FLOPs) of one pass of ``translator`` over ``sources``: every product
    torch runs, the linear layers' and attention's, counted by torch's ``FlopCounterMode``."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        translator.translate(sources)
    return counter.get_total_flops()


def whole_file(args, name: str, beam: int, decode_cfg: dict, sources: list[str], refs: list[str], task,
               translator, compiled, engines: dict, limits: dict) -> list[dict]:
    """Every system over the whole split, in turn, ``--rounds`` times; each row reports the median
    pass (``seconds_each``: every pass). Compiling (the compiled translator's first pass) is timed
    apart; the int8 model is ours quantized as ``transformer-decode quantize=int8`` does it."""
    warm_up = {"ours compiled (decode.compile=true)": timed(lambda: compiled.translate(sources))[1]}
    extra = {}
    if args.bf16:
        system = "ours bf16 compiled (decode.dtype=bf16)"
        extra[system] = bf16 = task.translator(decode_cfg | {"compile": True, "dtype": "bf16"})
        warm_up[system] = timed(lambda: bf16.translate(sources))[1]
    fp32 = task.model
    task.model = apply_quantize(fp32, "int8")
    try:
        int8 = task.translator(decode_cfg)
    finally:
        task.model = fp32
    systems = {"ours (PyTorch)": translator, "ours compiled (decode.compile=true)": compiled,
               "ours int8 (quantize=int8)": int8} | extra
    passes = {system: (lambda t=t: [n[0][0] for n in t.translate(sources)]) for system, t in systems.items()}
    for weights, engine in engines.items():
        passes[f"CTranslate2 {weights}"] = lambda e=engine: e.translate(sources, beam_size=beam, length_penalty=1.0)
    outputs, times = {}, {system: [] for system in passes}
    for _ in range(args.rounds):
        for system, run in passes.items():
            outputs[system], seconds = timed(run)
            times[system].append(seconds)
    from bench_limit import share

    work = products_flops(translator, sources)  # the eager fp32 search's products
    ours, rows = outputs["ours (PyTorch)"], []
    for system, hyps in outputs.items():
        scores, seconds = score_translations(hyps, refs), statistics.median(times[system])
        rows.append({
            "search": name, "system": system, "bleu": scores["bleu"], "bleu_lowercase": scores["bleu_lowercase"],
            "sentences": len(hyps), "seconds": round(seconds, 2), "sentences_per_second": round(len(hyps) / seconds, 1),
            "identical_to_ours": sum(a == b for a, b in zip(hyps, ours)), "bleu_signature": scores["bleu_signature"],
            "products_gflop": round(work / 1e9, 1), "products_gflop_per_second": round(work / seconds / 1e9, 1),
            "share_of_limit": share(work / seconds / 1e9, limits),
        } | ({"seconds_each": [round(t, 2) for t in times[system]]} if args.rounds > 1 else {})
          | ({"warm_up_seconds": round(warm_up[system], 1)} if system in warm_up else {}))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def batch_one(args, name: str, beam: int, sources: list[str], translator, compiled, engine, task) -> list[dict]:
    """Batch-1 latency: the first ``--latency-sentences`` sentences one at a time, each system in
    turn per sentence; greedy's also per decoder step, beside the products' floor."""
    if not args.latency_sentences:
        return []
    one = {"ours (PyTorch)": lambda s: translator.translate([s]),
           "ours compiled (decode.compile=true)": lambda s: compiled.translate([s]),
           "CTranslate2 float32": lambda s: engine.translate([s], beam_size=beam, length_penalty=1.0)}
    for fn in one.values():
        fn(sources[0])  # a single row may need its own compiled graph: not timed
    chosen = sources[: args.latency_sentences]
    spent = dict.fromkeys(one, 0.0)
    for sentence in chosen:
        for system, fn in one.items():
            spent[system] += timed(lambda: fn(sentence))[1]
    steps = None
    if beam == 1:  # a greedy step per target piece, and one for EOS
        outputs = [n[0][0] for n in translator.translate(chosen)]
        steps = sum(len(translator.tgt_tok.encode(out)) + 1 for out in outputs)
        from bench_limit import step_floor
        cfg = task.hparams.model
        floor = step_floor(cfg["d_model"], cfg["d_ff"], task.model.vocab_size, cfg["n_decoder_layers"])
    rows = []
    for system, seconds in spent.items():
        rows.append({"search": name, "system": system, "sentences": len(chosen),
                     "ms_per_sentence": round(1000 * seconds / len(chosen), 2)}
                    | ({"ms_per_step": round(1000 * seconds / steps, 3), "steps": steps,
                        "products_floor_ms_per_step": round(floor, 3)} if steps else {}))
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
