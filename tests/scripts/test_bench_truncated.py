"""``scripts/bench_truncated.py`` runs end to end on a tiny encoder and prints its JSON table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_truncated.py"


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc peak-RSS reset")
def test_prints_a_row_per_mode_and_length_with_time_and_peak_memory():
    # One case (a time process and a memory process); --max-dense-frames drops full attention at 1,200.
    done = subprocess.run([sys.executable, str(SCRIPT), "--frames", "1200", "--max-dense-frames", "400",
                           "--modes", "full", "blocked", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
                           "--d-ff", "32", "--repeats", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    assert table["settings"]["window"] == 16 and table["host"]["threads"] == 1
    # 1,200 frames are 300 positions after x4 subsampling, where the window runs block by block
    assert [(r["mode"], r["frames"], r["positions"]) for r in table["rows"]] == [("blocked", 1200, 300)]
    assert all(r["ms"] > 0 and r["ms_min"] <= r["ms"] and r["peak_mib"] >= 0 for r in table["rows"])
