"""The HTTP API on tiny checkpoints of every kind: each endpoint answers as its command does
(transformer-decode, -tag, -classify on the same checkpoint and settings), attention comes with
the shapes the page draws, and every bad request is one 4xx sentence that leaves the server up."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from serve_models import cli_cfg  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from transformer.cli import classify as classify_cli  # noqa: E402
from transformer.cli import decode as decode_cli  # noqa: E402
from transformer.cli import tag as tag_cli  # noqa: E402
from transformer.serve.app import ServeConfig, create_app  # noqa: E402

SOURCES = ["ein hund läuft über die wiese .", "", "zwei männer spielen .", "a dog runs"]
LIMITS = ServeConfig(max_inputs=8, max_request_tokens=300, max_body_bytes=20_000)


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served, LIMITS)) as c:
        yield c


def post(client, path: str, **body):
    return client.post(path, json=body)


def run_cli(module, name: str, tmp_path, lines: list[str], *overrides: str) -> list[str]:
    src = tmp_path / f"{name}.in"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return module.run(cli_cfg(name, f"input={src}", f"output={tmp_path / (name + '.out')}", *overrides))


# ----------------------------------------------------------------------------- the same answers
@pytest.mark.parametrize("model_id,ckpt,decode", [
    ("at", "translation", ["decode.strategy=greedy"]),
    ("nat", "nat", ["decode.strategy=mask_predict", "decode.iterations=3"]),
    ("ctc", "ctc", ["decode.strategy=ctc_one_pass", "decode.shortlist=null"]),
])
def test_translate_answers_as_transformer_decode(client, checkpoints, tmp_path, model_id, ckpt, decode):
    lines = run_cli(decode_cli, "decode", tmp_path, SOURCES, f"ckpt_path={checkpoints[ckpt]}", *decode)
    r = post(client, "/v1/translate", model=model_id, inputs=SOURCES)
    assert r.status_code == 200, r.text
    assert [o["translation"] for o in r.json()["outputs"]] == lines
    assert r.json()["outputs"][1]["translation"] == ""  # an empty line gives an empty line


def test_beam_n_best_and_alignments_answer_as_transformer_decode(client, checkpoints, tmp_path):
    ckpt = f"ckpt_path={checkpoints['translation']}"
    nbest = run_cli(decode_cli, "decode", tmp_path, SOURCES, ckpt, "decode.strategy=beam", "decode.beam_size=3",
                    "decode.n_best=2")
    r = post(client, "/v1/translate", model="beam", inputs=SOURCES, n_best=2)
    assert r.status_code == 200, r.text
    ours = [f"{i} ||| {h['text']} ||| {h['score']:.4f}" for i, o in enumerate(r.json()["outputs"])
            for h in o["hypotheses"]]
    assert ours == nbest
    aligned = run_cli(decode_cli, "decode", tmp_path, SOURCES, ckpt, "decode.print_alignment=true")
    r = post(client, "/v1/translate", model="at", inputs=SOURCES, attention=True)
    ours = [f"{o['translation']} ||| {o['hypotheses'][0]['alignment']}" for o in r.json()["outputs"]]
    assert ours == aligned


def test_tag_answers_as_transformer_tag(client, checkpoints, tmp_path):
    lines = ["a dog runs across the meadow .", "", "two\tmen  play"]
    expected = run_cli(tag_cli, "tag", tmp_path, lines, f"ckpt_path={checkpoints['tagger']}", "format=word_tag")
    r = post(client, "/v1/tag", model="pos", inputs=lines)
    assert r.status_code == 200, r.text
    outputs = r.json()["outputs"]
    assert [" ".join(f"{w}_{t}" for w, t in zip(o["words"], o["tags"])) for o in outputs] == expected
    assert outputs[2]["words"] == ["two", "men", "play"] and outputs[0]["fields"]["upos"] == outputs[0]["tags"]


def test_classify_answers_as_transformer_classify(client, checkpoints, tmp_path):
    expected = run_cli(classify_cli, "classify", tmp_path, SOURCES, f"ckpt_path={checkpoints['classifier']}",
                       "top_k=2")
    r = post(client, "/v1/classify", model="sent", inputs=SOURCES)  # the model's top_k: 2
    assert r.status_code == 200, r.text
    outputs = r.json()["outputs"]
    assert ["\t".join(f"{p['label']}\t{p['probability']:.4f}" for p in o["top"]) for o in outputs] == expected
    assert all(abs(sum(o["probabilities"].values()) - 1) < 1e-5 for o in outputs)
    one = post(client, "/v1/classify", model="sent", inputs=SOURCES[:1], top_k=1).json()["outputs"][0]
    assert len(one["top"]) == 1 and one["label"] == outputs[0]["label"]


# ----------------------------------------------------------------------------- attention
def test_translation_attention_has_a_row_per_output_piece_and_a_column_per_source_piece(client, served):
    r = post(client, "/v1/translate", model="at", inputs=["ein hund läuft ."], attention=True, max_len=5)
    assert r.status_code == 200, r.text
    att = r.json()["outputs"][0]["attention"]
    assert len(att["cross"]) == 2 and {len(layer) for layer in att["cross"]} == {2}  # 2 layers, 2 heads
    assert att["source"][-1] == "</s>" and att["target"][-1] == "</s>" and len(att["target"]) <= 6
    for layer in att["cross"]:
        for head in layer:
            assert len(head) == len(att["target"]) and {len(row) for row in head} == {len(att["source"])}
            assert all(abs(sum(row) - 1) < 1e-2 for row in head)  # each step's weights sum to 1
    assert att["alignment_layer"] == 1


def test_classification_attention_is_the_poolings_weight_on_each_token(client):
    out = post(client, "/v1/classify", model="sent", inputs=["a dog runs"], attention=True).json()["outputs"][0]
    pooling = out["attention"]["pooling"]
    assert len(pooling) == 2 and {len(h) for h in pooling} == {len(out["attention"]["tokens"])}
    assert all(abs(sum(h) - 1) < 1e-2 for h in pooling)


def test_models_health_page_and_openapi(client):
    models = {m["id"]: m for m in client.get("/v1/models").json()["models"]}
    assert list(models) == ["at", "beam", "nat", "ctc", "pos", "sent"]
    assert models["beam"]["decode"]["beam_size"] == 3 and "n_best" in models["beam"]["options"]
    assert models["at"]["attention"] and not models["nat"]["attention"]
    assert models["pos"]["labels"] == ["DET", "NOUN", "VERB"] and models["sent"]["labels"] == ["neg", "neu", "pos"]
    health = client.get("/health").json()
    assert {k: health[k] for k in ("status", "models", "queued")} == {"status": "ok", "models": 6,
                                                                      "queued": {k: 0 for k in models}}
    assert set(health["calls"]) == set(health["requests"]) == set(models)
    assert all(health["requests"][k] >= health["calls"][k] >= 0 for k in models)
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/static/page.js">' in page.text
    assert "heatmap" in client.get("/static/page.js").text
    schema = client.get("/openapi.json").json()
    names = set(schema["components"]["schemas"])
    assert {"TranslateRequest", "TagRequest", "ClassifyRequest", "TranslateResponse", "ErrorResponse"} <= names


# ----------------------------------------------------------------------------- bad requests
def raw(client, body: bytes, path: str = "/v1/translate"):
    return client.post(path, content=body, headers={"content-type": "application/json"})


BAD = {
    "malformed JSON": (lambda c: raw(c, b'{"model": "at", "inputs": ["a"'), 400, "not valid JSON"),
    "not UTF-8": (lambda c: raw(c, b'{"model": "at", "inputs": ["\xff\xfe"]}'), 400, "not UTF-8"),
    "no body": (lambda c: c.post("/v1/translate"), 422, "body is missing"),
    "a list body": (lambda c: post_raw_json(c, [1, 2]), 422, "JSON object"),
    "inputs not a list": (lambda c: post(c, "/v1/translate", model="at", inputs="ein hund"), 422, "inputs"),
    "a number input": (lambda c: post(c, "/v1/translate", model="at", inputs=["a", 3]), 422, "inputs[1]"),
    "a string beam": (lambda c: post(c, "/v1/translate", model="beam", inputs=["a"], beam_size="3"), 422,
                      "beam_size"),
    "empty inputs": (lambda c: post(c, "/v1/translate", model="at", inputs=[]), 422, "at least one"),
    "too many inputs": (lambda c: post(c, "/v1/translate", model="at", inputs=["a"] * 9), 413, "max_inputs=8"),
    "too many pieces": (lambda c: post(c, "/v1/translate", model="at", inputs=["ein hund " * 40] * 5), 413,
                        "max_request_tokens=300"),
    "too many bytes": (lambda c: post(c, "/v1/translate", model="at", inputs=["x" * 30_000]), 413,
                       "max_body_bytes=20000"),
    "a control character": (lambda c: post(c, "/v1/translate", model="at", inputs=["ein\x07hund"]), 422, "U+0007"),
    "a NUL": (lambda c: post(c, "/v1/tag", model="pos", inputs=["a\x00b"]), 422, "U+0000"),
    "a lone surrogate": (lambda c: raw(c, b'{"model": "at", "inputs": ["\\ud800"]}'), 422, "surrogate"),
    "an unknown model": (lambda c: post(c, "/v1/translate", model="fr-en", inputs=["a"]), 404, "unknown model"),
    "a model of another kind": (lambda c: post(c, "/v1/tag", model="at", inputs=["a"]), 400, "/v1/translate"),
    "an unknown key": (lambda c: post(c, "/v1/translate", model="at", inputs=["a"], beam=3), 422, "'beam'"),
    "a key the model lacks": (lambda c: post(c, "/v1/translate", model="at", inputs=["a"], beam_size=3), 400,
                              "does not apply"),
    "attention from a NAT": (lambda c: post(c, "/v1/translate", model="nat", inputs=["a"], attention=True), 400,
                             "attention"),
    "a beam past the limit": (lambda c: post(c, "/v1/translate", model="beam", inputs=["a"], beam_size=17), 422,
                              "1 to 16"),
    "n_best over the beam": (lambda c: post(c, "/v1/translate", model="beam", inputs=["a"], n_best=4), 422,
                             "beam_size=3"),
    "max_len past the limit": (lambda c: post(c, "/v1/translate", model="at", inputs=["a"], max_len=10_000), 422,
                               "max_len"),
    "top_k past the labels": (lambda c: post(c, "/v1/classify", model="sent", inputs=["a"], top_k=5), 422,
                              "1 to 3"),
}


def post_raw_json(client, body):
    return client.post("/v1/translate", json=body)


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_request_is_one_4xx_sentence(client, name):
    send, status, words = BAD[name]
    r = send(client)
    assert r.status_code == status, r.text
    message = r.json()["error"]
    assert words in message and "\n" not in message and len(message) < 300
    assert client.get("/health").status_code == 200  # the server goes on


def test_request_text_is_logged_only_when_asked(served, caplog):
    secret = "geheimer satz über hunde"
    for log_inputs in (False, True):
        caplog.clear()
        with caplog.at_level(logging.DEBUG), TestClient(create_app(served, ServeConfig(log_inputs=log_inputs))) as c:
            assert post(c, "/v1/translate", model="at", inputs=[secret], max_len=2).status_code == 200
            assert post(c, "/v1/translate", model="at", inputs=[secret, 1]).status_code == 422
        assert (secret in caplog.text) is log_inputs
