"""transformer-serve under load: throughput and latency with dynamic batching on and off, against
decoding in-process, and a soak of mixed valid and malformed requests.

    pip install -e ".[serve]"
    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/bench_serve.py --ckpt best.ckpt --json bench_serve.json
    python3 scripts/bench_serve.py --ckpt best.ckpt --limit 64 --soak-seconds 5     # a quick look

Greedy decoding of a de→en checkpoint, one torch thread for the model everywhere. The server runs
as a user starts it (``transformer-serve`` in a subprocess on 127.0.0.1, ``threads=1``), once with
``batching=true`` and once with ``batching=false``; each time:

* throughput: ``--clients`` concurrent clients send single sentences of the input file (default:
  Multi30k test_2016_flickr, German side, from the data mirror) until it is done; sentences/s,
  and the latency p50/p99 of those requests;
* latency at one request in flight: ``--latency-requests`` sentences, one after the other (p50),
  each followed by the same sentence decoded directly by the in-process translator, so that the
  two are measured at the same moments (this machine's speed drifts between runs);
* requests per model call under the load (the server's ``/health`` counts).

``--compile`` decodes with ``decode.compile=true`` everywhere: the server compiles at start-up,
and the in-process run decodes the file once before it is timed. ``--ckpt`` may be a CTranslate2
export folder: the server then serves the export, and in-process is its ``CTranslate2Translator``
(batches of ``decode.max_tokens`` source pieces).

In-process, for comparison: the whole file decoded at once by the same translator
(``TranslationTask.translator``, the offline throughput), one sentence at a time (p50, beside
the batching server's requests, as above), and the file in file order in calls of the size the batching server made (its mean requests per call):
what calls of that size can give.
``identical`` counts server outputs equal to the offline ones.

Operations, on a third server as production runs it (batching on, a bounded queue
``--overload-queue``, warmed up: started once ``/ready`` answers 200):

* the soak sends valid and malformed requests (bad JSON, bad UTF-8, control characters, wrong
  types, unknown model, empty list) for ``--soak-seconds`` and counts valid requests that failed
  and malformed ones answered other than 4xx;
* the overload: ``--overload-clients`` clients (one asyncio loop, a connection each, loopback)
  send single sentences for ``--overload-seconds``, far more than the model drains, so that
  the queue fills and the server refuses the rest (503); a refused client waits as its
  ``Retry-After`` says (times 1 to 1.5, at random, so that the refused do not come back all at
  once), or ``--overload-pause-ms`` (a client that ignores it), and sends again. It reports valid requests answered other than 200 or
  503 (goal 0), the 503s' latency p95 (goal at most 50 ms: a refusal waits behind nothing), the
  Retry-After values (1 to 10 s), and the server's ``/metrics`` counts of the run against the
  client's own, status by status;
* the server's resident memory (VmRSS) before the soak, after it, and after the overload once
  its queue has been idle a few seconds (the server trims freed memory then; goal: within 1.10×
  of before).

``--only-operations`` runs just that part (no throughput runs, no in-process decoding).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from transformer.cli.common import load_for_inference
from transformer.data.core.readers import iter_lines
from transformer.decoding.settings import DecodeSettings
from transformer.inference.translator import one_line

# Under the data mirror, where conf/data/multi30k.yaml names it (registry:multi30k/data/task1/raw/...).
DEFAULT_INPUT = "multi30k/data/task1/raw/test_2016_flickr.de.gz"
# uvicorn closes a connection idle this long (its timeout_keep_alive, 5 s): a client reconnects
# rather than write into a closed one.
KEEP_ALIVE_S = 4.0
MALFORMED = [b'{"model": "bench", "inputs": ["Ein Hund', b'{"model": "bench", "inputs": ["\xff\xfe"]}',
             b'{"model": "bench", "inputs": ["Ein\\u0007Hund"]}', b'{"model": "bench", "inputs": [3]}',
             b'{"model": "nope", "inputs": ["Ein Hund."]}', b'{"model": "bench", "inputs": []}', b'[1, 2]']


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``transformer-serve`` in a subprocess, serving ``ckpt`` as model ``bench`` (greedy)."""

    def __init__(self, ckpt: str, batching: bool, threads: int, log: Path, compile: bool = False, **keys):
        self.port = free_port()
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        model = f"{{id:bench,ckpt_path:'{ckpt}'" + (",compile:true}" if compile else "}")
        settings = {"port": self.port, "threads": threads, "batching": str(batching).lower(), "device": "cpu",
                    "access_log": "false", "max_queue": 100000, "max_inputs": 100000, "max_request_tokens": 1000000,
                    "request_timeout_s": 600, "log_level": "warning", **keys}
        args = [sys.executable, "-m", "transformer.cli.serve", f"models=[{model}]",
                *(f"{k}={v}" for k, v in settings.items())]
        self.log = open(log, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log, env=env)
        end = time.monotonic() + 600
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server ended: {log.read_text()[-3000:]}")
            if time.monotonic() > end:
                raise RuntimeError("the server did not answer within 600 s")
            try:
                if self.request("GET", "/ready")[0] == 200:  # loaded and warmed up
                    return
            except OSError:
                pass
            time.sleep(0.3)

    def request(self, method: str, path: str, body: bytes | None = None, conn=None) -> tuple[int, bytes]:
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request(method, path, body=body, headers={"content-type": "application/json"} if body else {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            if own:
                conn.close()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def metrics(self) -> tuple[dict[str, float], dict[float, float]]:
        """``/v1/translate`` requests of model ``bench`` answered so far, by status, and the
        server's histogram of its 503s' seconds (upper bound -> count)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self.request("GET", "/metrics")[1].decode()
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples
                   if s.labels.get("endpoint") == "/v1/translate" and s.labels.get("model") == "bench"]
        counts = {s.labels["status"]: s.value for s in samples if s.name == "transformer_serve_requests_total"}
        refused = {float(s.labels["le"]): s.value for s in samples
                   if s.name == "transformer_serve_request_seconds_bucket" and s.labels["status"] == "503"}
        return counts, refused

    def idle(self, settle: float) -> None:
        """Wait until nothing is queued, then ``settle`` seconds more (the server trims memory
        once its queue has been idle a second)."""
        while json.loads(self.request("GET", "/health")[1])["queued"]["bench"]:
            time.sleep(0.1)
        time.sleep(settle)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


def translate_body(sentence: str) -> bytes:
    return json.dumps({"model": "bench", "inputs": [sentence]}).encode()


def one_request(server: Server, conn, sentence: str) -> tuple[float, str]:
    start = time.perf_counter()
    status, body = server.request("POST", "/v1/translate", translate_body(sentence), conn)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
    return time.perf_counter() - start, json.loads(body)["outputs"][0]["translation"]


def load(server: Server, sentences: list[str], clients: int) -> dict:
    """``clients`` threads, each with its own connection, send the sentences one a request."""
    todo = iter(enumerate(sentences))
    lock = threading.Lock()
    latencies, outputs = [], [""] * len(sentences)

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        while True:
            with lock:
                item = next(todo, None)
            if item is None:
                conn.close()
                return
            seconds, outputs[item[0]] = one_request(server, conn, item[1])
            latencies.append(seconds)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(client) for _ in range(clients)]:
            f.result()
    wall = time.perf_counter() - start
    return {"sentences_per_s": len(sentences) / wall, "p50_ms": percentile(latencies, 50) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000, "outputs": outputs}


def soak(server: Server, sentences: list[str], seconds: float, clients: int = 8) -> dict:
    """Mixed valid and malformed requests for ``seconds``: what failed, and memory."""
    counts = {"valid": 0, "valid_failed": 0, "malformed": 0, "malformed_not_4xx": 0}
    lock = threading.Lock()
    rss_start, end = server.rss_mb(), time.monotonic() + seconds

    def client(seed: int):
        rng, conn = random.Random(seed), http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        while time.monotonic() < end:
            valid = rng.random() < 0.5
            body = translate_body(rng.choice(sentences)) if valid else rng.choice(MALFORMED)
            try:
                status = server.request("POST", "/v1/translate", body, conn)[0]
            except (OSError, http.client.HTTPException):
                status = 0
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
            with lock:
                kind = "valid" if valid else "malformed"
                counts[kind] += 1
                bad = status != 200 if valid else not 400 <= status < 500
                counts[f"{kind}_failed" if valid else "malformed_not_4xx"] += bad
        conn.close()

    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(client, i) for i in range(clients)]:
            f.result()
    return {**counts, "seconds": seconds, "rss_start_mb": rss_start, "rss_end_mb": server.rss_mb(),
            "alive": server.proc.poll() is None}


async def _post(reader, writer, body: bytes) -> tuple[int, dict]:
    """One HTTP/1.1 POST /v1/translate on an open connection: the status and the headers."""
    writer.write(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    await reader.readexactly(int(headers.get("content-length", 0)))
    return int(head[0].split()[1]), headers


def overload(server: Server, sentences: list[str], clients: int, seconds: float, pause_s: float | None) -> dict:
    """``clients`` connections sending sentences as fast as they are answered for ``seconds``
    (a refused one waits its Retry-After, or ``pause_s``): statuses, latencies of 200s and
    503s, Retry-After."""
    tally: dict[str, int] = {}
    errors: dict[str, int] = {}  # exceptions behind status 0 (no answer)
    ok_latency, refused_latency, retry_after, refused_steady = [], [], [], []
    began = {"at": time.perf_counter()}  # set again as the clients start

    async def send(conn, body: bytes) -> tuple[int, dict]:
        try:
            return await asyncio.wait_for(_post(*conn, body), 120)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            conn[1].close()
            return 0, {}

    async def client(seed: int, end: float):
        rng, conn, idle_since = random.Random(seed), None, None
        while time.monotonic() < end:
            if conn is not None and idle_since is not None and time.monotonic() - idle_since > KEEP_ALIVE_S:
                conn[1].close()  # the server has closed it by now, as HTTP clients expect (keep-alive)
                conn = None
            if conn is None:
                conn = await asyncio.open_connection("127.0.0.1", server.port)
            start = time.perf_counter()
            status, headers = await send(conn, translate_body(rng.choice(sentences)))
            if status == 0:
                conn = None
            idle_since = time.monotonic()
            took = time.perf_counter() - start
            tally[str(status)] = tally.get(str(status), 0) + 1
            if status == 200:
                ok_latency.append(took)
            elif status == 503:
                refused_latency.append(took)
                refused_steady.extend([took] if start - began["at"] >= 1.0 else [])
                retry_after.append(int(headers.get("retry-after", -1)))
                wait = pause_s if pause_s is not None else max(retry_after[-1], 0) * rng.uniform(1.0, 1.5)
                await asyncio.sleep(min(wait, max(0.0, end - time.monotonic())))
        if conn is not None:
            conn[1].close()

    async def run():
        end, began["at"] = time.monotonic() + seconds, time.perf_counter()
        await asyncio.gather(*(client(i, end) for i in range(clients)))

    before, refused_before = server.metrics()
    start = time.perf_counter()
    asyncio.run(run())
    wall = time.perf_counter() - start
    after, refused_after = server.metrics()
    counted = {k: int(after.get(k, 0) - before.get(k, 0)) for k in sorted(set(after) | set(before))}
    counted = {k: v for k, v in counted.items() if v}
    buckets = {le: n - refused_before.get(le, 0) for le, n in sorted(refused_after.items())}
    total = buckets.get(float("inf"), 0)
    # the server's own p95 of its 503s: the first histogram bucket holding 95% of them
    server_p95 = next((le for le, n in buckets.items() if total and n >= 0.95 * total), None)
    failed = sum(n for status, n in tally.items() if status not in ("200", "503"))
    return {"clients": clients, "seconds": wall, "errors": errors,
            "pause": "Retry-After" if pause_s is None else pause_s, "statuses": dict(sorted(tally.items())),
            "failed_valid": failed,
            "answered_per_s": tally.get("200", 0) / wall,
            "ok_p50_ms": percentile(ok_latency, 50) * 1000, "ok_p95_ms": percentile(ok_latency, 95) * 1000,
            "refused_p50_ms": percentile(refused_latency, 50) * 1000,
            "refused_p95_ms": percentile(refused_latency, 95) * 1000,
            "refused_p95_ms_after_1s": percentile(refused_steady, 95) * 1000,
            "refused_server_p95_ms_at_most": None if server_p95 is None else server_p95 * 1000,
            "retry_after_min": min(retry_after, default=None), "retry_after_max": max(retry_after, default=None),
            "metrics_counts": counted, "metrics_match": counted == {k: v for k, v in tally.items() if k != "0"},
            "alive": server.proc.poll() is None}


def operations(args, sentences: list[str], log: Path) -> dict:
    """The soak and the overload on one server with a bounded queue, with its memory between."""
    server = Server(args.ckpt, True, args.threads, log, args.compile, max_queue=args.overload_queue,
                    max_inputs=64, max_request_tokens=2048, request_timeout_s=120)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        for s in sentences[:8]:
            one_request(server, conn, s)  # warm-up
        conn.close()
        result = {"max_queue": args.overload_queue, "rss_before_mb": server.rss_mb()}
        if args.soak_seconds > 0:
            result["soak"] = soak(server, sentences, args.soak_seconds)
        server.idle(3.0)
        result["rss_after_soak_mb"] = server.rss_mb()
        if args.overload_seconds > 0:
            pause = None if args.overload_pause_ms is None else args.overload_pause_ms / 1000
            result["overload"] = overload(server, sentences, args.overload_clients, args.overload_seconds, pause)
            result["rss_overload_end_mb"] = server.rss_mb()
            server.idle(3.0)
            result["rss_after_overload_mb"] = server.rss_mb()
            result["rss_ratio"] = result["rss_after_overload_mb"] / result["rss_before_mb"]
        return result
    finally:
        server.stop()


def operations_table(ops: dict) -> str:
    lines = []
    if "soak" in ops:
        s = ops["soak"]
        lines.append(f"soak {s['seconds']:g} s: {s['valid']} valid requests, {s['valid_failed']} failed; "
                     f"{s['malformed']} malformed, {s['malformed_not_4xx']} answered other than 4xx; server "
                     f"{'alive' if s['alive'] else 'DEAD'}")
    if "overload" in ops:
        o = ops["overload"]
        pause = "their Retry-After" if o["pause"] == "Retry-After" else f"{o['pause'] * 1000:g} ms"
        lines += [f"overload: {o['clients']} clients for {o['seconds']:.1f} s (refused ones wait {pause}), "
                  f"max_queue={ops['max_queue']}: "
                  f"statuses {o['statuses']}; {o['answered_per_s']:.1f} answered/s",
                  f"  failed valid requests (not 200/503): {o['failed_valid']} (goal 0){' ' if o['errors'] else ''}"
                  f"{o['errors'] or ''}",
                  f"  503 latency p50 {o['refused_p50_ms']:.1f} ms, p95 {o['refused_p95_ms']:.1f} ms (goal <= 50; "
                  f"after the first second: p95 {o['refused_p95_ms_after_1s']:.1f} ms; "
                  f"in the server, from its histogram: p95 <= {o['refused_server_p95_ms_at_most']} ms); "
                  f"200 latency p50 {o['ok_p50_ms']:.0f} ms, p95 {o['ok_p95_ms']:.0f} ms",
                  f"  Retry-After {o['retry_after_min']} to {o['retry_after_max']} s (goal within 1 to 10)",
                  f"  /metrics counted {o['metrics_counts']}: "
                  f"{'equal to' if o['metrics_match'] else 'DIFFERENT from'} the client's; server "
                  f"{'alive' if o['alive'] else 'DEAD'}"]
    rss = [f"{ops['rss_before_mb']:.0f} MB before", f"{ops['rss_after_soak_mb']:.0f} after the soak"]
    if "rss_after_overload_mb" in ops:
        rss += [f"{ops['rss_overload_end_mb']:.0f} at the overload's end",
                f"{ops['rss_after_overload_mb']:.0f} idle after it ({ops['rss_ratio']:.2f}x before; goal <= 1.10)"]
    lines.append("resident memory: " + ", ".join(rss))
    return "\n".join(lines)


class ExportTranslator:
    """A CTranslate2 export decoding in-process as the server decodes it: greedy under the
    default length rule, batches of ``decode.max_tokens`` source pieces (``translate`` answers
    as ``Translator.translate``: a one-hypothesis list per sentence)."""

    def __init__(self, model_dir: str, threads: int):
        from transformer.export.ctranslate2 import CTranslate2Translator

        settings = DecodeSettings()  # greedy, as the server's default
        self.translator = CTranslate2Translator(model_dir, threads=threads, max_len_a=settings.max_len_a,
                                                max_len_b=settings.max_len_b,
                                                max_batch_size=settings.max_tokens, batch_type="tokens")

    def translate(self, sentences: list[str]) -> list[list[tuple[str, float]]]:
        return [[(one_line(text), score) for text, score in nbest]
                for nbest in self.translator.translate_nbest(list(sentences))]


def offline_translator(ckpt: str, compile: bool = False, threads: int = 1):
    """The in-process translator the server is measured against: the checkpoint's, or a
    CTranslate2 export's (``--ckpt`` an export folder)."""
    from transformer.export.ctranslate2 import is_export_dir

    if is_export_dir(ckpt):
        if compile:
            raise SystemExit("error: --compile applies to a checkpoint, not to a CTranslate2 export")
        return ExportTranslator(ckpt, threads)
    task, device = load_for_inference(ckpt, "cpu")
    return task.translator(DecodeSettings(compile=compile), device=device)


def in_calls_of(translator, sentences: list[str], size: int) -> float:
    """Sentences/s decoding ``sentences`` in file order, ``size`` at a time."""
    start = time.perf_counter()
    for i in range(0, len(sentences), size):
        translator.translate(sentences[i: i + size])
    return len(sentences) / (time.perf_counter() - start)


def timed_call(translator, sentence: str) -> float:
    """Seconds to decode one sentence in-process."""
    start = time.perf_counter()
    translator.translate([sentence])
    return time.perf_counter() - start


def offline(translator, sentences: list[str], compile: bool = False) -> dict:
    """The same greedy decode in-process, the whole file at once."""
    translator.translate(sentences if compile else sentences[:8])  # warm-up (compiling: every shape)
    start = time.perf_counter()
    outputs = [hyps[0][0] for hyps in translator.translate(sentences)]
    wall = time.perf_counter() - start
    return {"sentences_per_s": len(sentences) / wall, "outputs": outputs}


def bench_server(args, batching: bool, sentences: list[str], sample: list[str], log: Path, translator) -> dict:
    server = Server(args.ckpt, batching, args.threads, log, args.compile)
    try:
        for s in sample:  # in-process warm-up: a compiled step compiles its batch-1 shapes here,
            timed_call(translator, s)  # before the connection opens (an idle one is closed after 5 s)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        for s in sample[:4]:
            one_request(server, conn, s)  # warm-up
        single, direct = [], []
        for s in sample:  # each request, then the same sentence in-process: the same moments
            single.append(one_request(server, conn, s)[0])
            direct.append(timed_call(translator, s))
        conn.close()
        before = json.loads(server.request("GET", "/health")[1])
        result = load(server, sentences, args.clients)
        after = json.loads(server.request("GET", "/health")[1])
        calls = after["calls"]["bench"] - before["calls"]["bench"]
        result["requests_per_call"] = (after["requests"]["bench"] - before["requests"]["bench"]) / max(calls, 1)
        result["single_p50_ms"] = percentile(single, 50) * 1000
        result["direct_p50_ms"] = percentile(direct, 50) * 1000
        return result
    finally:
        server.stop()


def table(results: dict) -> str:
    on, off, local = results["batching_on"], results["batching_off"], results["offline"]
    rows = [("throughput, %d clients (sentences/s)" % results["clients"], on["sentences_per_s"],
             off["sentences_per_s"], local["sentences_per_s"]),
            ("latency p50, 1 in flight (ms)", on["single_p50_ms"], off["single_p50_ms"], local["single_p50_ms"]),
            ("the same ÷ in-process at the same moments", f"{on['single_p50_ms'] / on['direct_p50_ms']:.2f}",
             f"{off['single_p50_ms'] / off['direct_p50_ms']:.2f}", None),
            ("latency p50, %d clients (ms)" % results["clients"], on["p50_ms"], off["p50_ms"], None),
            ("latency p99, %d clients (ms)" % results["clients"], on["p99_ms"], off["p99_ms"], None),
            ("requests per model call, %d clients" % results["clients"], on["requests_per_call"],
             off["requests_per_call"], None),
            ("outputs identical to offline", on["identical"], off["identical"], None)]
    lines = ["| measure | batching on | batching off | in-process |", "|---|---:|---:|---:|"]
    for name, *cells in rows:
        lines.append(f"| {name} | " + " | ".join("" if c is None else f"{c:.1f}" if isinstance(c, float) else str(c)
                                                 for c in cells) + " |")
    lines.append(f"\nin-process in calls of {local['server_call_size']} sentences (the server's mean), in file "
                 f"order: {local['server_call_sentences_per_s']:.1f} sentences/s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a translation checkpoint or a CTranslate2 export folder")
    parser.add_argument("--input", default=None, help="sentences, one a line (.gz too); default: Multi30k "
                                                      "test_2016_flickr German, from $TRANSFORMER_DATA_MIRROR")
    parser.add_argument("--limit", type=int, default=None, help="first N sentences only")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--latency-requests", type=int, default=50, help="sentences sent one at a time")
    parser.add_argument("--soak-seconds", type=float, default=60.0)
    parser.add_argument("--overload-clients", type=int, default=500)
    parser.add_argument("--overload-seconds", type=float, default=20.0)
    parser.add_argument("--overload-queue", type=int, default=64, help="the server's max_queue in the overload")
    parser.add_argument("--overload-pause-ms", type=float, default=None,
                        help="a refused client's pause (default: its Retry-After)")
    parser.add_argument("--only-operations", action="store_true", help="only the soak, overload and memory run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the model (server and in-process)")
    parser.add_argument("--compile", action="store_true", help="decode.compile=true in the server and in-process")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    path = args.input or str(Path(os.environ.get("TRANSFORMER_DATA_MIRROR", "../shared/datasets")) / DEFAULT_INPUT)
    sentences = [text.strip() for _, text in iter_lines(path) if text.strip()][: args.limit]
    sample = sentences[: args.latency_requests]
    torch.set_num_threads(args.threads)
    results: dict = {"ckpt": args.ckpt, "input": path, "sentences": len(sentences), "clients": args.clients,
                     "threads": args.threads, "decode": "greedy", "compile": args.compile}
    if args.only_operations:
        with tempfile.TemporaryDirectory() as tmp:
            results["operations"] = operations(args, sentences, Path(tmp) / "operations.log")
        print(f"{len(sentences)} sentences from {path}, greedy, {args.threads} thread(s)\n")
        print(operations_table(results["operations"]))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        return results
    translator = offline_translator(args.ckpt, args.compile, args.threads)
    results["offline"] = offline(translator, sentences, args.compile)
    with tempfile.TemporaryDirectory() as tmp:
        for batching in (True, False):
            key = "batching_on" if batching else "batching_off"
            results[key] = bench_server(args, batching, sentences, sample, Path(tmp) / f"{key}.log", translator)
            outputs = results[key].pop("outputs")
            results[key]["identical"] = sum(a == b for a, b in zip(outputs, results["offline"]["outputs"]))
        results["operations"] = operations(args, sentences, Path(tmp) / "operations.log")
    results["offline"].pop("outputs")
    results["offline"]["single_p50_ms"] = results["batching_on"]["direct_p50_ms"]
    size = max(1, round(results["batching_on"]["requests_per_call"]))
    results["offline"]["server_call_size"] = size
    results["offline"]["server_call_sentences_per_s"] = in_calls_of(translator, sentences, size)
    print(f"{len(sentences)} sentences from {path}, greedy{', compiled' if args.compile else ''}, "
          f"{args.threads} thread(s)\n")
    print(table(results))
    print("\n" + operations_table(results["operations"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
