"""The memory-bound tests' measure: a child's own peak resident size, not the largest of every
child the test process has run."""

import sys

from tests.peak_memory import run_with_peak

HEAVY = "x = bytearray(400 << 20); x[::4096] = b'1' * len(x[::4096])"  # 400 MiB, every page touched


def test_a_light_command_after_a_heavy_one_reports_its_own_peak():
    heavy, heavy_peak = run_with_peak([sys.executable, "-c", HEAVY])
    light, light_peak = run_with_peak([sys.executable, "-c", "print('ok')"])
    assert heavy.returncode == 0 and light.returncode == 0 and light.stdout == "ok\n"
    assert heavy_peak > 400 * 1024 > 4 * light_peak  # KiB


def test_exit_status_input_and_error_output_come_back():
    proc, _ = run_with_peak([sys.executable, "-c", "import sys; sys.stderr.write(sys.stdin.read()); sys.exit(2)"],
                            input="error: x\n")
    assert proc.returncode == 2 and proc.stderr == "error: x\n" and proc.stdout == ""
