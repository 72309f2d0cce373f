"""Dynamic batching, with a scripted model that records every call: concurrent requests share a
call (and only with equal settings, within the piece budget), ``batching=false`` calls once per
request, a full queue answers 503 with Retry-After, a slow call 504, a failed call 500; each
time the server goes on answering."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from transformer.serve.app import ServeConfig, create_app  # noqa: E402
from transformer.serve.served import ServedModel  # noqa: E402


class ScriptedModel(ServedModel):
    """A translation model that upper-cases its inputs; each call waits for ``gate`` (when
    closed) and records its texts and settings; an input "boom" makes the call fail."""

    kind, endpoint = "translation", "/v1/translate"

    def __init__(self):
        super().__init__("echo", None, "echo.ckpt")
        self.options = ("beam_size",)
        self.calls: list[tuple[list[str], object]] = []
        self.gate = threading.Event()
        self.gate.set()

    def _settings(self, overrides: dict):
        return overrides.get("beam_size", 1)

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 1

    def predict(self, texts, settings):
        self.calls.append((list(texts), settings))
        assert self.gate.wait(10)
        if "boom" in texts:
            raise RuntimeError("the scripted model fails")
        return [{"translation": t.upper(), "hypotheses": [{"text": t.upper(), "score": 0.0}]} for t in texts]


def serve(model: ScriptedModel, **config) -> TestClient:
    return TestClient(create_app([model], ServeConfig(**{"batch_wait_ms": 20, **config})))


@pytest.fixture
def model():
    """The scripted model, its gate opened again after the test (a failed test leaves no call
    waiting, so the app can shut down)."""
    scripted = ScriptedModel()
    yield scripted
    scripted.gate.set()


def translate(client, text: str, **extra):
    return client.post("/v1/translate", json={"model": "echo", "inputs": [text], **extra})


def wait_until(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.005)


def queued(client) -> int:
    return client.get("/health").json()["queued"]["echo"]


def concurrent(client, model: ScriptedModel, texts: list[str], **extra) -> list:
    """Send ``texts`` at once while the model's first call is held, so the rest queue up."""
    model.gate.clear()
    with ThreadPoolExecutor(len(texts)) as pool:
        first = pool.submit(translate, client, texts[0], **extra)
        wait_until(lambda: len(model.calls) == 1)
        rest = [pool.submit(translate, client, t, **extra) for t in texts[1:]]
        wait_until(lambda: queued(client) == len(texts) - 1)
        model.gate.set()
        return [f.result() for f in [first, *rest]]


@pytest.mark.parametrize("batching", [True, False])
def test_concurrent_requests_share_a_model_call_only_with_batching_on(model, batching):
    texts = [f"sentence {i}" for i in range(8)]
    with serve(model, batching=batching) as client:
        answers = concurrent(client, model, texts)
        health = client.get("/health").json()
    assert [r.json()["outputs"][0]["translation"] for r in answers] == [t.upper() for t in texts]
    sizes = [len(call[0]) for call in model.calls]
    assert sizes == ([1, 7] if batching else [1] * 8)
    assert (health["calls"]["echo"], health["requests"]["echo"]) == (len(sizes), 8)


def test_clients_answered_together_stay_together():
    # Client a's first request runs alone (nothing came before it); b's arrives while it runs.
    # When a's answer comes back, a sends its next request at once: the wait after a call lets
    # it join b's, where without it b's would run alone and the two clients would take turns
    # for good.
    import asyncio

    from transformer.serve.batcher import Batcher

    calls = []

    def predict(texts, settings):
        calls.append(list(texts))
        time.sleep(0.3)
        return list(texts)

    async def scenario():
        batcher = Batcher("m", predict, wait_s=0.2)

        async def client(name: str, delay: float):
            await asyncio.sleep(delay)
            for i in range(2):
                await batcher.submit([f"{name}{i}"], 1, 1, timeout=30)

        await asyncio.gather(client("a", 0.0), client("b", 0.15))
        await batcher.stop()
        batcher.close()

    asyncio.run(scenario())
    assert calls == [["a0"], ["b0", "a1"], ["b1"]]


def test_a_lone_client_is_never_held_back():
    # One client, one request at a time: each request is all the last call answered, so it
    # runs at once, however long the batcher would wait for company.
    import asyncio

    from transformer.serve.batcher import Batcher

    async def scenario():
        batcher = Batcher("m", lambda texts, settings: list(texts), wait_s=5.0)
        start = time.monotonic()
        answers = [await batcher.submit([f"s{i}"], 1, 1, timeout=30) for i in range(3)]
        seconds = time.monotonic() - start
        await batcher.stop()
        batcher.close()
        return answers, seconds

    answers, seconds = asyncio.run(scenario())
    assert answers == [["s0"], ["s1"], ["s2"]]
    assert seconds < 2.5, f"three lone requests took {seconds:.2f} s; the batcher waits 5 s for company"


def test_a_call_takes_only_requests_with_equal_settings_within_the_budget(model):
    with serve(model, max_batch_tokens=9) as client, ThreadPoolExecutor(6) as pool:  # 3 requests a call
        answers = concurrent(client, model, [f"w{i} x" for i in range(9)], beam_size=2)
        model.gate.clear()
        held = pool.submit(translate, client, "held")
        wait_until(lambda: len(model.calls) == 5)
        futures = [pool.submit(translate, client, f"m{i}", beam_size=1 + i % 2) for i in range(5)]
        wait_until(lambda: queued(client) == 5)
        model.gate.set()
        assert all(f.result().status_code == 200 for f in [held, *futures])
    assert all(r.status_code == 200 for r in answers)
    assert [len(texts) for texts, _ in model.calls[:4]] == [1, 3, 3, 2]
    for texts, settings in model.calls[4:]:
        assert {1 + int(t[1:]) % 2 for t in texts if t.startswith("m")} <= {settings}
    assert sorted(len(texts) for texts, _ in model.calls[5:]) == [2, 3]


def test_a_full_queue_answers_503_with_retry_after(model):
    with serve(model, max_queue=2) as client, ThreadPoolExecutor(3) as pool:
        model.gate.clear()
        running = pool.submit(translate, client, "a")
        wait_until(lambda: len(model.calls) == 1)
        waiting = [pool.submit(translate, client, t) for t in ("b", "c")]
        wait_until(lambda: queued(client) == 2)
        refused = translate(client, "d")
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1 and "max_queue" in refused.json()["error"]
        model.gate.set()
        assert all(f.result().status_code == 200 for f in [running, *waiting])
        assert translate(client, "e").status_code == 200


def test_a_request_past_its_time_limit_answers_504_and_leaves_the_queue(model):
    with serve(model, request_timeout_s=0.3) as client, ThreadPoolExecutor(2) as pool:
        model.gate.clear()
        slow = pool.submit(translate, client, "slow")
        wait_until(lambda: len(model.calls) == 1)
        late = translate(client, "queued too long")  # waits behind the held call
        assert late.status_code == 504 and "request_timeout_s=0.3" in late.json()["error"]
        assert slow.result().status_code == 504
        model.gate.set()
        assert translate(client, "fast").json()["outputs"][0]["translation"] == "FAST"
    assert [texts for texts, _ in model.calls] == [["slow"], ["fast"]]  # the timed-out one never ran


def test_a_failed_model_call_fails_its_request_only(model):
    with serve(model) as client:
        failed = translate(client, "boom")
        assert failed.status_code == 500 and failed.json()["error"] == "the model failed on this request (RuntimeError)"
        assert translate(client, "fine").status_code == 200


def test_the_app_serves_again_after_a_restart(model):
    app = create_app([model], ServeConfig())
    for _ in range(2):
        with TestClient(app) as client:
            assert translate(client, "again").json()["outputs"][0]["translation"] == "AGAIN"
