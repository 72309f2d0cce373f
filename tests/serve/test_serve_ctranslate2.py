"""A CTranslate2 export served beside its checkpoint: the same translations and scores
(float32), beam search as the exported translator gives it, what the model takes listed, and a
config it cannot serve refused in one sentence naming the key."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("ctranslate2")

from serve_models import serve_cfg  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from transformer.cli import serve as serve_cli  # noqa: E402
from transformer.export.ctranslate2 import CTranslate2Translator, export_ctranslate2  # noqa: E402
from transformer.inference.translator import one_line  # noqa: E402
from transformer.serve.app import ServeConfig, create_app  # noqa: E402
from transformer.tasks.checkpoint import load_task  # noqa: E402

SOURCES = ["ein hund läuft über die wiese .", "", "zwei männer spielen .", "a dog runs"]


@pytest.fixture(scope="module")
def export_dir(checkpoints, tmp_path_factory) -> str:
    return str(export_ctranslate2(load_task(checkpoints["translation"]), tmp_path_factory.mktemp("ct2") / "at"))


def models(checkpoints, export_dir: str, *extra: str) -> str:
    entries = [f"{{id:at,ckpt_path:{checkpoints['translation']}}}", f"{{id:ct2,ckpt_path:{export_dir}}}",
               f"{{id:ct2beam,ckpt_path:{export_dir},decode:beam,beam_size:3}}", *extra]
    return "models=[" + ",".join(entries) + "]"


@pytest.fixture(scope="module")
def client(checkpoints, export_dir):
    served = serve_cli.check(serve_cfg(models(checkpoints, export_dir)))
    with TestClient(create_app(served, ServeConfig())) as c:
        yield c


def outputs(client, **body) -> list[dict]:
    r = client.post("/v1/translate", json=body)
    assert r.status_code == 200, r.text
    return r.json()["outputs"]


def test_a_float32_export_translates_and_scores_as_its_checkpoint(client):
    ours, theirs = outputs(client, model="at", inputs=SOURCES), outputs(client, model="ct2", inputs=SOURCES)
    assert [o["translation"] for o in theirs] == [o["translation"] for o in ours]
    assert theirs[1] == ours[1] == {"translation": "", "hypotheses": [{"text": "", "score": 0.0}]}
    # greedy: the summed log-probability. CTranslate2 normalises each step over the tokens search
    # may choose (PAD and BOS suppressed before its softmax), ours over all: an untrained model
    # gives those two some probability, so the sums differ by a few thousandths a token.
    for a, b in zip(ours, theirs):
        assert b["hypotheses"][0]["score"] == pytest.approx(a["hypotheses"][0]["score"], rel=5e-3)


def test_beam_search_and_its_overrides_answer_as_the_exported_translator(client, export_dir):
    translator = CTranslate2Translator(export_dir)
    for beam in (3, 2):
        body = {"beam_size": beam} if beam != 3 else {}
        got = outputs(client, model="ct2beam", inputs=SOURCES, **body)
        assert [o["translation"] for o in got] == [one_line(t) for t in translator.translate(SOURCES, beam, 1.0)]
    nbest = outputs(client, model="ct2beam", inputs=SOURCES, n_best=2)
    want = translator.translate_nbest(SOURCES, 3, 1.0, 2)
    assert [[(h["text"], h["score"]) for h in o["hypotheses"]] for o in nbest] == [
        [(one_line(t), pytest.approx(v)) for t, v in hyps] for hyps in want]
    assert all(len(o["hypotheses"]) == 2 for i, o in enumerate(nbest) if SOURCES[i])
    assert all(o["translation"] == o["hypotheses"][0]["text"] for o in nbest)
    translator.max_len_a, translator.max_len_b = 0, 2
    capped = outputs(client, model="ct2beam", inputs=SOURCES, max_len=2)
    assert [o["translation"] for o in capped] == [one_line(t) for t in translator.translate(SOURCES, 3, 1.0)]


def test_the_export_is_listed_with_what_it_takes_and_refuses_the_rest(client):
    listed = {m["id"]: m for m in client.get("/v1/models").json()["models"]}
    assert listed["ct2beam"]["backend"] == "ctranslate2" and listed["ct2beam"]["attention"] is False
    assert listed["ct2beam"]["options"] == ["beam_size", "n_best", "max_len", "max_len_a", "max_len_b"]
    assert "beam_size" not in listed["ct2"]["options"]
    for model, extra in (("ct2beam", {"attention": True}), ("ct2", {"n_best": 2})):
        r = client.post("/v1/translate", json={"model": model, "inputs": ["ein hund"], **extra})
        assert r.status_code == 400 and "CTranslate2 export" in r.json()["error"], r.text
    r = client.post("/v1/translate", json={"model": "ct2beam", "inputs": ["ein hund"], "n_best": 4})
    assert r.status_code == 422 and "n_best=4: expected 1 to beam_size=3" in r.json()["error"], r.text


@pytest.mark.parametrize("entry,message", [
    ("{id:x,ckpt_path:EXPORT,decode:mask_predict}", "models[3].decode=mask_predict: a CTranslate2 export decodes"),
    ("{id:x,ckpt_path:EXPORT,compile:true}", "models[3].compile: not a key of a CTranslate2 export"),
    ("{id:x,ckpt_path:EXPORT,bogus:1}", "models[3].bogus: not a decoding key"),
])
def test_an_entry_an_export_cannot_serve_is_one_sentence_naming_its_key(checkpoints, export_dir, entry, message):
    with pytest.raises(ValueError) as exc:
        serve_cli.check(serve_cfg(models(checkpoints, export_dir, entry.replace("EXPORT", export_dir))))
    assert str(exc.value).startswith(message)


def test_without_ctranslate2_an_export_entry_says_how_to_install(checkpoints, export_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ValueError, match=r"^models\[1\]\.ckpt_path: CTranslate2 is not installed: pip install"):
        serve_cli.check(serve_cfg(models(checkpoints, export_dir)))
