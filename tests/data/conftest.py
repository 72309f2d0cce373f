"""Fixtures shared by the data tests: a session cache filled from the mirror."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def data_cache(mirror_root: Path, tmp_path_factory) -> Path:
    """A download cache shared by the tests that only read real data (filled lazily)."""
    return tmp_path_factory.mktemp("data-cache")


@pytest.fixture(autouse=True)
def _no_env_mirror(monkeypatch):
    """Tests pass the mirror explicitly; the environment must not stand in for it."""
    monkeypatch.delenv("TRANSFORMER_DATA_MIRROR", raising=False)
    monkeypatch.delenv("TRANSFORMER_DATA_BASE_URL", raising=False)
