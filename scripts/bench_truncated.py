"""Time and peak memory of one encoder forward over speech-length inputs: full self-attention
against truncated (local-window) self-attention, dense and blocked (issue 86).

Each case runs in a fresh process (one CPU thread) and builds the encoder of the speech recipe's
size, ``TransformerEncoder`` with ``--d-model 144 --n-heads 4 --n-layers 6 --d-ff 576``, batch 1, in
eval mode under ``torch.inference_mode()``, and encodes ``frames // --subsample`` random
``(1, T, d_model)`` vectors with an all-True padding mask through ``forward_embeddings``: the
vectors a ×4 convolutional front end makes of the frames (the front end itself is left out: its
cost is the same, and linear, in every mode). ``--subsample 1`` encodes one vector per frame.

Modes:
  full     ``window=None``: every position attends to every position (T² time; without a mask
           SDPA's fused CPU kernel keeps no (T, T) scores, but a relative position bias is (T, T)).
  band     ``window=--window`` as the dense ``(T, T)`` band mask (``LocalWindow.dense``), forced
           at every length: how truncated attention ran before it ran block by block.
  blocked  ``window=--window`` as the encoder runs it: by ``LocalWindow``'s rule, blocks of queries
           over their key slices from 256 positions on (below, the dense band).

Each case runs twice, each time in a fresh process:

* time: the median and the fastest of ``--repeats`` forwards (``ms``, ``ms_min``: on a shared
  machine the fastest is the least disturbed), after one warm-up forward of the same size;
* memory: peak resident set size during one forward minus the resident set size just before it
  (``peak_mib``; Linux: after a warm-up forward on 32 positions the peak is reset by writing 5 to
  ``/proc/self/clear_refs`` and read as ``VmHWM``). In this process glibc is told to serve every
  allocation of 64 KiB or more by ``mmap`` and to trim its heap (``MALLOC_MMAP_THRESHOLD_``,
  ``MALLOC_TRIM_THRESHOLD_``), so the memory a freed tensor held leaves the resident set at once
  and the peak is what the forward's tensors held at one time, not what the allocator kept.
  (That costs page faults, which is why time is measured in a process of its own.)
  ``tracemalloc`` would see none of torch's allocations; the resident set sees all of them (and a
  little of the interpreter's own).

The parent prints one JSON object: the settings, the host, and a row per case
(``mode, frames, positions, ms, ms_min, peak_mib``). Modes ``full`` and ``band`` stop at
``--max-dense-frames``: the (T, T) tensors of 60,000 frames do not fit in memory.

    python scripts/bench_truncated.py                          # 100 .. 60,000 frames, window 16
    python scripts/bench_truncated.py --positional relative    # T5's bias: (T, T) in full attention
    python scripts/bench_truncated.py --subsample 1 --repeats 3   # one position per frame
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODES = ("full", "band", "blocked")


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def run_case(args: argparse.Namespace) -> dict:
    """One forward size in this process: ``{"ms", "ms_min"}`` or ``{"peak_mib"}`` (``args.measure``)."""
    import torch

    import transformer.modules.attention as attention
    from transformer.models.transformer import StackConfig, TransformerEncoder
    from transformer.modules.positional import RelativePositionBias, SinusoidalPositionalEncoding

    torch.set_num_threads(1)
    torch.manual_seed(0)
    (frames,) = args.frames
    if args.mode == "band":
        attention.BLOCKED_MIN_LENGTH = 2**62  # every LocalWindow takes the dense (T, T) band
    positional = {"sinusoidal": SinusoidalPositionalEncoding, "relative": RelativePositionBias}[args.positional]
    cfg = StackConfig(vocab_size=1, pad_id=0, d_model=args.d_model, n_heads=args.n_heads, d_ff=args.d_ff,
                      dropout=0.0, positional=positional, window=None if args.mode == "full" else args.window,
                      max_len=frames)
    encoder = TransformerEncoder(cfg, args.n_layers).eval()
    t = max(1, frames // args.subsample)
    x = torch.randn(1, t, args.d_model)  # (B, T, D): the front end's output
    real = torch.ones(1, t, dtype=torch.bool)  # (B, T)
    with torch.inference_mode():
        if args.measure == "memory":
            encoder.forward_embeddings(torch.randn(1, 32, args.d_model), torch.ones(1, 32, dtype=torch.bool))
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            before = _status_kib("VmRSS")
            encoder.forward_embeddings(x, real)
            return {"peak_mib": round((_status_kib("VmHWM") - before) / 1024, 2)}
        encoder.forward_embeddings(x, real)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            encoder.forward_embeddings(x, real)
            times.append(time.perf_counter() - start)
    return {"ms": round(statistics.median(times) * 1e3, 2), "ms_min": round(min(times) * 1e3, 2)}


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    return names[0] if names else platform.machine()


def _child_env(measure: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if measure == "memory":
        env.update(MALLOC_MMAP_THRESHOLD_=str(64 * 1024), MALLOC_TRIM_THRESHOLD_=str(128 * 1024))
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, nargs="+", default=[100, 1000, 6000, 60000])
    parser.add_argument("--subsample", type=int, default=4, help="frames per encoder position (the front end's)")
    parser.add_argument("--window", type=int, default=16, help="positions each side (16 × 40 ms = ±0.64 s at ×4)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--max-dense-frames", type=int, default=6000, help="longest input for full and band")
    parser.add_argument("--positional", choices=("sinusoidal", "relative"), default="sinusoidal")
    parser.add_argument("--d-model", type=int, default=144)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--n-layers", type=int, default=6)
    parser.add_argument("--d-ff", type=int, default=576)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # set in a case's own process
    parser.add_argument("--measure", choices=("time", "memory"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode is not None:
        print(json.dumps(run_case(args)))
        return
    rows = []
    load_before = [round(x, 2) for x in os.getloadavg()]
    shared = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
              ("subsample", "window", "positional", "d_model", "n_heads", "n_layers", "d_ff", "repeats")]
    for frames in args.frames:
        for mode in args.modes:
            if mode != "blocked" and frames > args.max_dense_frames:
                continue
            row = {"mode": mode, "frames": frames, "positions": max(1, frames // args.subsample)}
            for measure in ("time", "memory"):
                cmd = [sys.executable, __file__, f"--mode={mode}", f"--measure={measure}", f"--frames={frames}", *shared]
                done = subprocess.run(cmd, env=_child_env(measure), capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"error: {mode} at {frames} frames failed:\n{done.stderr[-2000:]}")
                row.update(json.loads(done.stdout.strip().splitlines()[-1]))
            rows.append(row)
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    settings = {k: getattr(args, k) for k in ("subsample", "window", "positional", "d_model", "n_heads",
                                              "n_layers", "d_ff", "repeats")}
    host = {"cpu": _cpu_name(), "cores": os.cpu_count(), "threads": 1,
            "python": platform.python_version(), "load_average_before": load_before,
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}  # other work on a shared machine
    import torch

    host["torch"] = torch.__version__
    print(json.dumps({"settings": settings, "host": host, "batch": 1, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
