"""The matrix-product limit of this machine for the translation model's shapes: GFLOP/s of a plain
``torch.mm`` per shape, fp32 and bf16, one thread, so that a measured training or decoding figure
can be read as a share of what the products alone could reach.

    python3 scripts/bench_limit.py [--json limit.json] [--rows 1 64 320 2048] [--threads 1]

Shapes (rows x in -> out) are the CPU recipe's (conf/experiment/multi30k_cpu.yaml: model=small,
d_model 256, d_ff 1024, a joint ~8000-piece vocabulary): the attention projections 256 -> 256 and
the fused 256 -> 768, the feed-forward 256 -> 1024 and 1024 -> 256, the vocabulary projection
256 -> 8000, each at several row counts (one decoder row; a greedy batch; a beam-5 batch; a
training batch of tokens). Each product is warmed up, then timed ``--repeats`` times over
enough calls to last ``--min-time`` seconds; the median counts (2 * rows * in * out flops a call).
The limit of a dtype is its best shape (:func:`limit`); :func:`share` puts a measured GFLOP/s
beside it (``scripts/bench_translation.py --count-flops`` does).

One sentence at a time, a decoder step multiplies one row by every decoder weight once: its
products are bound by how fast the weights stream from the caches, not by arithmetic.
:func:`step_floor` times that alone (``--step-floor``): one row through each of a decoder's
products in turn, every layer's weights its own tensors (``--layers``; the CPU recipe's decoder:
per layer the self-attention's q, k, v and output, the cross-attention's q and output, the two
feed-forward products; then the vocabulary projection), so that a batch-1 step of a search (ours
or CTranslate2's) can be read against what its products alone cost.

bf16 runs at its native rate only on a CPU with bf16 instructions (AVX512-BF16 or AMX, see
``transformer.decoding.precision.cpu_has_bf16``); elsewhere its figure is oneDNN's emulation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import date

import torch

# (in, out) of every product the translation model makes, d_model 256, d_ff 1024, vocabulary 8000
SHAPES = {"attn_proj": (256, 256), "qkv_proj": (256, 768), "ffn_in": (256, 1024), "ffn_out": (1024, 256),
          "vocab_proj": (256, 8000)}  # model_shapes(256, 1024, 8000)
ROWS = (1, 64, 320, 2048)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def gflops_of(rows: int, d_in: int, d_out: int, dtype: torch.dtype, repeats: int = 5,
              min_time: float = 0.05) -> float:
    """Median GFLOP/s of ``(rows, d_in) @ (d_in, d_out)`` in ``dtype`` over ``repeats`` timings."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(rows, d_in, generator=g).to(dtype)  # (R, D_in)
    b = torch.randn(d_in, d_out, generator=g).to(dtype)  # (D_in, D_out)
    out = torch.empty(rows, d_out, dtype=dtype)  # (R, D_out)
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_time or calls < 3:  # warm-up, and the calls a timing needs
        torch.mm(a, b, out=out)
        calls += 1
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.mm(a, b, out=out)
        times.append((time.perf_counter() - t0) / calls)
    return 2 * rows * d_in * d_out / statistics.median(times) / 1e9


def model_shapes(d_model: int, d_ff: int, vocab: int) -> dict[str, tuple[int, int]]:
    """``SHAPES`` for another model size."""
    return {"attn_proj": (d_model, d_model), "qkv_proj": (d_model, 3 * d_model), "ffn_in": (d_model, d_ff),
            "ffn_out": (d_ff, d_model), "vocab_proj": (d_model, vocab)}


def measure(rows=ROWS, dtypes=tuple(DTYPES), repeats: int = 5, min_time: float = 0.05, shapes=None) -> dict:
    """``{dtype: {"<shape> <rows>x<in>x<out>": GFLOP/s}}`` for every shape (``SHAPES`` unless
    given) and row count."""
    return {name: {f"{shape} {r}x{i}x{o}": gflops_of(r, i, o, DTYPES[name], repeats, min_time)
                   for shape, (i, o) in (shapes or SHAPES).items() for r in rows}
            for name in dtypes}


def step_floor(d_model: int = 256, d_ff: int = 1024, vocab: int = 8000, layers: int = 3,
               dtype: torch.dtype = torch.float32, repeats: int = 20) -> float:
    """Milliseconds of one batch-1 decoder step's products alone (see the module doc): the best
    of ``repeats`` passes, each weight a distinct ``(in, out)`` tensor, as a compiled step's
    packed weights are."""
    g = torch.Generator().manual_seed(0)
    per_layer = [(d_model, d_model)] * 6 + [(d_model, d_ff), (d_ff, d_model)]
    weights = [torch.randn(i, o, generator=g).to(dtype) for _ in range(layers) for i, o in per_layer]
    weights.append(torch.randn(d_model, vocab, generator=g).to(dtype))
    rows = {i: torch.randn(1, i, generator=g).to(dtype) for i in (d_model, d_ff)}  # (1, in)
    outs = [torch.empty(1, w.size(1), dtype=dtype) for w in weights]  # (1, out)

    def one_step():
        for w, out in zip(weights, outs):
            torch.mm(rows[w.size(0)], w, out=out)  # (1, in) @ (in, out)

    for _ in range(3):
        one_step()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        one_step()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def weight_megabytes(d_model: int = 256, d_ff: int = 1024, vocab: int = 8000, layers: int = 3,
                     bytes_per_value: int = 4) -> float:
    """The weights one batch-1 decoder step reads (``step_floor``'s products), in MB."""
    return (layers * (6 * d_model * d_model + 2 * d_model * d_ff) + d_model * vocab) * bytes_per_value / 1e6


def limit(results: dict, dtype: str) -> float:
    """The best GFLOP/s ``measure`` found for ``dtype``: what a model's products could reach."""
    return max(results[dtype].values())


def share(gflops: float, results: dict) -> str:
    """``gflops`` as a share of each dtype's limit, e.g. ``"12.3 % of the fp32 limit, 4.1 % of
    the bf16 limit"``."""
    return ", ".join(f"{100 * gflops / limit(results, d):.1f} % of the {d} limit ({limit(results, d):.0f} GFLOP/s)"
                     for d in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=list(ROWS), help="row counts of every shape")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.05, help="seconds one timing lasts at least")
    ap.add_argument("--step-floor", action="store_true",
                    help="also time one batch-1 decoder step's products alone (see the module doc)")
    ap.add_argument("--layers", type=int, default=3, help="decoder layers for --step-floor")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = measure(args.rows, repeats=args.repeats, min_time=args.min_time)
    from transformer.decoding.precision import cpu_has_bf16
    from transformer.evaluation.hardware import cpu_name

    print(f"{'shape':34s} {'fp32':>8s} {'bf16':>8s}  GFLOP/s, {args.threads} thread(s)")
    for key in results["fp32"]:
        print(f"{key:34s} {results['fp32'][key]:8.1f} {results['bf16'][key]:8.1f}")
    print(f"limit: fp32 {limit(results, 'fp32'):.1f}, bf16 {limit(results, 'bf16'):.1f} GFLOP/s "
          f"(bf16 instructions: {'yes' if cpu_has_bf16() else 'no, emulated'})")
    floors = {}
    if args.step_floor:
        for name, dtype in DTYPES.items():
            floors[name] = step_floor(layers=args.layers, dtype=dtype)
            mb = weight_megabytes(layers=args.layers, bytes_per_value=dtype.itemsize)
            print(f"batch-1 decoder step, products alone ({args.layers} layers, {mb:.1f} MB of weights): "
                  f"{name} {floors[name]:.3f} ms ({mb / floors[name]:.1f} GB/s)")
    if args.json:
        res = {"date": date.today().isoformat(), "cpu": cpu_name(), "threads": args.threads,
               "torch": torch.__version__, "bf16_native": cpu_has_bf16(), "gflops_per_s": results,
               "limit": {d: limit(results, d) for d in results}, "step_floor_ms": floors}
        with open(args.json, "w") as f:
            f.write(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
