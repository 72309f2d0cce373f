"""The Planetoid preset: the pickles are read by an unpickler that admits only the classes they
hold (a crafted pickle is refused before anything of it runs), the public split has the sizes
every paper reports, CiteSeer's 15 nodes missing from its test rows get zero rows as the libraries give them, and
the files download from a pinned URL (a local server stands in for GitHub)."""

from __future__ import annotations

import functools
import http.server
import os
import pickle
import shutil
import threading

import numpy as np
import pytest

from transformer.data.graphs.graph import read_graph
from transformer.data.graphs.planetoid import (
    PARTS,
    fetch_planetoid,
    planetoid_graph,
    restricted_load,
    write_planetoid,
)


class _Exploit:
    """Unpickling this calls ``os.system`` (what a crafted file does)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_crafted_pickle_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    bad = tmp_path / "ind.cora.x"
    bad.write_bytes(pickle.dumps(_Exploit(marker), protocol=2))
    with pytest.raises(ValueError, match=r"ind\.cora\.x: refused global (posix|os|nt)\.system"):
        restricted_load(bad)
    assert not marker.exists()
    # builtins that run code are refused too, whatever the protocol
    for payload in (pickle.dumps(eval, protocol=0), pickle.dumps(getattr, protocol=4)):
        bad.write_bytes(payload)
        with pytest.raises(ValueError, match="refused global"):
            restricted_load(bad)


def test_a_truncated_pickle_is_one_error_naming_the_file(tmp_path):
    bad = tmp_path / "ind.cora.graph"
    bad.write_bytes(pickle.dumps({0: [1, 2]}, protocol=2)[:10])
    with pytest.raises(ValueError, match="ind.cora.graph: not a readable Planetoid pickle"):
        restricted_load(bad)


@pytest.mark.parametrize(("name", "nodes", "features", "classes", "edges", "isolated"), [
    ("cora", 2708, 1433, 7, 10556, 0), ("citeseer", 3327, 3703, 6, 9104, 15)])
def test_the_public_split_as_the_libraries_give_it(mirror_root, data_cache, name, nodes, features, classes, edges,
                                                   isolated):
    graph = planetoid_graph(fetch_planetoid(name, data_cache, mirror_root))
    assert graph.features.shape == (nodes, features) and len(graph.classes) == classes
    assert graph.edge_index.shape == (2, edges)  # PyTorch Geometric's counts: both ways, no self-loops
    train = {"cora": 140, "citeseer": 120}[name]
    assert [int(graph.mask(s).sum()) for s in ("train", "dev", "test")] == [train, 500, 1000]
    assert np.array_equal(np.flatnonzero(graph.mask("train")), np.arange(train))  # the first nodes, 20 a class ...
    assert np.bincount(graph.labels[graph.mask("train")]).tolist() == [20] * classes
    assert np.array_equal(np.flatnonzero(graph.mask("dev")), np.arange(train, train + 500))  # ... then 500
    unlabelled = graph.labels < 0
    assert int(unlabelled.sum()) == isolated  # CiteSeer's test indices skip 15 nodes:
    assert not graph.features[unlabelled].any()  # zero rows, no label, in no split
    assert (graph.split[unlabelled] == "").all()


def test_the_preset_is_written_as_a_users_files(mirror_root, data_cache):
    nodes, edges = write_planetoid("cora", data_cache, mirror_root)
    again = read_graph(nodes, edges)
    graph = planetoid_graph(fetch_planetoid("cora", data_cache, mirror_root))
    assert np.array_equal(again.features, graph.features) and np.array_equal(again.labels, graph.labels)
    assert np.array_equal(again.edge_index, graph.edge_index) and list(again.split) == list(graph.split)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_the_files_download_from_the_pinned_url_and_are_checked(mirror_root, tmp_path):
    upstream = tmp_path / "upstream" / "planetoid"
    upstream.mkdir(parents=True)
    for part in PARTS:
        shutil.copy(mirror_root / "planetoid" / f"ind.cora.{part}", upstream / f"ind.cora.{part}")
    handler = functools.partial(_Quiet, directory=str(tmp_path / "upstream"))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        files = fetch_planetoid("cora", tmp_path / "cache", base_url=base)
        assert files["x"] == tmp_path / "cache" / "planetoid" / "ind.cora.x"
        (upstream / "ind.cora.y").write_bytes(b"tampered")
        (tmp_path / "cache" / "planetoid" / "ind.cora.y").unlink()
        with pytest.raises(Exception, match="checksum mismatch"):
            fetch_planetoid("cora", tmp_path / "cache", base_url=base)
    finally:
        httpd.shutdown()
