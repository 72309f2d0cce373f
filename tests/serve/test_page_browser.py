"""The page in a real browser: ``transformer-serve`` started as a user starts it, Debian's
headless Chromium loads ``/?model=<id>&text=<sentence>`` (the page submits the sentence itself),
and the DOM it leaves holds the output (for translation, a cross-attention grid between words
with its colour scale and the alignment table; a beam's n-best with scores; the classifier's
pooling against an even share), with nothing in the page's console; screenshots are saved too.
Needs a ``chromium`` binary (apt-get install chromium); run with ``-m browser``.
``SERVE_PAGE_SCREENSHOT=<png>`` keeps a copy of the translation screenshot and
``SERVE_PAGE_SCREENSHOTS=<folder>`` one of every screenshot (before and after a request)."""

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
from html import unescape
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
    """The browser's stdout (``--dump-dom``: the page's DOM) after the page settled; whatever
    the page wrote to its console fails the test (the page itself logs nothing), as does an
    error it recorded (a script error, a rejected promise, a resource that failed to load)."""
    run = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          "--window-size=1100,1000", "--virtual-time-budget=20000", "--enable-logging=stderr",
                          "--v=0", *flags, url], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, "\n".join(console)
    assert "data-js-errors" not in run.stdout, re.search(r'data-js-errors="([^"]*)"', run.stdout).group(1)
    return run.stdout


def page(server: str, model: str, text: str, **extra: str) -> str:
    return f"{server}/?{urllib.parse.urlencode({'model': model, 'text': text, **extra})}"


def screenshot(url: str, name: str, folder: Path) -> Path:
    shot = folder / name
    chromium(url, f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5000
    if os.environ.get("SERVE_PAGE_SCREENSHOTS"):
        Path(os.environ["SERVE_PAGE_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["SERVE_PAGE_SCREENSHOTS"]) / name)
    return shot


def cells(table: str) -> list[list[float]]:
    """The grid's values, row by row, as the page drew them (``data-value`` of each cell)."""
    return [[float(v) for v in re.findall(r'<td[^>]*data-value="([\d.]+)"', row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1], re.S)]


def heads(table: str, kind: str) -> list[str]:
    """Column heads (``col``) or row heads (``row``) of a grid."""
    return [unescape(t) for t in re.findall(rf'<th class="{kind}" title="([^"]*)"', table)]


def test_the_page_translates_and_draws_the_word_grid_and_alignment(server, tmp_path):
    url = page(server, "at", "ein hund läuft über die wiese .")
    dom = chromium(url, "--dump-dom")
    assert 'data-state="done"' in dom, dom[-3000:]
    assert re.search(r'class="output">[^<]+<', dom) and 'class="copy"' in dom
    grid = re.search(r'<table class="heatmap" data-layer="1" data-head="mean" data-unit="word">(.*?)</table>', dom, re.S)
    assert grid, dom[-3000:]
    assert heads(grid.group(1), "col") == "ein hund läuft über die wiese .".split() + ["</s>"]
    rows = cells(grid.group(1))
    assert len(rows) == len(heads(grid.group(1), "row")) >= 2
    assert all(len(r) == 8 and abs(sum(r) - 1) < 0.01 for r in rows)  # a source word sums its pieces: rows stay 1
    assert "alignment (layer 1), by word:" in dom and 'class="aligned"' in grid.group(1)
    assert re.search(r'<table class="alignment-table">.*<td>[^<]+</td><td class="arrow">', dom, re.S)
    assert re.search(r'class="about-grid">Rows: the output\'s words', dom)
    legend = re.search(r'<div class="legend".*?</div></div></div>', dom, re.S).group(0)
    assert re.findall(r"<span>(\d\.\d\d)</span>", legend)[0] == "0.00"
    shot = screenshot(url, "translate-after.png", tmp_path)
    screenshot(f"{server}/?model=at", "translate-before.png", tmp_path)
    if os.environ.get("SERVE_PAGE_SCREENSHOT"):
        shutil.copy(shot, os.environ["SERVE_PAGE_SCREENSHOT"])


def test_pieces_on_the_switch_are_the_model_pieces(server):
    dom = chromium(page(server, "at", "ein hund läuft über die wiese .", pieces="1"), "--dump-dom")
    grid = re.search(r'<table class="heatmap" data-layer="1" data-head="mean" data-unit="piece">(.*?)</table>', dom, re.S)
    assert grid, dom[-3000:]
    words = re.search(r'data-unit="word"', dom)
    assert words is None and len(heads(grid.group(1), "col")) > 8 and "·" not in heads(grid.group(1), "col")
    assert all(abs(sum(r) - 1) < 0.01 for r in cells(grid.group(1)))


def test_a_beam_model_lists_its_n_best_with_scores(server, tmp_path):
    url = page(server, "beam", "zwei männer spielen fußball .")
    dom = chromium(url, "--dump-dom")
    assert 'data-state="done"' in dom, dom[-3000:]
    nbest = re.search(r'<table class="nbest">(.*?)</table>', dom, re.S)
    assert nbest and "the beam's 3 best" in dom
    scores = [float(x) for x in re.findall(r'<td class="score">(-?\d+\.\d{3})</td>', nbest.group(1))]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    screenshot(url, "translate-beam-after.png", tmp_path)


def test_the_page_shows_tags_under_words_and_a_label_with_its_pooling(server, tmp_path):
    url = page(server, "pos", "a dog runs")
    dom = chromium(url, "--dump-dom")
    words = re.findall(r'<span class="word">([^<]*)</span><span class="tag">([^<]*)</span>', dom)
    assert [w for w, _ in words] == ["a", "dog", "runs"] and all(t in ("DET", "NOUN", "VERB") for _, t in words)
    screenshot(url, "tag-after.png", tmp_path)
    screenshot(f"{server}/?model=pos", "tag-before.png", tmp_path)
    url = page(server, "sent", "a dog runs across the meadow")
    dom = chromium(url, "--dump-dom")
    assert 'data-state="done"' in dom and re.search(r'class="output">(neg|neu|pos) \(0\.\d{3}\)<', dom)
    assert 'class="pooled"' in dom and dom.count('class="bar"') == 3
    units = re.findall(r'<span class="unit" data-weight="([\d.]+)"[^>]*><span class="unit-text">([^<]*)<', dom)
    assert [w for _, w in units] == "a dog runs across the meadow".split()  # words, no lone "·" piece
    assert abs(sum(float(x) for x, _ in units) - 1) < 0.01
    assert "1× (1/" in dom and "¼×" in dom and "4×" in dom  # the scale is centred on the even share
    screenshot(url, "classify-after.png", tmp_path)
    screenshot(f"{server}/?model=sent", "classify-before.png", tmp_path)


def test_the_page_has_its_icon(server):
    with urllib.request.urlopen(server + "/static/favicon.svg", timeout=10) as answer:
        assert answer.status == 200 and answer.read().startswith(b"<svg")
    with urllib.request.urlopen(server + "/", timeout=10) as answer:
        assert b'rel="icon" href="/static/favicon.svg"' in answer.read()
