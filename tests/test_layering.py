"""Imports go one way: a package of ``transformer/`` imports only from lower layers (and itself).

Every ``import`` statement of every module counts, including those inside functions, so a
lazy import cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"
# Lower numbers are lower layers; packages on one layer do not import each other.
LAYERS = {
    "modules": 0, "data": 0,
    "models": 1,
    "decoding": 2, "accel": 2, "inspect": 2,
    "inference": 3, "export": 3,
    "evaluation": 4,
    "tasks": 5,
    "cli": 6,
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """``(package, line)`` for every ``transformer.<package>`` a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "transformer"]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "transformer" and len(parts) > 1 and parts[1] in LAYERS:
                found.add((parts[1], node.lineno))
    return found


def upward_imports(root: Path = PACKAGE) -> list[str]:
    """Every import of a package on the same or a higher layer, as ``file:line: a -> b``."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) < 2:
            continue  # transformer/__init__.py
        package = rel.parts[0]
        for target, line in sorted(imported_packages(path)):
            if target != package and LAYERS[target] >= LAYERS[package]:
                bad.append(f"transformer/{rel}:{line}: {package} -> {target}")
    return bad


def test_every_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYERS)


def test_no_package_imports_upward_or_sideways():
    assert upward_imports() == []


def test_the_walk_finds_an_upward_import_even_inside_a_function(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "x.py").write_text("def f():\n    from transformer.decoding.api import KVCacheLike\n")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "y.py").write_text("import transformer.models.x\nfrom transformer import evaluation\n")
    assert upward_imports(tmp_path) == ["transformer/models/x.py:2: models -> decoding"]
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "z.py").write_text("from transformer.tasks.checkpoint import load_task\n")
    assert upward_imports(tmp_path)[0] == "transformer/evaluation/z.py:1: evaluation -> tasks"


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_each_package_imports_on_its_own(package):
    # a cycle between packages would show here as an ImportError for one import order
    import importlib
    import subprocess
    import sys

    importlib.import_module(f"transformer.{package}")
    subprocess.run([sys.executable, "-c", f"import transformer.{package}"], check=True)
