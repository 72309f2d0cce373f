"""Dynamic batching: requests to one model that arrive close together are decoded as one call.

A request joins its model's queue and waits. The model's loop (on the event loop) takes the
oldest request and waits for company: until as many requests have arrived since the last call
ended as that call answered (its clients coming back), or ``wait_s`` after the oldest request's
arrival or the end of the last call, whichever is later, or until the queued pieces fill
``max_batch_tokens``. It then takes the queued requests whose settings equal the first one's, in
arrival order, while their pieces fit the budget; the others keep their place for the next call.
The model runs on its own worker thread, one call at a time, so the event loop keeps accepting
requests while it computes (Clipper's and Triton's adaptive batching work the same way). The
wait after a call is what keeps busy clients together: the answers it has just sent bring their
senders' next requests within a few milliseconds, and without it those would miss the next call
and form one of their own, so that the clients split into groups taking turns, each call half as
large. A lone client is never held back: its next request is all the last call answered.

``batching=False`` takes one request per call: the baseline batching is measured against.
A full queue refuses a request at once, before it is queued (:class:`QueueFull`, an HTTP 503):
its ``Retry-After`` is the sentences waiting over the rate the model has been draining them
(an exponential moving average of sentences per second of model call), 1 to 10 s. A request
that waits past its time limit is dropped from the queue, or its result discarded when it was
already running (``asyncio.TimeoutError``, an HTTP 504). When the queue has stayed empty for
``idle_s`` after work, ``on_idle`` runs on the worker thread (the server gives freed memory
back to the system there).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

# predict(texts, settings) -> one output per text
Predict = Callable[[Sequence[str], Hashable], list]
# Retry-After bounds (seconds): at least a second, and never so long a client gives up on a
# server that drains in moments once the burst is over.
RETRY_MIN, RETRY_MAX = 1, 10
# Weight of the newest call in the drain rate's moving average.
RATE_SMOOTHING = 0.2


class QueueFull(RuntimeError):
    """The model's queue holds ``max_queue`` requests; ``retry_after`` (whole seconds) is
    about how long the queue takes to drain at the recent pace."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Job:
    """One request waiting for its outputs: its texts, their settings key and piece count."""

    texts: Sequence[str]
    settings: Hashable
    tokens: int
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)
    waiting: bool = False  # counted in the queue's length (queued, not yet taken nor done)


@dataclass
class BatchStats:
    """Counts since start: model calls, requests and texts through them, the largest call (in
    requests), and the seconds of the last call."""

    batches: int = 0
    requests: int = 0
    texts: int = 0
    largest: int = 0
    last_seconds: float = 0.0
    rate: float = 0.0  # sentences per second of model call, moving average (0: none measured)


class Batcher:
    """The queue and worker of one model (see the module docstring).

    Args:
        name: the model's id (names the worker thread).
        predict: the model call, run on the worker thread.
        batching: False takes one request per call.
        wait_s: how long after the oldest request's arrival (or the last call's end) to wait
            at most for the last call's clients to come back.
        max_batch_tokens: pieces one call takes (a request larger than it goes alone).
        max_queue: requests waiting, past which new ones are refused.
        observe: called after each model call with its sentences and seconds (metrics).
        on_idle: run on the worker thread once the queue has been empty ``idle_s`` after work.
    """

    def __init__(self, name: str, predict: Predict, batching: bool = True, wait_s: float = 0.005,
                 max_batch_tokens: int = 4096, max_queue: int = 256,
                 observe: Callable[[int, float], None] | None = None,
                 on_idle: Callable[[], object] | None = None, idle_s: float = 1.0):
        self.name, self.predict = name, predict
        self.batching, self.wait_s = batching, wait_s
        self.max_batch_tokens, self.max_queue = max_batch_tokens, max_queue
        self.observe, self.on_idle, self.idle_s = observe, on_idle, idle_s
        self.idle_runs = 0  # times on_idle ran
        self._worked = False  # a call ran since on_idle last did
        self.stats = BatchStats()
        self._queue: deque[Job] = deque()
        # Requests and sentences waiting, kept as counts: a refusal under overload reads them
        # and must not walk a queue of max_queue requests each time.
        self._waiting = self._waiting_texts = 0
        self._running: list[Job] = []
        self._last_end = float("-inf")  # when the last model call returned (time.monotonic)
        self._last_size = 0  # requests the last model call answered
        self._executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    @property
    def queued(self) -> int:
        """Requests waiting (not yet in a model call)."""
        return self._waiting

    @property
    def full(self) -> bool:
        """Whether the queue holds ``max_queue`` requests (a new one is refused)."""
        return self._waiting >= self.max_queue

    def start(self) -> None:
        """Start the loop on the running event loop (again after a loop change, as tests do)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._task is not None and not self._task.done():
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"model-{self.name}")
        self._loop, self._wake = loop, asyncio.Event()
        self._task = loop.create_task(self._run(), name=f"batcher-{self.name}")

    async def stop(self) -> None:
        """Stop the loop; waiting requests are cancelled, a running call finishes on its thread."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for job in [*self._queue, *self._running]:
            self._leave(job)
            job.future.cancel()
        self._queue.clear()

    def close(self) -> None:
        """Let the worker thread end (after its running call); a later start makes a new one."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def check_room(self) -> None:
        """:class:`QueueFull` when the queue holds ``max_queue`` requests: a refusal costs no
        wait and no work (the request is not read further)."""
        if self.full:
            raise QueueFull(self.full_message, self.retry_after())

    @property
    def full_message(self) -> str:
        """What a refused request is told."""
        return f"model '{self.name}' has {self.max_queue} requests waiting (max_queue); retry later"

    async def submit(self, texts: Sequence[str], settings: Hashable, tokens: int, timeout: float) -> list:
        """The outputs of ``texts``, decoded in some batch; :class:`QueueFull` when the queue is
        full, ``asyncio.TimeoutError`` after ``timeout`` seconds."""
        self.start()
        self.check_room()
        job = Job(texts, settings, tokens, self._loop.create_future())
        self._enqueue(job)
        self._wake.set()
        return await asyncio.wait_for(job.future, timeout)  # a timeout cancels the future: the loop skips it

    async def warm_up(self, texts: Sequence[str], settings: Hashable) -> None:
        """One model call outside the queue and the counts (the first call pays for lazy set-up:
        allocator pools, compiled graphs), on the worker thread so requests stay answered."""
        self.start()
        await self._loop.run_in_executor(self._executor, self.predict, list(texts), settings)

    def retry_after(self) -> int:
        """Seconds until the waiting sentences are drained at the measured rate, 1 to 10."""
        if self.stats.rate <= 0:
            return RETRY_MIN
        return min(RETRY_MAX, max(RETRY_MIN, math.ceil(self._waiting_texts / self.stats.rate)))

    def _enqueue(self, job: Job) -> None:
        """Queue ``job``, counted until it is taken into a call or its future is done (a timeout)."""
        job.waiting = True
        self._waiting += 1
        self._waiting_texts += len(job.texts)
        self._queue.append(job)
        job.future.add_done_callback(lambda _: self._leave(job))

    def _leave(self, job: Job) -> None:
        if job.waiting:
            job.waiting = False
            self._waiting -= 1
            self._waiting_texts -= len(job.texts)

    async def _run(self) -> None:
        while True:
            if self._worked and self.on_idle is not None:
                try:  # idle after work: on_idle once the queue stays empty idle_s
                    await asyncio.wait_for(self._wake.wait(), self.idle_s)
                except asyncio.TimeoutError:
                    await self._loop.run_in_executor(self._executor, self.on_idle)
                    self._worked = False
                    self.idle_runs += 1
                    continue
            else:
                await self._wake.wait()
            self._wake.clear()
            while self._queue:
                await self._gather_time()
                jobs = self._take()
                if jobs:
                    await self._call(jobs)

    async def _gather_time(self) -> None:
        """Wait until as many requests arrived since the last call ended as it answered, or
        ``wait_s`` after the oldest request arrived or the last call ended (whichever is later),
        or the queued pieces fill the budget; whichever comes first."""
        if not self.batching or not self._queue:
            return
        deadline = max(self._queue[0].arrived, self._last_end) + self.wait_s
        while True:
            back = sum(job.arrived >= self._last_end for job in self._queue)
            remaining = deadline - time.monotonic()
            if (back >= self._last_size or remaining <= 0
                    or sum(job.tokens for job in self._queue) >= self.max_batch_tokens):
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _take(self) -> list[Job]:
        """The next call's requests: the oldest live one, then (batching) each later one with
        equal settings while the pieces fit the budget. Timed-out requests leave the queue."""
        while self._queue and self._queue[0].future.done():
            self._queue.popleft()
        if not self._queue:
            return []
        first = self._queue.popleft()
        jobs, tokens, kept = [first], first.tokens, deque()
        while self.batching and self._queue:
            job = self._queue.popleft()
            if job.future.done():
                continue
            if job.settings == first.settings and tokens + job.tokens <= self.max_batch_tokens:
                jobs.append(job)
                tokens += job.tokens
            else:
                kept.append(job)
        self._queue = kept + self._queue
        for job in jobs:
            self._leave(job)
        return jobs

    async def _call(self, jobs: list[Job]) -> None:
        """One model call on the worker thread; each request gets its own slice of the outputs
        (or the call's exception)."""
        texts = [t for job in jobs for t in job.texts]
        start = time.monotonic()
        self._running = jobs
        try:
            outputs = await self._loop.run_in_executor(self._executor, self.predict, texts, jobs[0].settings)
        except Exception as exc:  # a failed call fails its requests, never the loop
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(exc)
            return
        finally:
            self._running = []
            self._last_end, self._last_size = time.monotonic(), len(jobs)
            self.stats.last_seconds = self._last_end - start
            self._worked = True
        seconds = self.stats.last_seconds
        if seconds > 0:
            rate = len(texts) / seconds
            self.stats.rate = rate if self.stats.rate <= 0 else (
                RATE_SMOOTHING * rate + (1 - RATE_SMOOTHING) * self.stats.rate)
        if self.observe is not None:
            self.observe(len(texts), seconds)
        self.stats.batches += 1
        self.stats.requests += len(jobs)
        self.stats.texts += len(texts)
        self.stats.largest = max(self.stats.largest, len(jobs))
        offset = 0
        for job in jobs:
            if not job.future.done():
                job.future.set_result(outputs[offset: offset + len(job.texts)])
            offset += len(job.texts)


__all__ = ["BatchStats", "Batcher", "Job", "QueueFull", "RETRY_MAX", "RETRY_MIN"]
