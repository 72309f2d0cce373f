"""Operating the server: /metrics counts what clients sent, every answer carries a request id,
one access line per request (never the text), HEAD and readiness probes, CORS and the API key
as configured, and an overloaded model refused at once with a bounded Retry-After."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from transformer.serve.app import STATIC, ServeConfig, create_app  # noqa: E402
from transformer.serve.batcher import RETRY_MAX, RETRY_MIN, Batcher, Job, QueueFull  # noqa: E402
from transformer.serve.operations import MAX_ID, JsonFormatter, release_memory  # noqa: E402
from transformer.serve.served import ServedModel  # noqa: E402

KEY = "s3cret-key"


class GatedModel(ServedModel):
    """A translation model that upper-cases its inputs; each call waits for ``gate``."""

    kind, endpoint = "translation", "/v1/translate"

    def __init__(self, model_id: str = "echo"):
        super().__init__(model_id, None, "echo.ckpt")
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 1

    def predict(self, texts, settings):
        self.calls.append(list(texts))
        assert self.gate.wait(20)
        return [{"translation": t.upper(), "hypotheses": [{"text": t.upper(), "score": 0.0}]} for t in texts]


@pytest.fixture
def gated():
    model = GatedModel()
    yield model
    model.gate.set()


def wait_until(condition, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.01)


def samples(client) -> dict[tuple[str, tuple], float]:
    """``/metrics`` parsed: (sample name, sorted labels) -> value."""
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def count(metrics, name: str, **labels) -> float:
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


# ----------------------------------------------------------------------------------- metrics
def test_metrics_count_each_endpoint_model_and_status_as_the_client_sent_them(served):
    sent = {"translate_ok": 3, "tag_ok": 2, "unknown": 4, "bad_json": 1}
    with TestClient(create_app(served)) as client, TestClient(create_app(served)) as other:
        for _ in range(sent["translate_ok"]):
            assert client.post("/v1/translate", json={"model": "at", "inputs": ["ein hund", "zwei"]}).status_code == 200
        for _ in range(sent["tag_ok"]):
            assert client.post("/v1/tag", json={"model": "pos", "inputs": ["a dog"]}).status_code == 200
        for _ in range(sent["unknown"]):
            assert client.post("/v1/translate", json={"model": "nope", "inputs": ["x"]}).status_code == 404
        assert client.post("/v1/classify", content=b"{not json", headers={"content-type": "application/json"}
                           ).status_code == 400
        assert other.get("/health").status_code == 200  # a second app counts on its own
        m = samples(client)
        theirs = samples(other)
    total = "transformer_serve_requests_total"
    assert count(m, total, endpoint="/v1/translate", model="at", status="200") == sent["translate_ok"]
    assert count(m, total, endpoint="/v1/tag", model="pos", status="200") == sent["tag_ok"]
    assert count(m, total, endpoint="/v1/translate", model="-", status="404") == sent["unknown"]
    assert count(m, total, endpoint="/v1/classify", model="-", status="400") == sent["bad_json"]
    assert count(m, "transformer_serve_request_seconds_count", endpoint="/v1/translate", model="at",
                 status="200") == 3
    # each translate request was its own call of two sentences
    assert count(m, "transformer_serve_batch_sentences_count", model="at") == 3
    assert count(m, "transformer_serve_batch_sentences_sum", model="at") == 6
    assert count(m, "transformer_serve_model_call_seconds_count", model="pos") == 2
    for model in served:
        assert count(m, "transformer_serve_model_loaded", model=model.id, kind=model.kind) == 1
        assert count(m, "transformer_serve_queue_requests", model=model.id) == 0
    assert count(m, "transformer_serve_ready") == 1
    assert count(theirs, total, endpoint="/health", model="-", status="200") == 1
    assert count(theirs, total, endpoint="/v1/translate", model="at", status="200") == 0


def test_the_queue_gauge_shows_requests_waiting(gated):
    from concurrent.futures import ThreadPoolExecutor

    with TestClient(create_app([gated], ServeConfig(batch_wait_ms=0))) as client, ThreadPoolExecutor(3) as pool:
        gated.gate.clear()
        futures = [pool.submit(client.post, "/v1/translate", json={"model": "echo", "inputs": ["s 0"]})]
        wait_until(lambda: len(gated.calls) == 1)
        futures += [pool.submit(client.post, "/v1/translate", json={"model": "echo", "inputs": [f"s {i}"]})
                    for i in (1, 2)]
        wait_until(lambda: client.get("/health").json()["queued"]["echo"] == 2)
        assert count(samples(client), "transformer_serve_queue_requests", model="echo") == 2
        gated.gate.set()
        assert [f.result().status_code for f in futures] == [200] * 3


# ------------------------------------------------------------------------ request id, access log
def test_every_answer_carries_a_request_id_made_safe_or_new(gated):
    with TestClient(create_app([gated])) as client:
        given = client.get("/health", headers={"X-Request-ID": "trace-42.a:b"})
        dirty = client.get("/health", headers={"X-Request-ID": 'a b"<c>;d'})
        long = client.get("/health", headers={"X-Request-ID": "x" * 500})
        made = [client.post("/v1/translate", json={"model": "echo", "inputs": ["hi"]}) for _ in range(2)]
        refused = client.post("/v1/translate", json={"model": "echo", "inputs": []})
    assert given.headers["x-request-id"] == "trace-42.a:b"
    assert dirty.headers["x-request-id"] == "abcd"
    assert long.headers["x-request-id"] == "x" * MAX_ID
    ids = [r.headers["x-request-id"] for r in made]
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids) and ids[0] != ids[1]
    assert refused.status_code == 422 and len(refused.headers["x-request-id"]) == 32


def test_one_access_line_per_request_with_its_fields_and_no_text(served, caplog):
    secret = "geheimnis hund"
    with caplog.at_level(logging.INFO), TestClient(create_app(served)) as client:
        caplog.clear()
        ok = client.post("/v1/translate", json={"model": "at", "inputs": [secret, "zwei"]},
                         headers={"X-Request-ID": "req-1"})
        missing = client.post("/v1/translate", json={"model": "nope", "inputs": [secret]})
    assert ok.status_code == 200 and missing.status_code == 404
    access = [r for r in caplog.records if r.name == "transformer.serve.access"]
    assert [r.fields["id"] for r in access] == ["req-1", missing.headers["x-request-id"]]
    assert access[0].fields == {**access[0].fields, "method": "POST", "path": "/v1/translate", "model": "at",
                                "status": 200, "inputs": 2}
    assert access[0].fields["ms"] >= 0 and "req-1" in access[0].getMessage()
    assert access[1].fields["status"] == 404 and access[1].fields["model"] == "-"
    assert secret not in caplog.text and "geheimnis" not in caplog.text


def test_the_json_format_writes_an_access_line_as_one_object():
    fields = {"method": "GET", "path": "/health", "model": "-", "status": 200, "inputs": 0, "ms": 1.5, "id": "r1"}
    record = logging.LogRecord("transformer.serve.access", logging.INFO, __file__, 1, "GET /health id=r1", None, None)
    record.fields = fields
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed == {**parsed, **fields, "level": "INFO", "logger": "transformer.serve.access"}


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_path_cannot_forge_a_log_line(gated, log_format):
    """The access line of a request whose path holds a percent-encoded newline, carriage return,
    escape or line separator stays one line, keyed or not (a 401 is logged with its path)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter("%(message)s"))
    access_log = logging.getLogger("transformer.serve.access")
    access_log.addHandler(handler)
    old_level = access_log.level
    access_log.setLevel(logging.INFO)
    forged = "/nothing%0a2099-01-01%20FAKE-ACCESS-LINE%20status=200%0d%1b[2J%E2%80%A8x"
    try:
        for config in (ServeConfig(), ServeConfig(api_key=KEY)):
            with TestClient(create_app([gated], config)) as client:
                assert client.get(forged).status_code == 404
                assert client.get("/v1" + forged).status_code in (401, 404)
    finally:
        access_log.removeHandler(handler)
        access_log.setLevel(old_level)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4 and not any(line.startswith("2099") for line in lines)
    assert all("FAKE-ACCESS-LINE" in line for line in lines)
    if log_format == "json":
        assert all(json.loads(line)["path"].startswith(("/nothing\\n2099", "/v1/nothing\\n2099")) for line in lines)
    else:
        assert all("\\n2099-01-01 FAKE-ACCESS-LINE status=200\\r\\x1b[2J\\u2028x" in line for line in lines)


def test_access_log_false_writes_no_access_line(gated, caplog):
    with caplog.at_level(logging.INFO), TestClient(create_app([gated], ServeConfig(access_log=False))) as client:
        assert client.get("/health").status_code == 200
    assert not [r for r in caplog.records if r.name == "transformer.serve.access"]


# ----------------------------------------------------------------------------- probes, HEAD
def test_head_answers_200_without_a_body(gated):
    with TestClient(create_app([gated])) as client:
        for path in ("/", "/health", "/ready"):
            r = client.head(path)
            assert r.status_code == 200 and r.content == b"", path


def test_ready_is_503_until_every_model_has_warmed_up(gated):
    gated.gate.clear()
    other = GatedModel("other")
    with TestClient(create_app([gated, other], ServeConfig(warm_up=True))) as client:
        wait_until(lambda: len(gated.calls) == 1)  # the warm-up call, held
        waiting = client.get("/ready")
        health = client.get("/health")
        gated.gate.set()
        wait_until(lambda: client.get("/ready").status_code == 200)
        ready = client.get("/ready").json()
        calls = client.get("/health").json()["calls"]
    assert waiting.status_code == 503 and waiting.json() == {"ready": False, "models": {"echo": False, "other": False}}
    assert health.status_code == 200  # alive meanwhile
    assert ready == {"ready": True, "models": {"echo": True, "other": True}}
    assert len(gated.calls) == len(other.calls) == 1 and calls == {"echo": 0, "other": 0}  # warm-ups are not counted


# ------------------------------------------------------------------------------ CORS, API key
def test_cors_answers_the_configured_origins_only(gated):
    preflight = {"Origin": "https://example.org", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"}
    with TestClient(create_app([gated], ServeConfig(cors_origins=("https://example.org",)))) as client:
        allowed = client.options("/v1/translate", headers=preflight)
        other = client.options("/v1/translate", headers={**preflight, "Origin": "https://evil.example"})
        simple = client.get("/v1/models", headers={"Origin": "https://example.org"})
    with TestClient(create_app([gated])) as client:
        off = client.get("/v1/models", headers={"Origin": "https://example.org"})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://example.org"
    assert "access-control-allow-origin" not in other.headers
    assert simple.headers["access-control-allow-origin"] == "https://example.org"
    assert "x-request-id" in simple.headers["access-control-expose-headers"].lower()
    assert "access-control-allow-origin" not in off.headers


def test_an_api_key_guards_the_api_and_leaves_probes_metrics_and_the_page_open(gated):
    body = {"model": "echo", "inputs": ["hi"]}
    with TestClient(create_app([gated], ServeConfig(api_key=KEY))) as client:
        none = client.post("/v1/translate", json=body)
        wrong = client.post("/v1/translate", json=body, headers={"Authorization": "Bearer nope"})
        basic = client.post("/v1/translate", json=body, headers={"Authorization": f"Basic {KEY}"})
        models = client.get("/v1/models")
        right = client.post("/v1/translate", json=body, headers={"Authorization": f"Bearer {KEY}"})
        asset = next(f.name for f in sorted(STATIC.iterdir()) if f.suffix in (".css", ".js"))
        open_paths = {p: client.get(p).status_code for p in ("/", "/health", "/ready", "/metrics", f"/static/{asset}")}
    for r in (none, wrong, basic, models):
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in r.json()["error"] and KEY not in r.text
    assert right.status_code == 200 and right.json()["outputs"][0]["translation"] == "HI"
    assert gated.calls == [["hi"]]  # refused requests never reached the model
    assert open_paths == dict.fromkeys(open_paths, 200)
    assert KEY not in repr(ServeConfig(api_key=KEY))


# ----------------------------------------------------------------------------------- overload
def test_a_full_queue_is_refused_at_once_with_a_bounded_retry_after(gated, caplog):
    from concurrent.futures import ThreadPoolExecutor

    config = ServeConfig(batch_wait_ms=0, max_queue=2)
    with caplog.at_level(logging.INFO), TestClient(create_app([gated], config)) as client, \
            ThreadPoolExecutor(3) as pool:
        gated.gate.clear()
        held = [pool.submit(client.post, "/v1/translate", json={"model": "echo", "inputs": ["s 0"]})]
        wait_until(lambda: len(gated.calls) == 1)
        held += [pool.submit(client.post, "/v1/translate", json={"model": "echo", "inputs": [f"s {i}"]})
                 for i in (1, 2)]
        wait_until(lambda: client.get("/health").json()["queued"]["echo"] == 2)
        caplog.clear()
        # the model is still held: an answer now cannot have waited behind it
        refused = client.post("/v1/translate", json={"model": "echo", "inputs": ["one", "more"]},
                              headers={"X-Request-ID": "busy-1"})
        unnamed = client.post("/v1/translate", json={"model": "echo", "inputs": ["again"]})
        assert not gated.gate.is_set()
        gated.gate.set()
        assert [f.result().status_code for f in held] == [200] * 3
        m = samples(client)
    assert refused.status_code == 503 and "max_queue" in refused.json()["error"]
    assert refused.json() == {"error": "model 'echo' has 2 requests waiting (max_queue); retry later"}
    assert refused.headers["content-type"] == "application/json"
    assert int(refused.headers["content-length"]) == len(refused.content)
    assert RETRY_MIN <= int(refused.headers["retry-after"]) <= RETRY_MAX
    assert refused.headers["x-request-id"] == "busy-1" and len(unnamed.headers["x-request-id"]) == 32
    assert count(m, "transformer_serve_requests_total", endpoint="/v1/translate", model="echo", status="503") == 2
    assert count(m, "transformer_serve_request_seconds_count", endpoint="/v1/translate", model="echo",
                 status="503") == 2
    access = [r.fields for r in caplog.records if r.name == "transformer.serve.access" and r.fields["status"] == 503]
    assert access == [{**access[0], "method": "POST", "path": "/v1/translate", "model": "echo", "status": 503,
                       "inputs": 2, "id": "busy-1"},
                      {**access[1], "model": "echo", "status": 503, "inputs": 1,
                       "id": unnamed.headers["x-request-id"]}]


def test_the_queue_counts_what_waits_and_forgets_requests_that_timed_out():
    async def scenario():
        gate = threading.Event()
        batcher = Batcher("m", lambda texts, s: (gate.wait(20), list(texts))[1], wait_s=0.0, max_queue=3)
        batcher.stats.rate = 1.0  # a sentence a second: Retry-After is the sentences waiting
        running = asyncio.ensure_future(batcher.submit(["a"], None, 1, 10))
        await asyncio.sleep(0.05)  # taken into a call: no longer waiting
        counts = [(batcher.queued, batcher.retry_after())]
        waiting = [asyncio.ensure_future(batcher.submit(["b"] * 3, "other", 3, 10)),
                   asyncio.ensure_future(batcher.submit(["c"] * 2, "other", 2, 0.1))]
        await asyncio.sleep(0.01)
        counts.append((batcher.queued, batcher.retry_after()))
        with pytest.raises(asyncio.TimeoutError):
            await waiting[1]
        await asyncio.sleep(0)
        counts.append((batcher.queued, batcher.retry_after()))
        gate.set()
        await asyncio.gather(running, waiting[0])
        counts.append((batcher.queued, batcher.full))
        await batcher.stop()
        batcher.close()
        return counts

    assert asyncio.run(scenario()) == [(0, RETRY_MIN), (2, 5), (1, 3), (0, False)]


@pytest.mark.parametrize("rate,waiting,expected", [(2.0, 4, 2), (2.0, 3, 2), (2.0, 100, RETRY_MAX), (1000.0, 3, 1),
                                                   (0.0, 50, RETRY_MIN)])
def test_retry_after_is_the_waiting_sentences_over_the_drain_rate_within_1_to_10_s(rate, waiting, expected):
    async def scenario():
        batcher = Batcher("m", lambda texts, s: list(texts), max_queue=1)
        batcher.stats.rate = rate
        batcher._enqueue(Job(["x"] * waiting, None, waiting, asyncio.get_running_loop().create_future()))
        with pytest.raises(QueueFull) as refused:
            batcher.check_room()
        return refused.value.retry_after

    assert asyncio.run(scenario()) == expected


def test_the_drain_rate_is_a_moving_average_of_sentences_per_second_of_call():
    async def scenario():
        batcher = Batcher("m", lambda texts, s: (time.sleep(0.05), list(texts))[1], wait_s=0.0)
        await batcher.submit(["a"] * 4, None, 4, 10)
        first = batcher.stats.rate
        await batcher.submit(["a"], None, 1, 10)
        second = batcher.stats.rate
        await batcher.stop()
        batcher.close()
        return first, second, batcher.stats.last_seconds

    first, second, last = asyncio.run(scenario())
    assert 0 < first <= 4 / 0.05  # at most 4 sentences in the call's >= 50 ms
    assert second == pytest.approx(0.2 * (1 / last) + 0.8 * first)


def test_memory_is_given_back_once_the_queue_is_idle_after_work():
    trims = []

    async def scenario():
        batcher = Batcher("m", lambda texts, s: list(texts), wait_s=0.0, on_idle=lambda: trims.append(1),
                          idle_s=0.05)
        batcher.start()
        await asyncio.sleep(0.2)
        before = batcher.idle_runs  # no work yet: nothing to give back
        for _ in range(3):
            await batcher.submit(["a"], None, 1, 10)
        for _ in range(400):
            if batcher.idle_runs:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # idle on: no second trim without new work
        await batcher.stop()
        batcher.close()
        return before, batcher.idle_runs

    assert asyncio.run(scenario()) == (0, 1) and trims == [1]


def test_release_memory_calls_glibc_malloc_trim_where_there_is_glibc():
    import platform

    assert release_memory() is (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc")


def test_an_unexpected_failure_is_counted_and_logged_as_a_500(gated, caplog):
    def broken(text: str) -> int:
        raise RuntimeError("a bug")

    gated.count_tokens = broken
    with caplog.at_level(logging.INFO), TestClient(create_app([gated]), raise_server_exceptions=False) as client:
        r = client.post("/v1/translate", json={"model": "echo", "inputs": ["hi"]})
        m = samples(client)
    assert r.status_code == 500
    assert count(m, "transformer_serve_requests_total", endpoint="/v1/translate", model="echo", status="500") == 1
    (line,) = [rec for rec in caplog.records
               if rec.name == "transformer.serve.access" and rec.fields["method"] == "POST"]
    assert line.fields["status"] == 500 and line.fields["model"] == "echo"


def test_the_request_text_is_logged_only_with_log_inputs_and_then_with_its_id(gated, caplog):
    with caplog.at_level(logging.INFO), TestClient(create_app([gated], ServeConfig(log_inputs=True))) as client:
        client.post("/v1/translate", json={"model": "echo", "inputs": ["geheimnis"]}, headers={"X-Request-ID": "t-7"})
    (line,) = [r.getMessage() for r in caplog.records if "geheimnis" in r.getMessage()]
    assert "id=t-7" in line
