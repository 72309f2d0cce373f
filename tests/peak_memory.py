"""A command run as a child process with that child's own peak resident size.

``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` is the largest of every child the test process
has waited for, so a bound read from it fails after any heavier command earlier in the same
process. And a child's peak counts what it held before ``exec``: a child forked from the test
process starts with the test process's pages (hundreds of MB once torch is loaded). So the
command runs under a small launcher (a fresh Python without torch) that forks it, reaps it with
``os.wait4`` and writes that one child's peak."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

LAUNCH = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
child.returncode = os.waitstatus_to_exitcode(status)  # reaped here
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(child.returncode)
"""


def run_with_peak(args: list[str], *, input: str = "", cwd: Path | str | None = None, env: dict | None = None,
                  timeout: float = 120) -> tuple[subprocess.CompletedProcess, int]:
    """``(the finished process, its peak resident size in KiB)``; stdout and stderr as text."""
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(peak), *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
                                start_new_session=True)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and the command
            proc.communicate()
            raise
        done = subprocess.CompletedProcess(args, proc.returncode, out, err)
        return done, int(peak.read_text()) if peak.exists() else 0
