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
    "decoding": 2, "accel": 2, "inspect": 2, "hub": 2,
    "inference": 3, "export": 3,
    "evaluation": 4,
    "tasks": 5,
    "serve": 6,
    "cli": 7,
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


def module_imports(root: Path = PACKAGE) -> dict[str, set[str]]:
    """``module -> project modules it imports`` (dotted names; every import statement, those
    inside functions too; ``from a import b`` counts ``a.b`` when that is a module)."""
    modules = {".".join(("transformer", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name and m != "transformer"}
    return graph


def import_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a list of modules (first = last), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_no_import_cycle_between_modules_even_inside_one_package():
    assert import_cycle(module_imports()) == []


def test_the_cycle_walk_finds_a_cycle_inside_a_package_through_a_lazy_import():
    graph = {"transformer.cli.a": {"transformer.cli.b"}, "transformer.cli.b": {"transformer.cli.c"},
             "transformer.cli.c": {"transformer.cli.a"}, "transformer.cli.d": set()}
    assert import_cycle(graph) == ["transformer.cli.a", "transformer.cli.b", "transformer.cli.c", "transformer.cli.a"]
    assert import_cycle({"x": {"y"}, "y": set()}) == []
