"""A tiny graph in the plain files (nodes.tsv, edges.tsv) for the graph tests."""

from __future__ import annotations

from pathlib import Path

# Two communities of four nodes (a..d, e..h) joined by one edge d-e; feature 0 says the
# community for most nodes, the label always does.
NODES = [("a", "x", "train", 1, 0, 0), ("b", "x", "train", 1, 0, 1), ("c", "x", "dev", 1, 1, 0),
         ("d", "x", "test", 0, 0, 1), ("e", "y", "train", 0, 1, 1), ("f", "y", "train", 0, 1, 0),
         ("g", "y", "dev", 0, 1, 1), ("h", "y", "test", 1, 1, 0), ("u", "", "", 0, 0, 0)]
EDGES = [("a", "b"), ("a", "c"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "f"), ("e", "g"), ("f", "g"), ("g", "h"),
         ("h", "u")]


def write_tiny_graph(folder: Path, nodes=NODES, edges=EDGES) -> tuple[Path, Path]:
    """``nodes.tsv`` and ``edges.tsv`` of the tiny graph (or the rows given) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    n, e = folder / "nodes.tsv", folder / "edges.tsv"
    width = len(nodes[0]) - 3 if nodes else 3
    n.write_text("id\tlabel\tsplit\t" + "\t".join(f"f{j}" for j in range(width)) + "\n"
                 + "".join("\t".join(str(c) for c in row) + "\n" for row in nodes))
    e.write_text("source\ttarget\n" + "".join(f"{s}\t{t}\n" for s, t in edges))
    return n, e
