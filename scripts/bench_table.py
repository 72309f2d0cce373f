"""Markdown table of `bench_translation.py` JSON results (one row per file).

    python3 scripts/bench_table.py runs/suite/bench/*.json > runs/suite/bench.md
"""

from __future__ import annotations

import json
import sys


def row(path: str) -> str:
    r = json.load(open(path))
    size = r["size"]
    ours = r.get("ours", {})
    variant = ", ".join(filter(None, [
        "bf16 weights" if ours.get("bf16_true") else ("bf16 autocast" if "bfloat16" in r["precision"] else "fp32"),
        f"compiled ({ours.get('compile_mode', 'default')})" if ours.get("compile") else "eager",
        f"accel={ours.get('accel')}" if ours.get("accel") not in (None, "none") else "",
        "Marian compiled" if r.get("marian_compiled") else "",
        f"pad to {ours['pad_to_multiple']}" if ours.get("pad_to_multiple", 1) > 1 else "",
    ]))
    tps = r["train_tokens_per_s"]
    mfu = r.get("mfu") or {}
    mfu_text = f"{100 * mfu['ours']:.1f} % / {100 * mfu['marian']:.1f} %" if mfu else "–"
    device = r.get("gpu") or r.get("cpu")
    return (f"| d{size['d_model']}, {size['layers']}+{size['layers']} | {variant} | {tps['ours']:,.0f} / "
            f"{tps['marian']:,.0f} = {r['train_speedup_vs_marian']:.2f}× | {mfu_text} | {device} | {r['date']} |")


def main() -> None:
    print("| size | ours (Marian: eager, same precision) | training tokens/s ours / Marian | MFU ours / Marian | device | date |")
    print("|---|---|---|---|---|---|")
    for path in sys.argv[1:]:
        print(row(path))


if __name__ == "__main__":
    main()
