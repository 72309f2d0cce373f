"""Graphs for node classification: a user's graph in plain files, or the Planetoid preset.

``graph.py`` reads and writes ``nodes.tsv`` (id, label, split, features) and ``edges.tsv``
(source, target), the main path, refusing a bad row with one line naming the file and row, and
computes the Laplacian eigenvectors a full-attention model takes as positions; ``planetoid.py``
fetches Cora and CiteSeer (cache, mirror, pinned URL), reads their pickles with an unpickler that
admits only the classes they hold, and writes them as those two files; ``pyg.py`` reads and writes
PyTorch Geometric's ``Data`` fields without depending on it; ``datamodule.py`` gives Lightning the
whole graph as one batch per split. The model's front end is
:class:`transformer.modules.frontends.NodeFeatures`; the adjacency becomes attention's mask in
:mod:`transformer.modules.attention` (``EdgeMask``).

The Planetoid preset needs the ``graphs`` extra (scipy).
"""

from transformer.data.graphs.graph import Graph, read_graph, write_graph

__all__ = ["Graph", "read_graph", "write_graph"]
