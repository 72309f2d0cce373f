"""The FSDD preset: a registry of pinned URLs and checksums that matches the mirror, fetching
from mirror or (a local stand-in for) upstream, and the classification manifests."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading

import pytest

from transformer.data.core.sources import ChecksumError
from transformer.data.speech.fsdd import FSDD_SPEAKERS, fsdd_recordings, fsdd_relpath, fsdd_sources, write_fsdd_manifests
from transformer.data.speech.manifest import read_manifest
from transformer.files import sha256_file


def test_registry_matches_the_mirror_checksums(mirror_root):
    sums = dict(reversed(line.split()) for line in (mirror_root / "SHA256SUMS.inputs").read_text().splitlines()
                if "  fsdd/recordings/" in line)
    sources = fsdd_sources()
    assert len(sources) == len(sums) == 3000
    assert {rel: s.sha256 for rel, s in sources.items()} == sums
    for rel, src in sources.items():
        assert re.fullmatch(r"https://raw\.githubusercontent\.com/Jakobovski/free-spoken-digit-dataset/"
                            r"[0-9a-f]{40}/recordings/\d_[a-z]+_\d+\.wav", src.url), src.url
        assert src.url.endswith(rel.removeprefix("fsdd/"))
    assert fsdd_relpath(7, "jackson", 32) in sources


def test_recordings_come_from_the_mirror_checked(fsdd_few):
    assert len(fsdd_few) == 2 * 10 * 7
    rec = fsdd_few[0]
    assert (rec.digit, rec.speaker, rec.index, rec.split) == (0, "george", 0, "test")
    assert rec.path.name == "0_george_0.wav"
    assert sha256_file(rec.path) == fsdd_sources()[fsdd_relpath(0, "george", 0)].sha256
    assert {r.split for r in fsdd_few if r.index < 5} == {"test"} and {r.split for r in fsdd_few if r.index >= 5} == {"train"}


def test_unknown_speaker():
    with pytest.raises(ValueError, match=r"no speaker \['bob'\]"):
        fsdd_recordings(speakers=["bob"])


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_download_from_a_local_server(mirror_root, tmp_path):
    """Upstream's layout served over loopback: a good file arrives checked, a corrupt one fails."""
    upstream = tmp_path / "upstream" / "fsdd" / "recordings"
    upstream.mkdir(parents=True)
    shutil.copy(mirror_root / fsdd_relpath(3, "theo", 9), upstream)
    (upstream / "4_theo_9.wav").write_bytes((mirror_root / fsdd_relpath(4, "theo", 9)).read_bytes()[:-4] + b"oops")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path / "upstream")))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        [rec] = fsdd_recordings(tmp_path / "cache", base_url=base, speakers=["theo"], digits=[3], indices=[9])
        assert sha256_file(rec.path) == fsdd_sources()[fsdd_relpath(3, "theo", 9)].sha256
        with pytest.raises(ChecksumError):
            fsdd_recordings(tmp_path / "cache", base_url=base, speakers=["theo"], digits=[4], indices=[9])
        assert not (tmp_path / "cache" / fsdd_relpath(4, "theo", 9)).exists()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_classification_manifests(fsdd_few, tmp_path):
    written = write_fsdd_manifests(tmp_path / "fsdd", fsdd_few)
    assert set(written) == {"train", "test", "speaker=george/train", "speaker=george/test",
                            "speaker=theo/train", "speaker=theo/test"}
    assert written["speaker=theo/test"] == tmp_path / "fsdd" / "speaker=theo" / "test.tsv"
    rows = {k: read_manifest(p) for k, p in written.items()}
    by_path = {r.path: r for r in fsdd_few}
    for key, split_rows in rows.items():
        recs = [by_path[row.path] for row in split_rows]
        assert all(row.text == str(rec.digit) for row, rec in zip(split_rows, recs))  # label = the digit
        assert all(row.speaker == rec.speaker for row, rec in zip(split_rows, recs))  # from the file name
        if key in ("train", "test"):
            assert {r.split for r in recs} == {key}
        else:
            speaker = key.split("/")[0].removeprefix("speaker=")
            assert ({r.speaker for r in recs} == {speaker}) == key.endswith("/test")
            assert (speaker not in {r.speaker for r in recs}) == key.endswith("/train")
    assert len(rows["train"]) + len(rows["test"]) == len(fsdd_few)
    assert len(rows["speaker=george/test"]) + len(rows["speaker=george/train"]) == len(fsdd_few)
    # the manifests point into the cache with paths relative to themselves
    assert not (tmp_path / "fsdd" / "train.tsv").read_text().startswith("/")


def test_all_six_speakers_known():
    assert FSDD_SPEAKERS == ("george", "jackson", "lucas", "nicolas", "theo", "yweweler")
