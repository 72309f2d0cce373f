"""Running the server in production: metrics, request ids, the access log, the API key and
giving memory back.

* :class:`Metrics`: Prometheus counters, histograms and gauges in a registry of the app's own
  (two apps in one process, as in the tests, never share or collide), served at ``/metrics``.
* :class:`Operations`: ASGI middleware around the app. Each request gets an id (the client's
  ``X-Request-ID``, reduced to safe characters and ``MAX_ID`` long, else 32 new random hex digits),
  returned in the response's ``X-Request-ID``; it is counted and timed by endpoint, model and
  status; it writes one access line (method, path, model, status, inputs, milliseconds, id;
  never the text); and with an API key, ``/v1/`` answers only ``Authorization: Bearer <key>``.
  ``HEAD`` answers carry no body.
* :func:`release_memory`: glibc keeps the memory a burst of requests freed in its arenas, so a
  server's resident size ratchets up after each overload; ``malloc_trim(0)`` hands it back to
  the system. The batcher calls it when its queue has been idle a while after work.
"""

from __future__ import annotations

import contextvars
import ctypes
import ctypes.util
import hmac
import json
import logging
import random
import re
import time
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from transformer.escapes import escape_controls

access_log = logging.getLogger("transformer.serve.access")
# A request's id: what a client may send is cut to these characters and this length, so that a
# log line or a header can never carry a newline, a quote or a megabyte.
ID_CHARS = re.compile(r"[^A-Za-z0-9._:-]")
MAX_ID = 64
# Paths an API key does not guard: the page and its files, health, readiness and metrics (the
# last three are for the machine's own probes and scraper, and say nothing of any request).
PROTECTED_PREFIX = "/v1/"
# What the access line says of a request that named no model (a malformed body, the page).
NO_MODEL = "-"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

# What the app learns of the request it is answering (the model, how many inputs), read back by
# the middleware for the access line and the metrics: one dict per request, set by Operations.
REQUEST: contextvars.ContextVar[dict | None] = contextvars.ContextVar("transformer_serve_request", default=None)


def note(**fields) -> None:
    """Tell the access line and the metrics about the current request (``model``, ``inputs``)."""
    info = REQUEST.get()
    if info is not None:
        info.update(fields)


def current_id() -> str:
    """The id of the request being answered ("-" outside one), for log lines about it."""
    info = REQUEST.get()
    return info["id"] if info is not None else NO_MODEL


# New ids come from a generator seeded once from the system's entropy, not from os.urandom per
# request (as uuid4 does): that call lets go of the GIL, and a busy model thread then holds the
# event loop up to a switch interval, per request. An id needs to be unique, not secret.
IDS = random.Random()


def request_id(given: bytes | None) -> str:
    """The client's id made safe (letters, digits, ``._:-``; at most ``MAX_ID``), or a new one
    (32 hex digits)."""
    if given:
        cleaned = ID_CHARS.sub("", given.decode("latin-1"))[:MAX_ID]
        if cleaned:
            return cleaned
    return f"{IDS.getrandbits(128):032x}"


class Metrics:
    """The server's Prometheus metrics, in a registry of their own."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("transformer_serve_requests", "HTTP requests answered, by endpoint, model and status",
                                ["endpoint", "model", "status"], registry=r)
        self.latency = Histogram("transformer_serve_request_seconds", "Seconds from a request's arrival to its answer",
                                 ["endpoint", "model", "status"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Gauge("transformer_serve_queue_requests", "Requests waiting for a model call", ["model"],
                           registry=r)
        self.batch_size = Histogram("transformer_serve_batch_sentences", "Sentences per model call", ["model"],
                                    buckets=SIZE_BUCKETS, registry=r)
        self.decode = Histogram("transformer_serve_model_call_seconds", "Seconds of one model call", ["model"],
                                buckets=LATENCY_BUCKETS, registry=r)
        self.loaded = Gauge("transformer_serve_model_loaded", "1 for each model this server answers for",
                            ["model", "kind"], registry=r)
        self.ready = Gauge("transformer_serve_ready", "1 once every model is loaded and warmed up", registry=r)
        # (endpoint, model, status) -> that request counter and latency histogram: labels()
        # costs more than the count; the keys are bounded (routes, models, statuses)
        self._answered: dict[tuple[str, str, int], tuple] = {}

    def answered(self, endpoint: str, model: str, status: int, seconds: float) -> None:
        """Count and time one request."""
        key = (endpoint, model, status)
        series = self._answered.get(key)
        if series is None:
            labels = {"endpoint": endpoint, "model": model, "status": str(status)}
            series = self._answered[key] = (self.requests.labels(**labels), self.latency.labels(**labels))
        series[0].inc()
        series[1].observe(seconds)

    def add_model(self, model_id: str, kind: str, queued: Callable[[], int]) -> None:
        """A served model: its loaded gauge, and its queue read when scraped."""
        self.loaded.labels(model=model_id, kind=kind).set(1)
        self.queue.labels(model=model_id).set_function(queued)

    def model_call(self, model_id: str) -> Callable[[int, float], None]:
        """What the model's batcher reports after each call: (sentences, seconds)."""
        size, seconds = self.batch_size.labels(model=model_id), self.decode.labels(model=model_id)

        def observe(texts: int, took: float) -> None:
            size.observe(texts)
            seconds.observe(took)
        return observe

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)


def check_key(headers: Iterable[tuple[bytes, bytes]], key: bytes) -> bool:
    """Whether the request carries ``Authorization: Bearer <key>`` (compared in constant time)."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, given = value.partition(b" ")
            return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), key)
    return False


class Operations:
    """ASGI middleware: request id, API key, metrics and the access line (see the module docstring).

    Args:
        app: the application inside.
        metrics: where requests are counted and timed.
        endpoints: the app's route paths (the endpoint label; other paths count as ``other``,
            so that a scan of random URLs cannot grow the metrics without bound).
        models: the model ids (a request naming another counts as model ``-``).
        api_key: the key ``/v1/`` requires, or None.
        access: write the access line.
    """

    def __init__(self, app, metrics: Metrics, endpoints: Callable[[], set], models: set, api_key: str | None = None,
                 access: bool = True):
        self.app, self.metrics, self.endpoints, self.models = app, metrics, endpoints, models
        self.key = api_key.encode() if api_key else None
        self.access = access

    def endpoint(self, path: str) -> str:
        if path.startswith("/static/"):
            return "/static"
        return path if path in self.endpoints() else "other"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        rid = request_id(dict(scope["headers"]).get(b"x-request-id"))
        # 499 (nginx's "client closed request"): no answer began, the client went away
        info = {"model": NO_MODEL, "inputs": 0, "status": 499, "id": rid}
        token = REQUEST.set(info)
        head = scope["method"] == "HEAD"

        async def answer(message):
            if message["type"] == "http.response.start":
                info["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            elif message["type"] == "http.response.body" and head and message.get("body"):
                message = {**message, "body": b""}  # a HEAD answer has the GET's headers, no body
            await send(message)

        try:
            if self.key is not None and scope["path"].startswith(PROTECTED_PREFIX) and scope["method"] != "OPTIONS" \
                    and not check_key(scope["headers"], self.key):
                await unauthorized(answer)
            else:
                await self.app(scope, receive, answer)
        except Exception:
            if info["status"] == 499:  # Starlette's outermost handler answers it with a 500
                info["status"] = 500
            raise
        finally:
            REQUEST.reset(token)
            self.record(scope, info, rid, time.perf_counter() - start)

    def record(self, scope, info: dict, rid: str, seconds: float) -> None:
        endpoint = self.endpoint(scope["path"])
        model = info["model"] if info["model"] in self.models else NO_MODEL
        self.metrics.answered(endpoint, model, info["status"], seconds)
        if self.access and access_log.isEnabledFor(logging.INFO):
            # The path arrives percent-decoded: a %0a in it would start a line of the caller's
            # choosing, so every text field is logged with its control characters escaped.
            fields = {"method": escape_controls(scope["method"]), "path": escape_controls(scope["path"]),
                      "model": model, "status": info["status"],
                      "inputs": info["inputs"], "ms": round(seconds * 1000, 1), "id": rid}
            access_log.info("%(method)s %(path)s model=%(model)s status=%(status)s inputs=%(inputs)s ms=%(ms)s "
                            "id=%(id)s", fields, extra={"fields": fields})


async def unauthorized(send) -> None:
    body = json.dumps({"error": "this server needs an API key: send the header Authorization: Bearer <key>"}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="transformer-serve"')]})
    await send({"type": "http.response.body", "body": body})


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and an access line's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname,
                "logger": record.name, "message": record.getMessage(), **getattr(record, "fields", {})}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def _libc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc if libc is not None and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


LIBC = _libc()


def release_memory() -> bool:
    """Give the memory freed in glibc's arenas back to the system (``malloc_trim(0)``); False
    where there is no glibc (macOS, musl)."""
    if LIBC is None:
        return False
    LIBC.malloc_trim(0)
    return True


__all__ = ["JsonFormatter", "Metrics", "Operations", "REQUEST", "current_id", "note", "release_memory", "request_id"]
