"""``hf:<org>/<name>`` downloads through ``huggingface_hub`` from the endpoint ``HF_ENDPOINT``
names: here a local HTTP server on 127.0.0.1 that answers the hub's API as ``snapshot_download``
calls it (the revision's commit and files, the file tree, then each file by ``resolve`` with its
ETag and commit headers). ``transformer-fill`` then answers as from the folder itself; run again
with ``HF_HUB_OFFLINE=1`` and the same ``HF_HOME``, it answers from the hub cache without a
request, as ``transformers`` does offline; an id that is not cached is the offline error line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from folders import write_folder

pytest.importorskip("transformers")

REPO = "tiny-org/tiny-bert"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def git_blob_id(data: bytes) -> str:
    """The git object id of a file's bytes: what the hub gives as a file's ``oid`` and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    """A folder served as the hub repository :data:`REPO` at commit :data:`COMMIT`; ``requests``
    records each ``(method, path)`` it was asked."""

    def __init__(self, folder: Path):
        self.files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
        self.requests: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self.answer(head=True)

            def do_GET(self):
                self.answer(head=False)

            def answer(self, head: bool):
                path = unquote(urlsplit(self.path).path)
                server.requests.append((self.command, path))
                api = f"/api/models/{REPO}/"
                if path.startswith(api + "revision/"):
                    body = json.dumps({"id": REPO, "modelId": REPO, "sha": COMMIT, "private": False,
                                       "siblings": [{"rfilename": name} for name in server.files]}).encode()
                    return self.send(200, body, {"Content-Type": "application/json"}, head)
                if path.startswith(api + "tree/"):
                    body = json.dumps([{"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
                                       for name, data in server.files.items()]).encode()
                    return self.send(200, body, {"Content-Type": "application/json"}, head)
                prefix = f"/{REPO}/resolve/"
                if path.startswith(prefix):
                    revision, _, name = path[len(prefix):].partition("/")
                    if revision in (COMMIT, "main") and name in server.files:
                        data = server.files[name]
                        return self.send(200, data, {"ETag": f'"{git_blob_id(data)}"', "X-Repo-Commit": COMMIT,
                                                     "Content-Type": "application/octet-stream"}, head)
                    return self.send(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT}, head)
                return self.send(404, b"", {"X-Error-Code": "RepoNotFound"}, head)

            def send(self, status: int, body: bytes, headers: dict, head: bool):
                self.send_response(status)
                for key, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(key, value)
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "HubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


LINES = "the movie was [MASK] .\ncafé [MASK] 日本語\n"


def fill(ckpt: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """``transformer-fill`` in a process of its own: ``huggingface_hub`` reads the environment once."""
    return subprocess.run([sys.executable, "-m", "transformer.cli.fill", f"ckpt_path={ckpt}", "format=json",
                           "top_k=5"], input=LINES, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def fill_here(folder: Path, tmp_path: Path) -> list:
    """What ``transformer-fill ckpt_path=hf:<folder>`` answers, read in this process."""
    from omegaconf import OmegaConf

    from transformer.cli.fill import run

    masked = tmp_path / "masked.txt"
    masked.write_text(LINES, encoding="utf-8")
    cfg = OmegaConf.create({"ckpt_path": f"hf:{folder}", "input": str(masked), "output": "-", "format": "json",
                            "top_k": 5, "max_tokens": 4096, "device": "cpu", "accel": "none"})
    return [json.loads(line) for line in run(cfg)]


def answers(proc: subprocess.CompletedProcess) -> list:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def one_error(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    return lines[0]


def test_a_hub_id_downloads_from_the_endpoint_then_serves_from_the_cache_offline(tmp_path):
    folder = write_folder("bert", tmp_path / "tiny-bert")
    (folder / "README.md").write_text("a model card, not fetched\n", encoding="utf-8")
    expected = fill_here(folder, tmp_path)
    assert len(expected) == 2 and all(len(mask) == 5 for line in expected for mask in line)
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}  # HF_HUB_OFFLINE unset
    base.update(HF_HOME=str(tmp_path / "hf-home"), PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
    with HubServer(folder) as hub:
        env = {**base, "HF_ENDPOINT": hub.url}
        assert answers(fill(f"hf:{REPO}", env, tmp_path)) == expected
        fetched = {path.rsplit("/", 1)[-1] for method, path in hub.requests if method == "GET" and "/resolve/" in path}
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= fetched and "README.md" not in fetched
        assert ("GET", f"/api/models/{REPO}/revision/main") in hub.requests
        snapshot = tmp_path / "hf-home" / "hub" / "models--tiny-org--tiny-bert" / "snapshots" / COMMIT
        assert (snapshot / "model.safetensors").is_file()
        # Offline with the same cache: the snapshot answers, and the server is not asked.
        asked = len(hub.requests)
        assert answers(fill(f"hf:{REPO}", {**env, "HF_HUB_OFFLINE": "1"}, tmp_path)) == expected
        assert len(hub.requests) == asked


def test_an_id_the_endpoint_does_not_know_is_one_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    from transformer.hub import HubError, mlm_checkpoint

    folder = write_folder("bert", tmp_path / "tiny-bert")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with HubServer(folder) as hub:
        # What HF_ENDPOINT, HF_HOME and an unset HF_HUB_OFFLINE give when huggingface_hub is imported.
        monkeypatch.setattr(hub_constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
        with pytest.raises(HubError) as err:
            mlm_checkpoint("hf:tiny-org/unknown")
        assert ("GET", "/api/models/tiny-org/unknown/revision/main") in hub.requests
    message = str(err.value)
    assert "\n" not in message and message.startswith("hf:tiny-org/unknown: not a folder, and the download failed")


def test_an_id_not_in_the_cache_offline_is_the_offline_error(tmp_path, monkeypatch):
    from transformer.hub import HubError, mlm_checkpoint

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(HubError, match=r"^hf:tiny-org/not-cached: not a folder nor in the hub cache, and the hub "
                                       r"is offline \(HF_HUB_OFFLINE=1\)"):
        mlm_checkpoint("hf:tiny-org/not-cached")
