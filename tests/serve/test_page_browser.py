"""The page in a real browser: ``transformer-serve`` started as a user starts it, Debian's
headless Chromium loads ``/?model=<id>&text=<sentence>`` (the page submits the sentence itself),
and the DOM it leaves holds the output (for translation, a cross-attention heatmap with its
alignment); a screenshot is saved too. Needs a ``chromium`` binary (apt-get install chromium);
run with ``-m browser``. ``SERVE_PAGE_SCREENSHOT=<png>`` keeps a copy of the screenshot."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_models import models_override  # noqa: E402

pytestmark = pytest.mark.browser
REPO = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str:
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        pytest.skip(f"no headless browser: none of {', '.join(BROWSERS)} is on PATH (apt-get install chromium)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def found_browser() -> str:
    return browser()


@pytest.fixture(scope="module")
def server(found_browser, checkpoints, tmp_path_factory):
    """``transformer-serve`` on a free loopback port, serving every tiny checkpoint (after the
    browser is found: without one the tests skip before anything is built)."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "transformer.cli.serve", models_override(checkpoints),
                                 f"port={port}", "device=cpu", "access_log=false"], stdout=out, stderr=out, env=env,
                                cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"the server ended: {log.read_text()[-2000:]}"
            assert time.monotonic() < end, f"the server did not answer: {log.read_text()[-2000:]}"
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def chromium(url: str, *flags: str) -> str:
    run = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          "--window-size=1000,760", "--virtual-time-budget=20000", *flags, url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def page(server: str, model: str, text: str) -> str:
    return f"{server}/?{urllib.parse.urlencode({'model': model, 'text': text})}"


def test_the_page_translates_and_draws_the_heatmap_and_alignment(server, tmp_path):
    url = page(server, "at", "ein hund läuft über die wiese .")
    dom = chromium(url, "--dump-dom")
    assert 'data-state="done"' in dom, dom[-3000:]
    assert re.search(r'class="output">[^<]+<', dom)
    heatmap = re.search(r'<table class="heatmap" data-layer="1" data-head="mean">(.*?)</table>', dom, re.S)
    assert heatmap and heatmap.group(1).count("<td") >= 8  # target rows x source columns
    assert "alignment (layer 1)" in dom and 'class="aligned"' in heatmap.group(1)
    shot = tmp_path / "serve_page.png"
    chromium(url, f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5000
    if os.environ.get("SERVE_PAGE_SCREENSHOT"):
        shutil.copy(shot, os.environ["SERVE_PAGE_SCREENSHOT"])


def test_the_page_shows_tags_under_words_and_a_label_with_its_pooling(server):
    dom = chromium(page(server, "pos", "a dog runs"), "--dump-dom")
    words = re.findall(r'<span class="word">([^<]*)</span><span class="tag">([^<]*)</span>', dom)
    assert [w for w, _ in words] == ["a", "dog", "runs"] and all(t in ("DET", "NOUN", "VERB") for _, t in words)
    dom = chromium(page(server, "sent", "a dog runs"), "--dump-dom")
    assert 'data-state="done"' in dom and re.search(r'class="output">(neg|neu|pos) \(0\.\d{3}\)<', dom)
    assert 'class="pooled"' in dom and dom.count('class="bar"') == 3
