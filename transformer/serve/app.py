"""The FastAPI application: the JSON endpoints, their errors, and the page.

    POST /v1/translate  /v1/tag  /v1/classify   {"model": id, "inputs": [...], overrides}
    GET  /v1/models  /health  /ready  /metrics  /  (the page)  /static/...  /openapi.json

A speech model's inputs are audio files in base64 (a WAV, FLAC ... as a JSON body carries an
upload): a speech classifier's on ``/v1/classify``, a transcript model's on ``/v1/translate``
(``translation`` is the transcript); ``GET /v1/models`` marks both ``"input": "audio"``, and the page
offers a file picker for them.

Every refusal is a 4xx whose body is ``{"error": "<one sentence>"}``: a body that is not UTF-8
or not JSON (400), wrong types, unknown keys, an empty input list or a control character (422),
an unknown model (404) or one of another kind (400), too many inputs, pieces or bytes (413,
naming the limit). A full queue is 503 with ``Retry-After``, answered before the request is
read further; a request past its time limit 504. Nothing a request holds stops the server: a
failed model call fails its own requests (500). Request text is logged only with ``log_inputs``.

Operations (``operations``): every answer carries ``X-Request-ID``; requests are counted and
timed at ``/metrics`` (Prometheus); one access line per request; with an API key ``/v1/`` needs
``Authorization: Bearer <key>`` (401 otherwise). ``/health`` says the process is up (cheap, for
a liveness probe), ``/ready`` is 503 until every model has answered a warm-up call, then 200
(a readiness probe: no traffic to a server still paying its first calls' set-up).
``cors_origins`` lets pages of those origins call the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from transformer.serve import schemas
from transformer.serve.batcher import RETRY_MAX, RETRY_MIN, Batcher, QueueFull
from transformer.serve.operations import Metrics, Operations, current_id, note, release_memory
from transformer.serve.served import RequestError, ServedModel

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"
ERRORS = {code: {"model": schemas.ErrorResponse} for code in (400, 404, 413, 422, 500, 503, 504)}


@dataclass(frozen=True)
class ServeConfig:
    """The server's keys of ``conf/serve.yaml`` (see there)."""

    batching: bool = True
    batch_wait_ms: float = 5.0
    max_batch_tokens: int = 4096
    max_queue: int = 256
    request_timeout_s: float = 30.0
    max_inputs: int = 64
    max_request_tokens: int = 2048
    max_body_bytes: int = 1_000_000
    log_inputs: bool = False
    access_log: bool = True
    cors_origins: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False)  # never in a log line
    warm_up: bool = False  # transformer-serve sets it: /ready waits for one call per model
    idle_s: float = 1.0  # queue idle this long after work: freed memory goes back to the system


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    """The one shape of every refusal."""
    return JSONResponse({"error": " ".join(message.split())}, status_code=status, headers=headers)


class BodyGuard:
    """ASGI middleware that reads a POST body before the app: past ``max_bytes`` it is a 413,
    and bytes that are not UTF-8 a 400, so the app only ever parses bounded text. ``admit``
    may refuse the body at once (an overloaded model: 503), before the app's parsing and
    checking, which under overload would make each refusal wait its turn on the event loop."""

    def __init__(self, app, max_bytes: int, admit: Callable[[bytes], ASGIApp | None] | None = None):
        self.app, self.max_bytes, self.admit = app, max_bytes, admit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        too_big = f"the body is larger than max_body_bytes={self.max_bytes}"
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if length.isdigit() and int(length) > self.max_bytes:
            return await error(413, too_big)(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await error(413, too_big)(scope, receive, send)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return await error(400, f"the body is not UTF-8 text (byte {exc.start})")(scope, receive, send)
        refusal = self.admit(body) if self.admit is not None else None
        if refusal is not None:
            return await refusal(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class Overloaded:
    """The 503 of one model's full queue as raw ASGI messages: the body and each ``Retry-After``
    value's headers are built once. Under overload a server answers mostly these, so a refusal
    costs two ``send`` calls and no Response object; it reads as :func:`error`'s would."""

    def __init__(self, message: str):
        self.body = json.dumps({"error": " ".join(message.split())}).encode()
        head = [(b"content-length", str(len(self.body)).encode()), (b"content-type", b"application/json")]
        self.heads = {s: [*head, (b"retry-after", str(s).encode())] for s in range(RETRY_MIN, RETRY_MAX + 1)}

    def response(self, retry_after: int) -> ASGIApp:
        """The refusal saying ``Retry-After: retry_after`` (an ASGI app, as a Response is)."""
        head = self.heads[min(RETRY_MAX, max(RETRY_MIN, retry_after))]

        async def respond(scope, receive, send):
            await send({"type": "http.response.start", "status": 503, "headers": list(head)})
            await send({"type": "http.response.body", "body": self.body})
        return respond


def validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """A request that does not fit its schema as ``(status, one sentence)``."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    kind, loc = first.get("type", ""), [str(p) for p in first.get("loc", ())[1:]]
    if kind == "json_invalid":
        return 400, f"the body is not valid JSON ({first.get('ctx', {}).get('error', 'decode error')})"
    if not loc and kind == "missing":
        return 422, 'the body is missing: send a JSON object such as {"model": "<id>", "inputs": ["..."]}'
    where = loc[0] + "".join(f"[{p}]" for p in loc[1:]) if loc else "the body"
    if not loc and kind in ("model_attributes_type", "dict_type"):
        message = 'the body must be a JSON object such as {"model": "<id>", "inputs": ["..."]}'
    elif kind == "value_error":
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    elif kind == "extra_forbidden":
        message = f"unknown key {where!r}"
    elif kind == "missing":
        message = f"{where!r} is missing"
    elif kind == "too_short" and loc == ["inputs"]:
        message = "inputs is empty: give at least one sentence"
    else:
        message = f"{where}: {str(first.get('msg', 'invalid')).removeprefix('Value error, ')}"
    more = len(errors) - 1
    return 422, message + (f" (and {more} more problem{'s' * (more > 1)})" if more > 0 else "")


class Dispatcher:
    """The models and their batchers: a request checked against the server's limits and its
    model, then queued for that model's next call."""

    def __init__(self, models: Sequence[ServedModel], config: ServeConfig):
        self.models, self.config = list(models), config
        self.by_id = {m.id: m for m in models}
        self.metrics = Metrics()
        self.batchers = {m.id: Batcher(m.id, m.predict, config.batching, config.batch_wait_ms / 1000,
                                       config.max_batch_tokens, config.max_queue,
                                       observe=self.metrics.model_call(m.id), on_idle=release_memory,
                                       idle_s=config.idle_s) for m in models}
        for m in models:
            self.metrics.add_model(m.id, m.kind, lambda b=self.batchers[m.id]: b.queued)
        self.overloaded = {name: Overloaded(b.full_message) for name, b in self.batchers.items()}
        self.warmed: set[str] = set()
        self._warming: asyncio.Task | None = None

    def admit(self, body: bytes) -> ASGIApp | None:
        """A 503 for a body naming a model whose queue is full (read from the raw JSON, the
        rest unchecked), or None: the request goes on to be parsed and checked."""
        if not any(b.full for b in self.batchers.values()):
            return None
        try:
            parsed = json.loads(body)
        except ValueError:
            return None
        batcher = self.batchers.get(parsed.get("model")) if isinstance(parsed, dict) else None
        if batcher is None or not isinstance(parsed["model"], str):
            return None
        inputs = parsed.get("inputs")
        note(model=parsed["model"], inputs=len(inputs) if isinstance(inputs, list) else 0)
        if not batcher.full:
            return None
        return self.overloaded[parsed["model"]].response(batcher.retry_after())

    @property
    def ready(self) -> bool:
        """Every model loaded and past its warm-up call."""
        return len(self.warmed) == len(self.models)

    def model(self, kind: str, request: schemas.Request) -> ServedModel:
        """The request's model, of the endpoint's ``kind``, with the request within the limits."""
        model = self.by_id.get(request.model)
        if model is None:
            raise RequestError(f"unknown model {request.model!r}; this server has {', '.join(self.by_id)}", 404)
        if model.kind != kind:
            raise RequestError(f"model {model.id!r} is a {model.kind} model: send it to {model.endpoint}", 400)
        if len(request.inputs) > self.config.max_inputs:
            raise RequestError(f"{len(request.inputs)} inputs in one request; at most max_inputs="
                               f"{self.config.max_inputs}", 413)
        return model

    async def answer(self, kind: str, request: schemas.Request) -> dict:
        """The response body of ``request`` to the endpoint of ``kind``."""
        note(model=request.model, inputs=len(request.inputs))
        model = self.model(kind, request)
        self.batchers[model.id].check_room()  # overloaded: refused before any work
        overrides = request.overrides()
        settings = model.settings(overrides)
        texts = model.texts(request.inputs, overrides)  # a multilingual model's sentences carry their language
        if self.config.log_inputs:
            log.info("%s inputs: %r id=%s", model.id, request.inputs, current_id())
        outputs = await self._call(model, texts, settings)
        second = model.next_leg(outputs, overrides)  # a pivot's second leg, on the first's translations
        if second is not None:
            outputs = await self._call(model, second, settings)
        return {"model": model.id, "outputs": outputs}

    async def _call(self, model, texts: list, settings) -> list[dict]:
        """One model call on ``texts`` through the model's batcher, within the request limits."""
        limit = self.config.max_request_tokens
        tokens = sum(model.count_tokens(t) for t in texts)
        if tokens > limit:
            raise RequestError(f"the inputs hold {tokens} pieces; at most max_request_tokens={limit} per request", 413)
        log.debug("%s: %d input(s), %d pieces", model.id, len(texts), tokens)
        timeout = self.config.request_timeout_s
        try:
            outputs = await self.batchers[model.id].submit(texts, settings, tokens, timeout)
        except asyncio.TimeoutError:
            raise RequestError(f"the request took longer than request_timeout_s={timeout:g} s; retry with fewer or "
                               f"shorter inputs", 504) from None
        except (QueueFull, RequestError):  # a full queue; an input the model refuses (422 naming it)
            raise
        except Exception as exc:  # the model call failed: this request fails, the server goes on
            # the message may quote the input: logged only where request text may be
            detail = f": {' '.join(str(exc).split())[:500]}" if self.config.log_inputs else ""
            log.error("%s: a model call failed (%s%s) id=%s", model.id, type(exc).__name__, detail, current_id())
            raise RequestError(f"the model failed on this request ({type(exc).__name__})", 500) from None
        return outputs

    async def warm_up(self) -> None:
        """One call per model on a short input with its default settings; a model whose call
        fails keeps the server unready (logged)."""
        for model in self.models:
            try:
                await self.batchers[model.id].warm_up([model.warm_up_input], model.settings({}))
            except Exception as exc:  # noqa: BLE001 - the server stays up and says it is not ready
                log.error("%s: the warm-up call failed (%s); /ready stays 503", model.id, type(exc).__name__)
                continue
            self.warmed.add(model.id)
        # What is alive now (models, tokenizers, the app) lives as long as the server: out of the
        # collector's sight, a full collection walks only what requests made. Otherwise the first
        # burst of connections sets one off that walks it all, holding the event loop for
        # hundreds of milliseconds (docs/experiments.md).
        gc.collect()
        gc.freeze()
        self.metrics.ready.set(1 if self.ready else 0)
        if self.ready:
            log.info("ready: %d model(s) warmed up", len(self.models))

    @contextlib.asynccontextmanager
    async def running(self, app: FastAPI):
        """The app's lifespan: every batcher's loop runs while the app does, and the models are
        warmed up in the background (``/ready`` says when)."""
        for batcher in self.batchers.values():
            batcher.start()
        if self.config.warm_up:
            self._warming = asyncio.get_running_loop().create_task(self.warm_up())
        else:
            self.warmed = {m.id for m in self.models}
            self.metrics.ready.set(1)
        yield
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)
        for batcher in self.batchers.values():
            await batcher.stop()
            batcher.close()


def create_app(models: Sequence[ServedModel], config: ServeConfig = ServeConfig()) -> FastAPI:
    """The application serving ``models`` (ids unique), each with its own :class:`Batcher`."""
    server = Dispatcher(models, config)
    app = FastAPI(title="transformer-serve", version="1", lifespan=server.running,
                  description="Translation, tagging and classification with the project's checkpoints.")
    app.state.server = server
    # Middleware added last runs first: CORS (answers preflights), then ids, key, metrics and
    # the access line around everything else, then the body guard.
    app.add_middleware(BodyGuard, max_bytes=config.max_body_bytes, admit=server.admit)
    app.add_middleware(Operations, metrics=server.metrics, endpoints=lambda: routes, models=set(server.by_id),
                       api_key=config.api_key, access=config.access_log)
    if config.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                           allow_methods=["GET", "HEAD", "POST"],
                           allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
                           expose_headers=["X-Request-ID", "Retry-After"])
    add_error_handlers(app)
    add_routes(app, server)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    routes = {r.path for r in app.routes if hasattr(r, "methods")}
    return app


def add_routes(app: FastAPI, server: Dispatcher) -> None:
    """The endpoints (see the module docstring)."""

    @app.post("/v1/translate", response_model=schemas.TranslateResponse, response_model_exclude_none=True,
              responses=ERRORS, tags=["models"])
    async def translate(request: schemas.TranslateRequest):
        """Translate each input with a translation model (its decode preset, with overrides); a
        transcription model's inputs are audio files in base64, its translations their transcripts."""
        return await server.answer("translation", request)

    @app.post("/v1/tag", response_model=schemas.TagResponse, response_model_exclude_none=True,
              responses=ERRORS, tags=["models"])
    async def tag(request: schemas.TagRequest):
        """Tag each word of each input (words separated by spaces or tabs)."""
        return await server.answer("tagging", request)

    @app.post("/v1/classify", response_model=schemas.ClassifyResponse, response_model_exclude_none=True,
              responses=ERRORS, tags=["models"])
    async def classify(request: schemas.ClassifyRequest):
        """Label each input with a classification model."""
        return await server.answer("classification", request)

    @app.get("/v1/models", response_model=schemas.ModelsResponse, tags=["server"])
    async def list_models():
        """The models this server answers for, with the request keys each takes."""
        return {"models": [m.info() for m in server.models]}

    @app.head("/health", include_in_schema=False)
    @app.get("/health", response_model=schemas.Health, tags=["server"])
    async def health():
        """Up (a liveness probe), with the requests waiting per model, and each model's calls
        and requests so far."""
        return {"status": "ok", "models": len(server.models),
                "queued": {k: b.queued for k, b in server.batchers.items()},
                "calls": {k: b.stats.batches for k, b in server.batchers.items()},
                "requests": {k: b.stats.requests for k, b in server.batchers.items()}}

    @app.head("/ready", include_in_schema=False)
    @app.get("/ready", response_model=schemas.Ready, tags=["server"], responses={503: {"model": schemas.Ready}})
    async def ready():
        """200 once every model is loaded and warmed up, 503 before (a readiness probe)."""
        body = {"ready": server.ready, "models": {m.id: m.id in server.warmed for m in server.models}}
        return JSONResponse(body, status_code=200 if server.ready else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics():
        """The server's metrics in Prometheus' text format."""
        return Response(server.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.head("/", include_in_schema=False)
    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")


def add_error_handlers(app: FastAPI) -> None:
    """Every error as ``{"error": "<one sentence>"}`` with its status."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return error(*validation_message(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError):
        return error(exc.status, str(exc))

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, exc: QueueFull):
        return error(503, str(exc), {"Retry-After": str(exc.retry_after)})


__all__ = ["BodyGuard", "Dispatcher", "ServeConfig", "create_app", "validation_message"]
