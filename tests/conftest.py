"""Shared pytest fixtures: seeding, the offline dataset mirror, a no-network guard; torch threads
shared out among pytest-xdist's worker processes."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Each pytest-xdist worker gets its share of the cores as torch threads (one each for ``-n 2``
    on two cores), and so do the commands it starts (``OMP_NUM_THREADS``). Left at torch's
    default, every worker runs one thread per core: OpenMP's threads then wait on each other
    across the processes, and a test that trains in process takes several times as long on a
    busy 2-core machine. A thread count the environment sets is kept."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // int(workers))
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch starts its pool; inherited by subprocesses
    import torch

    torch.set_num_threads(threads)


def _mirror_root() -> Path | None:
    env = os.environ.get("TRANSFORMER_DATA_MIRROR")
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared" / "datasets")
    for c in candidates:
        if (c / "multi30k").is_dir():
            return c.resolve()
    return None


@pytest.fixture(scope="session")
def mirror_root() -> Path:
    """The byte-for-byte dataset mirror; tests that need real data skip (loudly) without it."""
    root = _mirror_root()
    if root is None:
        pytest.skip("dataset mirror not found: set TRANSFORMER_DATA_MIRROR")
    return root


@pytest.fixture(autouse=True)
def _seed_and_offline(monkeypatch):
    """Seed torch and forbid connections to anything but loopback (and local Unix sockets,
    which worker processes talk over)."""
    import torch

    torch.manual_seed(0)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    real_connect = socket.socket.connect

    def guarded(self, address):
        if getattr(socket, "AF_UNIX", None) is not None and self.family == socket.AF_UNIX:
            return real_connect(self, address)
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and not (host.startswith("127.") or host in ("localhost", "::1")):
            raise RuntimeError(f"test tried to reach the network: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    yield
