"""`transformer-serve` started as a user starts it (a subprocess): an address it cannot listen
on, a port in use, an unset API key variable or an export folder missing a file is one
``error:`` line and exit status 2, found before any model loads (no model's start-up line is
written); a good start logs one line per model and the URL, answers probes, and writes one
access line per request (uvicorn's own is off)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from serve_models import serve_cfg  # noqa: E402

from transformer.cli import serve as serve_cli  # noqa: E402
from transformer.cli.serve import EXPORT_FILES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def serve_command(*args: str) -> list[str]:
    # the console script's main(), with this checkout's package first on the path
    return [sys.executable, "-m", "transformer.cli.serve", "device=cpu", "threads=1", *args]


def environment(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SERVE_TEST_KEY"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def refused(*args: str, cwd: Path, **env: str) -> str:
    """The stderr of a start that must fail: exit status 2, one ``error:`` line and nothing else
    (in particular no model's start-up line: nothing was loaded)."""
    done = subprocess.run(serve_command(*args), capture_output=True, text=True, cwd=cwd, env=environment(**env),
                          timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "model " not in done.stderr and done.stdout == ""
    return lines[0]


@pytest.fixture(scope="module")
def entry(checkpoints) -> str:
    return f"models=[{{id:at,ckpt_path:{checkpoints['translation']}}}]"


def test_a_host_that_does_not_resolve_is_one_error_line(entry, tmp_path):
    assert "host=no-such-host.invalid" in refused(entry, "host=no-such-host.invalid", cwd=tmp_path)


def test_a_port_in_use_is_one_error_line(entry, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert f"port={port}: in use" in refused(entry, f"port={port}", cwd=tmp_path)


def test_an_unset_api_key_variable_is_one_error_line(entry, tmp_path):
    line = refused(entry, "api_key_env=SERVE_TEST_KEY", cwd=tmp_path)
    assert "api_key_env=SERVE_TEST_KEY" in line and "unset or empty" in line


def export_folder(tmp_path: Path, missing: str) -> Path:
    folder = tmp_path / f"export-{missing}"
    folder.mkdir()
    for name in EXPORT_FILES:
        if name != missing:
            (folder / name).write_text("{}")
    return folder


def test_an_export_folder_missing_its_config_names_it(tmp_path):
    folder = export_folder(tmp_path, "config.json")
    line = refused(f"models=[{{id:ct2,ckpt_path:{folder}}}]", cwd=tmp_path)
    assert f"models[0].ckpt_path={folder}: a folder without config.json" in line


# The same checks in-process (each subprocess above pays for importing torch).
@pytest.mark.parametrize("missing", ["model.bin", "source_tokenizer.json", "target_tokenizer.json"])
def test_an_export_folder_missing_any_file_names_it(tmp_path, missing):
    folder = export_folder(tmp_path, missing)
    cfg = serve_cfg(f"models=[{{id:ct2,ckpt_path:{folder}}}]")
    with pytest.raises(FileNotFoundError, match=f"models\\[0\\].ckpt_path=.*a folder without {missing}"):
        serve_cli.check_entries(cfg)


def test_an_address_not_of_this_machine_is_refused():
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): never a local address
    with pytest.raises(ValueError, match="host=192.0.2.1: cannot listen"):
        serve_cli.check_address("192.0.2.1", 0)
    serve_cli.check_address("127.0.0.1", 0)  # any free port: fine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port: int, method: str, path: str, body: dict | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=payload, headers={**({"content-type": "application/json"} if body else {}),
                                                          **(headers or {})})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_a_good_start_logs_its_models_and_url_and_one_json_access_line_per_request(checkpoints, tmp_path):
    port, log = free_port(), tmp_path / "serve.log"
    args = [f"models=[{{id:at,ckpt_path:{checkpoints['translation']},decode:beam,beam_size:3}},"
            f"{{id:pos,ckpt_path:{checkpoints['tagger']}}}]", f"port={port}", "log_format=json",
            "api_key_env=SERVE_TEST_KEY"]
    with open(log, "w") as out:
        proc = subprocess.Popen(serve_command(*args), stdout=out, stderr=out, cwd=tmp_path,
                                env=environment(SERVE_TEST_KEY="k3y"))
    probes = 0
    try:
        end = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < end, log.read_text()
            try:
                status = call(port, "GET", "/ready")[0]
                probes += 1
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        head = call(port, "HEAD", "/")
        health = call(port, "HEAD", "/health")
        answer = call(port, "POST", "/v1/translate", {"model": "at", "inputs": ["ein hund"]},
                      {"Authorization": "Bearer k3y", "X-Request-ID": "start-1"})
        denied = call(port, "POST", "/v1/translate", {"model": "at", "inputs": ["ein hund"]})
    finally:
        proc.terminate()
        proc.wait(60)
    assert head[0] == health[0] == 200 and head[2] == health[2] == b""
    assert answer[0] == 200 and answer[1]["x-request-id"] == "start-1"
    assert denied[0] == 401 and denied[1]["www-authenticate"].startswith("Bearer")
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    messages = [line["message"] for line in lines]
    assert any(m.startswith("model at: ") and "decode=beam" in m and "beam_size=3" in m and "threads=1" in m
               for m in messages), messages
    assert any(m.startswith("model pos: ") for m in messages)
    assert any(f"http://127.0.0.1:{port}/" in m for m in messages)
    access = [line for line in lines if line["logger"] == "transformer.serve.access"]
    posts = [line for line in access if line["method"] == "POST"]
    assert [(p["id"], p["status"], p["model"], p["inputs"]) for p in posts] == [("start-1", 200, "at", 1),
                                                                                (denied[1]["x-request-id"], 401,
                                                                                 "-", 0)]
    assert len(access) == probes + 4  # one line per request, no more
    assert sum(line["path"] == "/ready" for line in access) == probes
    assert not [m for m in messages if "HTTP/1.1" in m]  # uvicorn's access line is off
    assert "k3y" not in log.read_text() and "ein hund" not in log.read_text()
