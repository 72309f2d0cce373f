"""Registry, cache/mirror resolution and atomic HTTP downloads (against a loopback server)."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
from pathlib import Path

import pytest

from transformer.data.core.sources import DATASETS, ChecksumError, DownloadError, fetch, multi30k_relpath
from transformer.files import sha256_file

SMALL = "multi30k/data/task1/raw/test_2017_mscoco.en.gz"


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_registry_matches_mirror_sums(mirror_root):
    sums = {}
    for line in (mirror_root / "SHA256SUMS").read_text().splitlines():
        sha, rel = line.split()
        sums[rel] = sha
    for rel, sha in sums.items():
        assert DATASETS[rel].sha256 == sha, rel
    # test_2018_flickr is not mirrored but must be downloadable
    for lang in ("en", "de", "fr", "cs"):
        assert f"multi30k/data/task1/raw/test_2018_flickr.{lang}.gz" in DATASETS
    for src in DATASETS.values():
        assert src.url.startswith("https://raw.githubusercontent.com/")
        assert re.search(r"/[0-9a-f]{40}/", src.url), f"URL not commit-pinned: {src.url}"
        assert src.url.endswith(Path(src.relpath).name)


def test_czech_has_no_2017_splits():
    with pytest.raises(ValueError, match="no test_2017_flickr split for language 'cs'"):
        multi30k_relpath("test_2017_flickr", "cs")


def test_mirror_then_cache(mirror_root, tmp_path):
    cache = tmp_path / "cache"
    p = fetch(SMALL, cache, mirror_root=mirror_root)
    assert p == cache / SMALL and sha256_file(p) == DATASETS[SMALL].sha256
    # later starts hit the cache: works with no mirror and no network
    assert fetch(SMALL, cache, mirror_root=tmp_path / "nowhere", base_url="http://127.0.0.1:9") == p


def test_mirror_from_environment(mirror_root, tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_DATA_MIRROR", str(mirror_root))
    assert fetch(SMALL, tmp_path).is_file()


def test_corrupt_cache_is_replaced(mirror_root, tmp_path):
    dest = tmp_path / SMALL
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"garbage")
    assert sha256_file(fetch(SMALL, tmp_path, mirror_root=mirror_root)) == DATASETS[SMALL].sha256


def test_corrupt_mirror_raises_and_leaves_nothing(mirror_root, tmp_path):
    bad_mirror = tmp_path / "mirror"
    (bad_mirror / SMALL).parent.mkdir(parents=True)
    (bad_mirror / SMALL).write_bytes(b"not the real file")
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError) as e:
        fetch(SMALL, cache, mirror_root=bad_mirror)
    assert DATASETS[SMALL].sha256 in str(e.value) and DATASETS[SMALL].url in str(e.value)
    assert _files(cache) == []


def test_unknown_path():
    with pytest.raises(KeyError):
        fetch("nope/file.txt")


# ---------------------------------------------------------------- HTTP


class _DroppingHandler(http.server.SimpleHTTPRequestHandler):
    """Announces the full length, sends half of the body, then closes the connection."""

    def do_GET(self):  # noqa: N802
        body = Path(self.translate_path(self.path)).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args):
        pass


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def serve(tmp_path):
    """serve(handler_cls) -> base URL of a loopback server over tmp_path/upstream."""
    root = tmp_path / "upstream"
    root.mkdir()
    servers = []

    def start(handler=_QuietHandler):
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    start.root = root
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _publish(mirror_root: Path, root: Path, data: bytes | None = None) -> None:
    (root / SMALL).parent.mkdir(parents=True, exist_ok=True)
    if data is None:
        shutil.copyfile(mirror_root / SMALL, root / SMALL)
    else:
        (root / SMALL).write_bytes(data)


def test_download_good_file(mirror_root, tmp_path, serve):
    base = serve()
    _publish(mirror_root, serve.root)
    cache = tmp_path / "cache"
    p = fetch(SMALL, cache, base_url=base)
    assert sha256_file(p) == DATASETS[SMALL].sha256
    assert _files(cache) == [p]


def test_download_base_url_from_environment(mirror_root, tmp_path, serve, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_DATA_BASE_URL", serve())
    _publish(mirror_root, serve.root)
    assert fetch(SMALL, tmp_path / "cache").is_file()


def test_download_corrupted_file(mirror_root, tmp_path, serve):
    base = serve()
    good = (mirror_root / SMALL).read_bytes()
    _publish(mirror_root, serve.root, good[:-10] + b"0123456789")
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError) as e:
        fetch(SMALL, cache, base_url=base)
    msg = str(e.value)
    assert f"{base}/{SMALL}" in msg and DATASETS[SMALL].sha256 in msg and e.value.actual in msg
    assert _files(cache) == []


def test_download_connection_dropped(mirror_root, tmp_path, serve):
    base = serve(_DroppingHandler)
    _publish(mirror_root, serve.root)
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match="connection closed"):
        fetch(SMALL, cache, base_url=base)
    assert _files(cache) == []


def test_download_missing_file(tmp_path, serve):
    base = serve()
    with pytest.raises(DownloadError, match="404"):
        fetch(SMALL, tmp_path / "cache", base_url=base)
    assert _files(tmp_path / "cache") == []
