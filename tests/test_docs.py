"""The README stays true to the code and to BENCHMARKS.md.

- every row of the concept map names a file that exists and symbols defined in it;
- the results table and BENCHMARKS.md's summary table hold the same numbers, row by row;
- every ``experiment=NAME`` the README mentions is a config in ``conf/experiment/``;
- the README's test command is the one CI runs.

Plain text and ``ast`` only: no package import, no network.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BENCHMARKS = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")

NUMBER = re.compile(r"\d+(?:\.\d+)?")
BACKTICKED = re.compile(r"`([^`]+)`")


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section (up to the next heading of level 1 or 2)."""
    match = re.search(rf"^## {re.escape(title)}[ \t]*$(.*?)(?=^#{{1,2}} |\Z)", text, re.M | re.S)
    assert match, f"no '## {title}' section"
    return match.group(1)


def split_row(line: str) -> list[str]:
    """Cells of a markdown table row; a ``|`` inside backticks does not split."""
    cells, cell, in_code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
    cells.append(cell.strip())
    return cells


def first_table(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and body rows of the first markdown table in ``text``."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("|")), None)
    assert start is not None, "no table"
    block = []
    for line in lines[start:]:
        if not line.lstrip().startswith("|"):
            break
        block.append(split_row(line))
    header, rule, *rows = block
    assert all(set(c) <= set("-: ") for c in rule), f"not a table rule: {rule}"
    return header, rows


def column(header: list[str], prefix: str) -> int:
    matches = [i for i, name in enumerate(header) if name.lower().startswith(prefix)]
    assert len(matches) == 1, f"expected one column starting with {prefix!r} in {header}"
    return matches[0]


# ----------------------------------------------------------------------------- concept map
def concept_rows() -> list[tuple[str, str, list[str]]]:
    header, rows = first_table(section(README, "Concept map"))
    path_col, symbol_col = column(header, "path"), column(header, "symbol")
    out = []
    for row in rows:
        paths = BACKTICKED.findall(row[path_col])
        assert len(paths) == 1, f"concept-map row {row[0]!r} needs one path in backticks"
        out.append((row[0], paths[0], BACKTICKED.findall(row[symbol_col])))
    return out


def defined_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body defines: functions, classes, assignments."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def test_concept_map_is_not_empty():
    rows = concept_rows()
    assert len(rows) >= 20
    assert all(symbols for _, _, symbols in rows), "every row names at least one symbol"


@pytest.mark.parametrize("idea,path,symbols", concept_rows(), ids=lambda v: v if isinstance(v, str) else None)
def test_concept_map_row_names_real_code(idea, path, symbols):
    file = ROOT / path
    assert file.is_file(), f"{idea}: {path} does not exist"
    module = defined_names(ast.parse(file.read_text(encoding="utf-8")).body)
    for symbol in symbols:
        owner, _, member = symbol.partition(".")
        assert owner in module, f"{idea}: {path} defines no {owner}"
        if member:
            node = module[owner]
            assert isinstance(node, ast.ClassDef), f"{idea}: {owner} in {path} is not a class"
            assert member in defined_names(node.body), f"{idea}: class {owner} in {path} has no {member}"


# ----------------------------------------------------------------------------- results
def result_numbers(text: str, title: str) -> list[list[str]]:
    header, rows = first_table(section(text, title))
    col = column(header, "result")
    return [NUMBER.findall(row[col]) for row in rows]


def test_readme_results_agree_with_benchmarks_summary():
    readme = result_numbers(README, "Results")
    summary = result_numbers(BENCHMARKS, "Summary")
    assert readme and all(readme), "every README result row holds a number"
    assert len(readme) == len(summary), (
        f"README's results table has {len(readme)} rows, BENCHMARKS.md's summary {len(summary)}"
    )
    for i, (ours, theirs) in enumerate(zip(readme, summary), start=1):
        assert ours == theirs, f"row {i}: README {ours} vs BENCHMARKS.md summary {theirs}"


# A command's parts: the program, each key=value override, each --flag.
COMMAND_PART = re.compile(r"transformer-[a-z]+|scripts/[\w./-]+\.py|[\w.@/+-]+=\S+|--[\w-]+")


def command_cells(text: str, title: str) -> list[str]:
    header, rows = first_table(section(text, title))
    col = column(header, "recipe")
    return [row[col] for row in rows]


def command_parts(cell: str) -> list[str]:
    """The programs, overrides and flags of every backticked command in a results cell."""
    return sorted(part for command in BACKTICKED.findall(cell) for part in COMMAND_PART.findall(command))


def test_readme_command_cells_carry_the_commands_of_benchmarks_summary():
    # A result is reproducible from its README cell: the same programs, overrides (a time cap,
    # decode settings) and flags as the BENCHMARKS.md summary row holding the same number.
    readme, summary = command_cells(README, "Results"), command_cells(BENCHMARKS, "Summary")
    assert len(readme) == len(summary)
    for i, (ours, theirs) in enumerate(zip(readme, summary), start=1):
        assert command_parts(ours), f"README results row {i} names no command: {ours!r}"
        assert command_parts(ours) == command_parts(theirs), (
            f"row {i}: README's command cell {ours!r} differs from BENCHMARKS.md's summary {theirs!r}")


def test_command_parts_read_overrides_flags_and_programs():
    cell = "`transformer-train experiment=multi30k trainer.max_time=00:00:06:50`; `python3 scripts/bench.py --accel cpu`"
    assert command_parts(cell) == sorted(["transformer-train", "experiment=multi30k", "trainer.max_time=00:00:06:50",
                                          "scripts/bench.py", "--accel"])
    assert command_parts("`transformer-train experiment=multi30k`") != command_parts(cell.split(";")[0])


def test_number_extraction_reads_ranges_and_ratios():
    # The comparison is only as good as its reading of cells like these.
    assert NUMBER.findall("94.98–95.42 (mean 95.27); uniform ensemble 95.54") == ["94.98", "95.42", "95.27", "95.54"]
    assert NUMBER.findall("1000/1000; 2.4–2.6×") == ["1000", "1000", "2.4", "2.6"]


# ----------------------------------------------------------------------------- commands
def test_every_experiment_in_readme_exists():
    names = sorted(set(re.findall(r"experiment=([A-Za-z0-9_]+)", README)))
    assert names, "the README names no experiment"
    missing = [n for n in names if not (ROOT / "conf" / "experiment" / f"{n}.yaml").is_file()]
    assert not missing, f"README names experiments without a conf/experiment/ file: {missing}"


def test_readme_test_command_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = "python3 -m pytest -q -n 2 --dist worksteal"
    assert command in ci.splitlines()
    assert "    " + command in README.splitlines()
