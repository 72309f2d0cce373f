"""A multilingual checkpoint served: each request's ``tgt_lang`` translates as our own search
does on the source tagged ``<2xx>``; requests into different languages share one model call;
a language or direction the model lacks is one 4xx sentence naming the model's; ``/v1/models``
lists each model's directions (a bilingual model's one pair, which it still takes by name)."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_models import serve_cfg  # noqa: E402
from tiny_multilingual import multilingual_task, save_checkpoint  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from transformer.cli import serve as serve_cli  # noqa: E402
from transformer.data.core.batching import TranslationCollator  # noqa: E402
from transformer.data.parallel.languages import tagged_source_ids  # noqa: E402
from transformer.serve.app import ServeConfig, create_app  # noqa: E402
from transformer.tasks.checkpoint import load_task  # noqa: E402

SOURCES = ["ein hund läuft über die wiese .", "", "a dog runs across the meadow .", "zwei männer"]
TARGETS = ["en", "de", "fr"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> str:
    return save_checkpoint(multilingual_task(), tmp_path_factory.mktemp("mul") / "mul.ckpt")


@pytest.fixture(scope="module")
def decoder_ckpt(tmp_path_factory) -> str:
    """A model reading its target tag as the decoder's first token (``data.tag_side=decoder``)."""
    return save_checkpoint(multilingual_task(tag_side="decoder"), tmp_path_factory.mktemp("dec") / "dec.ckpt")


@pytest.fixture(scope="module")
def served_models(ckpt, decoder_ckpt, checkpoints):
    models = (f"models=[{{id:mul,ckpt_path:{ckpt}}},{{id:mulbeam,ckpt_path:{ckpt},decode:beam,beam_size:3}},"
              f"{{id:dec,ckpt_path:{decoder_ckpt}}},{{id:at,ckpt_path:{checkpoints['translation']}}}]")
    return serve_cli.check(serve_cfg(models))


@pytest.fixture(scope="module")
def client(served_models):
    with TestClient(create_app(served_models, ServeConfig(batch_wait_ms=20))) as c:
        yield c


def reference(ckpt: str, sentences: list[str], tgt_lang: str, **decode) -> list[list[tuple[str, float]]]:
    """Our own search on each sentence tagged for ``tgt_lang``, one sentence at a time."""
    task = load_task(ckpt)
    tok = task.src_tokenizer
    search = task.search_fn({"strategy": "greedy", **decode})
    decoder = task.hparams["data"].get("tag_side") == "decoder"  # the tag starts the target instead
    collate = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id, tag_to_decoder=decoder)
    out = []
    for text in sentences:
        if not text.strip():
            out.append([("", 0.0)])
            continue
        batch = collate([{"src": tagged_source_ids(tok, text, tgt_lang), "index": 0}])  # src (1, S)
        start = {"start": batch["start"]} if decoder else {}
        out.append([(task.tgt_tokenizer.decode(ids), score) for ids, score in search(batch["src"], **start)[0]])
    return out


def translate(client, **body):
    r = client.post("/v1/translate", json=body)
    assert r.status_code == 200, r.text
    return r.json()["outputs"]


@pytest.mark.parametrize("tgt", TARGETS)
def test_each_target_language_translates_as_our_search_on_the_tagged_source(client, ckpt, tgt):
    outputs = translate(client, model="mul", inputs=SOURCES, tgt_lang=tgt)
    assert [o["translation"] for o in outputs] == [n[0][0] for n in reference(ckpt, SOURCES, tgt)]
    beam = translate(client, model="mulbeam", inputs=SOURCES, tgt_lang=tgt, n_best=2)
    expected = reference(ckpt, SOURCES, tgt, strategy="beam", beam_size=3, n_best=2)
    assert [[h["text"] for h in o["hypotheses"]] for o in beam] == [[t for t, _ in n] for n in expected]
    for o, n in zip(beam, expected):
        assert [h["score"] for h in o["hypotheses"]] == pytest.approx([s for _, s in n], abs=1e-4)


def test_the_tag_changes_the_translation(client):
    by_lang = {t: [o["translation"] for o in translate(client, model="mul", inputs=SOURCES, tgt_lang=t)]
               for t in TARGETS}
    assert len({tuple(v) for v in by_lang.values()}) > 1  # without the tag, every language would read alike


def test_src_lang_with_tgt_lang_names_a_direction(client, ckpt):
    outputs = translate(client, model="mul", inputs=SOURCES, src_lang="de", tgt_lang="en")
    assert [o["translation"] for o in outputs] == [n[0][0] for n in reference(ckpt, SOURCES, "en")]


def test_attention_of_a_multilingual_model_shows_the_tag(client):
    out = translate(client, model="mul", inputs=["a dog runs"], tgt_lang="fr", attention=True)[0]
    assert out["attention"]["source"][0] == "<2fr>"
    assert out["attention"]["source_words"][0] == "<2fr>"


def test_attention_of_a_decoder_tagged_model_leaves_the_tag_out_of_the_source(client, decoder_ckpt):
    out = translate(client, model="dec", inputs=SOURCES, tgt_lang="fr", attention=True)
    assert [o["translation"] for o in out] == [n[0][0] for n in reference(decoder_ckpt, SOURCES, "fr")]
    view = out[0]["attention"]
    assert "<2fr>" not in view["source"] and view["source"][-1] == "</s>"
    assert len(view["cross"][0][0]) == len(view["target"])  # a row per predicted token, the tag not among them


@pytest.mark.parametrize("body,status,words", [
    ({"tgt_lang": "es"}, 422, ["tgt_lang=es", "en, de, fr", "de-en"]),
    ({}, 422, ["tgt_lang", "required", "en, de, fr"]),
    ({"src_lang": "de", "tgt_lang": "fr"}, 422, ["de-fr", "not trained", "en-fr"]),
    ({"src_lang": "es", "tgt_lang": "en"}, 422, ["src_lang=es", "de, en, fr"]),
    ({"tgt_lang": 3}, 422, ["tgt_lang"]),
])
def test_a_language_the_model_lacks_is_one_sentence_naming_its_languages(client, body, status, words):
    r = client.post("/v1/translate", json={"model": "mul", "inputs": ["a dog"], **body})
    assert r.status_code == status, r.text
    message = r.json()["error"]
    assert "\n" not in message and all(w in message for w in words), message


def test_a_bilingual_model_takes_its_own_pair_and_refuses_another(client, served_models):
    plain = translate(client, model="at", inputs=SOURCES)
    assert translate(client, model="at", inputs=SOURCES, src_lang="de", tgt_lang="en") == plain
    r = client.post("/v1/translate", json={"model": "at", "inputs": ["a dog"], "tgt_lang": "fr"})
    assert r.status_code == 422 and "translates into en" in r.json()["error"] and "de-en" in r.json()["error"]


def test_models_lists_directions(client):
    listed = {m["id"]: m for m in client.get("/v1/models").json()["models"]}
    assert listed["mul"]["directions"] == ["de-en", "en-de", "en-fr", "fr-en"]
    assert listed["mul"]["target_languages"] == ["en", "de", "fr"] and listed["mul"]["multilingual"] is True
    assert {"tgt_lang", "src_lang"} <= set(listed["mul"]["options"])
    assert listed["at"]["directions"] == ["de-en"] and listed["at"]["multilingual"] is False
    assert "tgt_lang" not in listed["at"]["options"]


@pytest.mark.parametrize("model_id", ["mul", "dec"])
def test_requests_into_different_languages_share_one_model_call(served_models, ckpt, decoder_ckpt, model_id):
    """One batch holds sentences into three languages: tagged sources, or (``dec``) one start
    token per row."""
    model = next(m for m in served_models if m.id == model_id)
    ckpt = decoder_ckpt if model_id == "dec" else ckpt
    calls, gate = [], threading.Event()
    predict = model.predict

    def recording(texts, settings):
        calls.append([(str(t), getattr(t, "tgt_lang", None)) for t in texts])
        assert gate.wait(10)
        return predict(texts, settings)

    model.predict = recording
    try:
        with TestClient(create_app([model], ServeConfig(batch_wait_ms=20))) as c, ThreadPoolExecutor(4) as pool:
            first = pool.submit(c.post, "/v1/translate", json={"model": model_id, "inputs": ["zwei"], "tgt_lang": "en"})
            while not calls:
                time.sleep(0.005)
            rest = {t: pool.submit(c.post, "/v1/translate", json={"model": model_id, "inputs": SOURCES, "tgt_lang": t})
                    for t in TARGETS}
            while c.get("/health").json()["queued"][model_id] < len(TARGETS):
                time.sleep(0.005)
            gate.set()
            first.result()
            answers = {t: f.result().json()["outputs"] for t, f in rest.items()}
    finally:
        model.predict = predict
        gate.set()
    assert len(calls) == 2 and {lang for _, lang in calls[1]} == set(TARGETS)  # one call, three languages
    for t in TARGETS:
        assert [o["translation"] for o in answers[t]] == [n[0][0] for n in reference(ckpt, SOURCES, t)]


@pytest.mark.parametrize("src,tgt", [("de", "en"), ("en", "fr")])
def test_the_server_answers_as_transformer_decode_with_tgt_lang(client, ckpt, tmp_path, src, tgt):
    from serve_models import cli_cfg

    from transformer.cli import decode as decode_cli

    path = tmp_path / "in.txt"
    path.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    lines = decode_cli.run(cli_cfg("decode", f"ckpt_path={ckpt}", f"input={path}", f"output={tmp_path / 'out'}",
                                   f"src_lang={src}", f"tgt_lang={tgt}"))
    assert [o["translation"] for o in translate(client, model="mul", inputs=SOURCES, tgt_lang=tgt)] == lines


# ----------------------------------------------------------------------------- the page (headless Chromium)
@pytest.fixture(scope="module")
def page_server(ckpt, tmp_path_factory):
    """``transformer-serve`` serving the multilingual checkpoint on a free loopback port."""
    import os
    import subprocess
    import urllib.request

    from test_page_browser import REPO, browser, free_port

    browser()
    port, log = free_port(), tmp_path_factory.mktemp("mulserve") / "server.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "transformer.cli.serve", f"models=[{{id:mul,ckpt_path:{ckpt}}}]",
                                 f"port={port}", "device=cpu", "access_log=false"], stdout=out, stderr=out, env=env,
                                cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < end, log.read_text()[-2000:]
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def page_outputs(dom: str) -> dict[str, str]:
    """Each language's output in an "All languages" card, as the page drew it."""
    import re
    from html import unescape

    return {lang: unescape(text) for lang, text in re.findall(
        r'<div class="in-language" data-lang="(\w+)">.*?<div class="output">(.*?)</div>', dom, re.S)}


@pytest.mark.browser
def test_the_page_translates_into_the_chosen_language(page_server, ckpt):
    import urllib.parse

    from test_page_browser import chromium

    text = "a dog runs across the meadow ."
    dom = chromium(f"{page_server}/?{urllib.parse.urlencode({'model': 'mul', 'text': text, 'tgt_lang': 'fr'})}",
                   "--dump-dom")
    assert 'id="langs-row"' in dom and 'id="langs-row" hidden' not in dom
    expected = reference(ckpt, [text], "fr")[0][0][0]
    from html import unescape
    import re

    assert unescape(re.search(r'<div class="output">(.*?)</div>', dom, re.S).group(1)) == expected


@pytest.mark.browser
def test_all_languages_shows_each_translation_side_by_side(page_server, ckpt):
    import urllib.parse

    from test_page_browser import chromium

    text = "a dog runs across the meadow ."
    query = {"model": "mul", "text": text, "all": "1"}
    shown = page_outputs(chromium(f"{page_server}/?{urllib.parse.urlencode(query)}", "--dump-dom"))
    assert shown == {t: reference(ckpt, [text], t)[0][0][0] for t in TARGETS}
    # from en: the model's en-de and en-fr only
    shown = page_outputs(chromium(f"{page_server}/?{urllib.parse.urlencode({**query, 'src_lang': 'en'})}",
                                  "--dump-dom"))
    assert list(shown) == ["de", "fr"]


def test_a_source_cut_to_the_model_length_keeps_its_tag(client, ckpt):
    long = " ".join(["ein hund läuft über die wiese ."] * 12)
    task = load_task(ckpt)
    tok, limit = task.src_tokenizer, task.max_len
    ids = tagged_source_ids(tok, long, "fr")
    assert len(ids) + 1 > limit  # the test means something only if the source is cut
    src = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id)([{"src": ids[: limit - 1], "index": 0}])["src"]
    expected = task.tgt_tokenizer.decode(task.search_fn({"strategy": "greedy"})(src)[0][0][0])
    assert translate(client, model="mul", inputs=[long], tgt_lang="fr")[0]["translation"] == expected


def test_a_pivot_request_answers_as_transformer_decode_with_a_pivot(client, ckpt, tmp_path):
    """de→fr, a direction the model was not trained on, through en: the server's two legs give
    the command line's ``decode.pivot=en`` output (lengths capped, so no leg cuts a source)."""
    from serve_models import cli_cfg

    from transformer.cli import decode as decode_cli

    path = tmp_path / "in.txt"
    path.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    lines = decode_cli.run(cli_cfg("decode", f"ckpt_path={ckpt}", f"input={path}", f"output={tmp_path / 'out'}",
                                   "src_lang=de", "tgt_lang=fr", "decode.pivot=en", "decode.max_len_a=0",
                                   "decode.max_len_b=8"))
    outputs = translate(client, model="mul", inputs=SOURCES, src_lang="de", tgt_lang="fr", pivot="en", max_len=8)
    assert [o["translation"] for o in outputs] == lines
    # and it is the second leg on the first's best outputs
    first = translate(client, model="mul", inputs=SOURCES, src_lang="de", tgt_lang="en", max_len=8)
    second = translate(client, model="mul", inputs=[o["translation"] for o in first], tgt_lang="fr", max_len=8)
    assert outputs == second
    assert outputs != translate(client, model="mul", inputs=SOURCES, tgt_lang="fr", max_len=8)


@pytest.mark.parametrize("model,body,words", [
    ("mul", {"src_lang": "de", "tgt_lang": "fr", "pivot": "es"}, ["pivot=es", "first leg", "de-en, en-de"]),
    ("mul", {"src_lang": "de", "pivot": "en"}, ["pivot=en", "give tgt_lang"]),
    ("mul", {"src_lang": "de", "tgt_lang": "fr", "pivot": "en", "attention": True}, ["attention", "pivot"]),
    ("at", {"tgt_lang": "en", "pivot": "fr"}, ["pivot=fr", "a pivot needs a multilingual model"]),
])
def test_a_pivot_the_model_cannot_take_is_one_sentence(client, model, body, words):
    r = client.post("/v1/translate", json={"model": model, "inputs": ["ein hund"], **body})
    assert r.status_code == 422, r.text
    message = r.json()["error"]
    assert "\n" not in message and all(w in message for w in words), message


def test_zero_shot_is_a_direction_asked_for_by_name(client, ckpt):
    """de→fr, which the model never saw: refused unless the request sets ``zero_shot``, and then
    the de source tagged for French, as ``transformer-decode decode.zero_shot=true`` reads it."""
    r = client.post("/v1/translate", json={"model": "mul", "inputs": SOURCES, "src_lang": "de", "tgt_lang": "fr"})
    assert r.status_code == 422 and "zero_shot=true" in r.json()["error"] and "de-fr" in r.json()["error"], r.text
    outputs = translate(client, model="mul", inputs=SOURCES, src_lang="de", tgt_lang="fr", zero_shot=True, max_len=8)
    expected = reference(ckpt, SOURCES, "fr", max_len_a=0, max_len_b=8)
    assert [o["translation"] for o in outputs] == [n[0][0] for n in expected]
    # the languages it was trained on stay the only ones it takes
    r = client.post("/v1/translate", json={"model": "mul", "inputs": SOURCES, "src_lang": "de", "tgt_lang": "de",
                                           "zero_shot": True})
    assert r.status_code == 422 and "same language" in r.json()["error"], r.text
