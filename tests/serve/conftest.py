"""Fixtures of the server tests: the tiny checkpoints of every kind, once per session, and
the served models loaded from them through transformer-serve's own config check."""

from __future__ import annotations

import pytest
from serve_models import build_checkpoints, models_override, serve_cfg


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    return build_checkpoints(tmp_path_factory.mktemp("serve_ckpts"))


@pytest.fixture(scope="session")
def served(checkpoints):
    """Every checkpoint loaded as a served model, through transformer-serve's check."""
    pytest.importorskip("fastapi")
    from transformer.cli import serve as serve_cli

    return serve_cli.check(serve_cfg(models_override(checkpoints)))
