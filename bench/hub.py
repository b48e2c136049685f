"""Benchmark the hub end to end, each figure beside a baseline measured in the same run.

Run ``.venv/bin/python bench/hub.py`` from the repository root (``--quick`` for a smaller,
faster run; ``--only NAME`` to run some figures; ``--pause-before NAME`` to attach a
profiler). It starts, all on 127.0.0.1:

* an embedded ``redis-server`` (:class:`hub.store.embedded_redis.EmbeddedRedis`) in a temp dir;
* the hub, ``python -m rshub serve --redis-url ...``, in its own process;
* ``bare``: a bare aiohttp process answering 204 to publishes and broadcasting pre-built
  WebSocket messages (the baselines for figures 1 and 3);
* ``wsclients``: one process holding the 100 WebSocket clients (so the publisher in this
  process never shares an event loop with the receiving side);
* ``callbacks``: one aiohttp process with 100 WebSub callback paths ``/cb/{i}``.

This process is the load generator (aiohttp ``ClientSession``) and the conductor; the helper
processes are steered through small ``/ctl/...`` HTTP endpoints. Timestamps are
``time.perf_counter_ns()`` (``CLOCK_MONOTONIC``, shared by every process on the machine): a
publish embeds its send time in each ``loc`` (``http://bench/x/<i>?t=<ns>``) and receivers
compute latency from it.

``--loop uvloop|asyncio`` (default uvloop) picks the event loop of the hub
(``RSHUB_UVLOOP=true|false``), of every helper process and of this conductor, so each
baseline runs on the same kind of loop as the hub it is compared with.

``--placement apart|batch|shared`` (default apart) keeps the helpers off the servers' core:
the hub and the bare baselines on the first CPU, every helper and this conductor on the
others (:class:`Placement`), so the receivers, which in a deployment are other machines,
do not preempt the hub they measure; the mode is printed in the first line. ``--hub-src
DIR`` runs ``rshub serve`` from another checkout (``python -m`` imports from its working
directory, before ``PYTHONPATH``).

Figures (targets from the performance issue, each measured in this run):

1. single-change publishes/s at concurrency 32, vs the bare 204 app (ratio >= 0.8);
2. changes/s ingested in 1,000-change notifications at concurrency 4, vs pipelined
   ``XADD`` of the same 1,000 JSON payloads on the same Redis from as many client processes
   (hiredis-packed, one write per pipeline; ratio >= 1.5);
3. WebSocket fan-out to 100 clients: events/s delivered, vs the bare broadcast server,
   which writes one pre-encoded frame per batch to every client's transport and is timed
   from when its frames exist (ratio >= 0.5); p50/p99 publish-to-receive latency at a
   steady 1,000 changes/s (p99 <= 10 ms);
4. WebSub fan-out to 100 callbacks: changes/s delivered summed over callbacks (>= 3,000/s);
   p50/p99 publish-to-callback latency at 20 changes/s (p50 <= 3 ms, p99 <= 10 ms), the
   publishes written from raw sockets and stamped right before (``--websub-publisher``),
   beside a bare fan-out (this conductor, placed where the hub runs, writes each change's POST to
   the same 100 callbacks at the same pace at once: the floor of the receiver and machine);
5. ``delivery-cpu``: hub CPU seconds (``/proc``) per WebSub POST, 100 callbacks subscribed
   with ``hub.secret`` (signed), 4-change publishes paced so that each POST carries one;
   beside an aiohttp ``ClientSession`` in this process POSTing the same signed body to the
   same callbacks as often, measured with this process's own CPU time (<= 0.15 ms);
6. ``idle`` (runs last): publish-to-receive p50/p99 of the 100 active WebSocket clients at
   1,000 changes/s and the publish round-trip p99 as the publisher sees it, first with no
   idle clients (the baseline), then with 10,000 idle WebSockets (``--role idle``, a helper
   process of its own) connected to another topic (active p99 <= 10 ms, publish p99
   <= 50 ms).

A figure whose events did not all arrive fails whatever its value (``INCOMPLETE``), and so
does the run (exit status 2).

``--repeat N`` runs the chosen figures N times, each on a fresh hub over a flushed Redis,
and ends with every figure's value per run and in how many runs its target was met.

Every helper process is killed at the end, also on error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import math
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent
sys.path.insert(0, str(ROOT))

from bench import rawload  # noqa: E402
from bench.render import CODES, append_record, commit_of, this_machine, utc_now  # noqa: E402
from hub.serve.workers import worker_count  # noqa: E402
from hub.store.embedded_redis import EmbeddedRedis  # noqa: E402
from tests.support import free_port  # noqa: E402

HOST = "127.0.0.1"
XML_HEADERS = {"Content-Type": "application/xml"}
LASTMOD = "2024-01-01T00:00:00Z"
NS_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/">'
    '<rs:md capability="changelist-notification"/>'
)
_T_STR = re.compile(r"\?t=(\d+)")
_T_BYTES = re.compile(rb"\?t=(\d+)")
#: How an event starts in the hub's (and the bare broadcaster's) WebSocket JSON.
_EVENT_START = '{"id":'


@dataclass(frozen=True)
class Sizes:
    """How much work each figure does (``--quick`` shrinks it)."""

    publish_seconds: float = 5.0
    publish_warmup: int = 300
    publish_concurrency: int = 32
    fragments: int = 100
    fragment_concurrency: int = 4
    ws_clients: int = 100
    ws_changes: int = 20_000
    ws_fragment: int = 100
    ws_latency_seconds: float = 10.0
    websub_callbacks: int = 100
    websub_changes: int = 10_000
    websub_latency_seconds: float = 10.0
    #: Signed 4-change publishes for ``delivery-cpu``, and how many per second.
    cpu_publishes: int = 500
    cpu_rate: float = 20.0
    idle_clients: int = 10_000
    idle_latency_seconds: float = 10.0


QUICK = Sizes(
    publish_seconds=2.0,
    publish_warmup=200,
    fragments=30,
    ws_changes=5_000,
    ws_latency_seconds=3.0,
    websub_changes=5_000,
    websub_latency_seconds=3.0,
    cpu_publishes=100,
    idle_latency_seconds=3.0,
)

LOOPS = ("uvloop", "asyncio")


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A fresh event loop of ``kind`` (``uvloop`` or ``asyncio``)."""
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def uvloop_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None


def raise_nofile() -> int:
    """Raise the ``RLIMIT_NOFILE`` soft limit to the hard one (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- payloads -----------------------------------------------------------------------------


def url_entry(i: int, t_ns: int) -> str:
    """One ``<url>``: distinct loc carrying its send time, full ``rs:md``."""
    return (
        f"<url><loc>http://bench/x/{i}?t={t_ns}</loc><lastmod>{LASTMOD}</lastmod>"
        f'<rs:md change="updated" hash="md5:{i % 65536:032x}" length="{1000 + i % 1000}" '
        f'type="text/html"/></url>'
    )


def notification(first: int, count: int, t_ns: int = 0) -> bytes:
    """A ``changelist-notification`` with ``count`` changes."""
    body = "".join(url_entry(first + k, t_ns) for k in range(count))
    return (NS_HEAD + body + "</urlset>").encode()


def client_event(event_id: str, topic: str, i: int, t_ns: int) -> bytes:
    """The JSON event the hub would stream for ``url_entry(i, t_ns)``."""
    return orjson.dumps(
        {
            "id": event_id,
            "topic": topic,
            "loc": f"http://bench/x/{i}?t={t_ns}",
            "lastmod": LASTMOD,
            "change": "updated",
            "hash": f"md5:{i % 65536:032x}",
            "length": 1000 + i % 1000,
            "type": "text/html",
        }
    )


def stored_payloads(body: bytes) -> list[bytes]:
    """The JSON the hub stores for each change of ``body`` (its own code path)."""
    from hub.core.events import change_from_entry
    from resourcesync import parse

    doc = parse(body)
    return [change_from_entry(entry, i).event for i, entry in enumerate(doc.entries)]


def percentile(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return float(ordered[index])


class _Answers(asyncio.Protocol):
    """A kept-alive connection of :func:`bare_fanout`: the callbacks' 204s are dropped."""

    def data_received(self, data: bytes) -> None:
        pass


async def bare_fanout(
    base: str, sinks: int, interval: float, seconds: float, first: int, link: str
) -> int:
    """Figure 4's baseline: what the callbacks' receiver and this machine allow a fan-out.

    Every ``interval`` s, one fresh change, stamped as :func:`paced` stamps a publish, is
    written as a POST to each of ``sinks`` kept-alive connections to ``{base}/cb/{i}``, in
    one pass from bytes built once but for each head: no store, no parse, no signing, no
    answers awaited. Returns the changes sent (each to every sink).
    """
    loop = asyncio.get_running_loop()
    where = urllib.parse.urlsplit(base)
    host, port = where.hostname or HOST, where.port or 80
    transports: list[asyncio.Transport] = []
    try:
        for _ in range(sinks):
            transport, _answers = await asyncio.wait_for(
                loop.create_connection(_Answers, host, port), 10
            )
            transports.append(transport)
        heads = [
            (
                f"POST /cb/{i} HTTP/1.1\r\nHost: {where.netloc}\r\n"
                f"Content-Type: application/xml\r\nLink: {link}\r\nContent-Length: "
            ).encode()
            for i in range(sinks)
        ]
        ticks = round(seconds / interval)
        start = time.perf_counter()
        for k in range(ticks):
            delay = start + k * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = notification(first + k, 1, time.perf_counter_ns())
            rest = b"%d\r\n\r\n%s" % (len(body), body)
            for transport, head in zip(transports, heads, strict=True):
                transport.write(head + rest)
        return ticks
    finally:
        for transport in transports:
            transport.close()


# -- receiving side: counts per sink (WebSocket client or callback path) ------------------


@dataclass
class Tally:
    """Events per sink, when each sink reached the target, and optional latencies (ns)."""

    sinks: int
    target: int = 0
    record_latency: bool = False
    counts: list[int] = field(default_factory=list)
    done_ns: list[int] = field(default_factory=list)
    latencies: list[int] = field(default_factory=list)
    #: (topic URL, sink) of each verified subscription.
    verified: set[tuple[str, int]] = field(default_factory=set)
    #: Deliveries (POSTs) received, how many carried ``X-Hub-Signature``, the last body.
    posts: int = 0
    signed: int = 0
    sample: bytes = b""
    finished: int = 0
    all_done: asyncio.Event = field(default_factory=asyncio.Event)

    def reset(self, target: int, record_latency: bool) -> None:
        self.target = target
        self.record_latency = record_latency
        self.counts = [0] * self.sinks
        self.done_ns = [0] * self.sinks
        self.latencies = []
        self.posts = self.signed = 0
        self.finished = 0
        self.all_done = asyncio.Event()

    def add(self, sink: int, events: int, now_ns: int, stamps: list[Any]) -> None:
        if not self.counts:
            return
        self.counts[sink] += events
        if self.target and not self.done_ns[sink] and self.counts[sink] >= self.target:
            self.done_ns[sink] = now_ns
            self.finished += 1
            if self.finished == self.sinks:
                self.all_done.set()
        if self.record_latency:
            self.latencies.extend(now_ns - int(t) for t in stamps)

    async def expect(self, timeout: float) -> dict[str, Any]:
        """Wait (bounded) until every sink has ``target`` events; report."""
        if self.target:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.all_done.wait(), timeout)
        complete = bool(self.counts) and min(self.counts) >= self.target
        return {
            "complete": complete,
            "events": sum(self.counts),
            "min_count": min(self.counts, default=0),
            "done_ns": max(self.done_ns, default=0) if complete else time.perf_counter_ns(),
            "p50_ms": percentile(self.latencies, 0.50) / 1e6,
            "p99_ms": percentile(self.latencies, 0.99) / 1e6,
            "max_ms": percentile(self.latencies, 1.0) / 1e6,
            "min_ms": percentile(self.latencies, 0.0) / 1e6,
            "samples": len(self.latencies),
            "posts": self.posts,
            "signed": self.signed,
        }


def control_routes(app: web.Application, tally: Tally) -> None:
    """``/ctl/reset?target=N&latency=0|1``, ``/ctl/expect?timeout=S``,
    ``/ctl/verified?topic=URL``, ``/ctl/sample`` (the last delivery's body)."""

    async def reset(request: web.Request) -> web.Response:
        tally.reset(int(request.query["target"]), request.query.get("latency") == "1")
        return web.json_response({"ok": True})

    async def expect(request: web.Request) -> web.Response:
        return web.json_response(await tally.expect(float(request.query["timeout"])))

    async def verified(request: web.Request) -> web.Response:
        topic = request.query.get("topic", "")
        return web.json_response({"verified": sum(t == topic for t, _ in tally.verified)})

    async def sample(_request: web.Request) -> web.Response:
        return web.Response(body=tally.sample, content_type="application/xml")

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_post("/ctl/reset", reset)
    app.router.add_post("/ctl/expect", expect)
    app.router.add_get("/ctl/verified", verified)
    app.router.add_get("/ctl/sample", sample)
    app.router.add_get("/healthz", healthz)


def serve(app: web.Application, port: int, loop: str = "asyncio", **handler: Any) -> None:
    """Run ``app`` on 127.0.0.1:``port`` on an event loop of kind ``loop``."""
    web.run_app(
        app,
        host=HOST,
        port=port,
        print=None,
        access_log=None,
        handle_signals=True,
        shutdown_timeout=1.0,
        loop=new_loop(loop),
        **handler,
    )


# -- helper process: bare aiohttp baselines -----------------------------------------------


#: A client whose socket buffer holds more than this is waited for, as the hub does.
BARE_WRITE_LIMIT = 64 * 1024


def bare_frames(n: int, batch: int, topic: str) -> list[bytes]:
    """``n`` events in JSON arrays of ``batch``, each array as one WebSocket text frame,
    encoded once for every client (as the hub encodes a batch once per topic)."""
    from hub.core.frames import text_frame

    base_ms = int(time.time() * 1000)
    return [
        text_frame(
            b"["
            + b",".join(
                client_event(f"{base_ms}-{i}", topic, i, 0) for i in range(s, min(n, s + batch))
            )
            + b"]"
        )
        for s in range(0, n, batch)
    ]


def bare_app() -> web.Application:
    """204 to ``POST /topics/{name}``; ``POST /ctl/broadcast?n=&batch=`` writes pre-built
    frames to every WebSocket client's transport, and answers with the time it started
    (after building them)."""
    clients: dict[web.WebSocketResponse, web.Request] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def publish(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=204)

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=4096, compress=False)
        await ws.prepare(request)
        clients[ws] = request
        try:
            async for _msg in ws:
                pass
        finally:
            clients.pop(ws, None)
        return ws

    async def broadcast(frames: list[bytes]) -> None:
        """Each frame to every transport as it is; a client over the write limit is
        drained before the next frame (the hub queues it for its sender instead)."""
        live = [(r.transport, r.writer) for ws, r in clients.items() if not ws.closed]
        for frame in frames:
            for transport, _writer in live:
                if transport is not None and not transport.is_closing():
                    transport.write(frame)
            for transport, writer in live:
                if transport is not None and transport.get_write_buffer_size() > BARE_WRITE_LIMIT:
                    with contextlib.suppress(ConnectionError):
                        await writer.drain()

    async def start_broadcast(request: web.Request) -> web.Response:
        n, batch = int(request.query["n"]), int(request.query["batch"])
        frames = bare_frames(n, batch, request.query.get("topic", "bare"))
        t0 = time.perf_counter_ns()  # the timed span starts once the frames exist
        task = asyncio.create_task(broadcast(frames))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return web.json_response({"t0_ns": t0, "clients": len(clients), "frames": len(frames)})

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/topics/{name}", publish)
    app.router.add_get("/topics/{name}/ws", websocket)
    app.router.add_post("/ctl/broadcast", start_broadcast)
    app.router.add_get("/healthz", healthz)
    return app


def role_bare(port: int, loop: str) -> None:
    """The bare baselines of figures 1 and 3 (:func:`bare_app`)."""
    serve(bare_app(), port, loop)


# -- helper process: WebSocket clients ----------------------------------------------------


async def close_clients(state: dict[str, Any]) -> None:
    """Cancel a helper's client tasks (``state["tasks"]``) and close its session."""
    for task in state["tasks"]:
        task.cancel()
    for task in state["tasks"]:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    state["tasks"] = []
    if state["session"] is not None:
        await state["session"].close()
        state["session"] = None


def role_wsclients(port: int, sinks: int, loop: str) -> None:
    """``/ctl/connect?url=...`` (re)connects ``sinks`` clients; they count events."""
    tally = Tally(sinks)
    state: dict[str, Any] = {"tasks": [], "session": None}

    async def client(
        i: int, session: aiohttp.ClientSession, url: str, connected: asyncio.Queue[int]
    ) -> None:
        try:
            async with session.ws_connect(url, max_msg_size=64 * 1024 * 1024, heartbeat=None) as ws:
                connected.put_nowait(i)
                async for msg in ws:
                    if msg.type is not aiohttp.WSMsgType.TEXT:
                        continue
                    now = time.perf_counter_ns()
                    data: str = msg.data
                    stamps = _T_STR.findall(data) if tally.record_latency else []
                    tally.add(i, data.count(_EVENT_START), now, stamps)
        except (aiohttp.ClientError, OSError) as exc:
            print(f"wsclient {i}: {exc!r}", file=sys.stderr)
            connected.put_nowait(-1)

    async def connect(request: web.Request) -> web.Response:
        await close_clients(state)
        url = request.query["url"]
        tally.reset(0, False)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        state["session"] = session
        connected: asyncio.Queue[int] = asyncio.Queue()
        state["tasks"] = [
            asyncio.create_task(client(i, session, url, connected)) for i in range(sinks)
        ]
        ok = 0
        deadline = time.monotonic() + 30
        for _ in range(sinks):
            try:
                got = await asyncio.wait_for(connected.get(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            ok += got >= 0
        return web.json_response({"connected": ok})

    async def disconnect_all(_request: web.Request) -> web.Response:
        await close_clients(state)
        return web.json_response({"connected": 0})

    async def on_cleanup(_app: web.Application) -> None:
        await close_clients(state)

    app = web.Application()
    control_routes(app, tally)
    app.router.add_post("/ctl/connect", connect)
    app.router.add_post("/ctl/disconnect", disconnect_all)
    app.on_cleanup.append(on_cleanup)
    serve(app, port, loop)


# -- helper process: WebSub callbacks -----------------------------------------------------


class RawCallback(asyncio.Protocol):
    """``/cb/{i}`` on a bare asyncio protocol: echo ``hub.challenge`` to a GET (calling
    ``verified(topic, i)`` for a subscribe), hand each POST to ``delivered(i, lower-case
    head, body, receive time ns)`` and answer 204.

    The receiving side of the WebSub figures must cost far less than the hub's sending side:
    on aiohttp's server it cost ~100 µs per delivery, so 100 callbacks in one process took
    10 ms to *receive* one publish, and that queue, not the hub, set the latency. Handles
    keep-alive and Content-Length bodies, which is all the hub sends.
    """

    def __init__(
        self,
        verified: Callable[[str, int], None],
        delivered: Callable[[int, bytes, bytes, int], None],
    ) -> None:
        self.verified = verified
        self.delivered = delivered
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end]
            lower = head.lower()
            at = lower.find(b"\r\ncontent-length:")
            length = 0
            if at >= 0:
                stop = lower.find(b"\r\n", at + 2)
                length = int(lower[at + 17 : stop if stop > 0 else None])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self._answer(head, lower, body)

    def _answer(self, head: bytes, lower: bytes, body: bytes) -> None:
        assert self.transport is not None
        method, target, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
        path, _, query = target.partition(b"?")
        i = int(path.rsplit(b"/", 1)[1])
        if method == b"GET":
            params = urllib.parse.parse_qs(query.decode())
            if params.get("hub.mode") == ["subscribe"]:
                self.verified(params.get("hub.topic", [""])[0], i)
            challenge = params.get("hub.challenge", [""])[0].encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(challenge), challenge)
            )
            return
        self.delivered(i, lower, body, time.perf_counter_ns())
        self.transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")


def serve_raw_callbacks(
    app: web.Application,
    verified: Callable[[str, int], None],
    delivered: Callable[[int, bytes, bytes, int], None],
) -> None:
    """Start a :class:`RawCallback` server with ``app``; its port at ``/ctl/endpoint``."""
    raw: dict[str, int] = {}

    async def endpoint(_request: web.Request) -> web.Response:
        return web.json_response(raw)

    async def start(_app: web.Application) -> None:
        server = await asyncio.get_running_loop().create_server(
            lambda: RawCallback(verified, delivered), HOST, 0, backlog=1024
        )
        raw["port"] = server.sockets[0].getsockname()[1]

    app.router.add_get("/ctl/endpoint", endpoint)
    app.on_startup.append(start)


async def raw_callbacks(session: aiohttp.ClientSession, control: str) -> str:
    """The base URL of the callbacks helper's :class:`RawCallback` server."""
    async with session.get(control + "/ctl/endpoint") as resp:
        return f"http://{HOST}:{(await resp.json())['port']}"


def role_callbacks(port: int, sinks: int, loop: str) -> None:
    """Callbacks on a :class:`RawCallback` server: count the ``<url>`` entries of each
    delivery; the control routes on aiohttp at ``port``."""
    tally = Tally(sinks)

    def verified(topic: str, i: int) -> None:
        tally.verified.add((topic, i))

    def delivered(i: int, lower: bytes, body: bytes, now: int) -> None:
        stamps = _T_BYTES.findall(body) if tally.record_latency else []
        tally.posts += 1
        tally.signed += b"\r\nx-hub-signature:" in lower
        tally.sample = body
        tally.add(i, body.count(b"<url>"), now, stamps)

    app = web.Application()
    control_routes(app, tally)
    serve_raw_callbacks(app, verified, delivered)
    serve(app, port, loop, backlog=1024)


# -- helper process: idle WebSocket clients -------------------------------------------


def role_idle(port: int, loop: str = "asyncio") -> None:
    """``/ctl/connect?url=&n=`` opens ``n`` WebSocket clients that only answer pings.

    ``&source=127.0.0.N`` binds them to that loopback address: one source address reaches
    one server port from ~28,000 ephemeral ports only, so more clients need several."""
    raise_nofile()
    state: dict[str, Any] = {"tasks": [], "session": None, "open": 0, "closed": 0}
    by_source: dict[str, aiohttp.ClientSession] = {}

    async def client(url: str, session: aiohttp.ClientSession, gate: asyncio.Semaphore,
                     opened: asyncio.Queue[bool]) -> None:  # fmt: skip
        try:
            async with gate:
                ws = await session.ws_connect(url, heartbeat=None, autoping=True)
            opened.put_nowait(True)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            print(f"idle client: {exc!r}", file=sys.stderr)
            opened.put_nowait(False)
            return
        state["open"] += 1
        try:
            async for _msg in ws:
                pass
        finally:
            state["open"] -= 1
            state["closed"] += 1
            await ws.close()

    async def connect(request: web.Request) -> web.Response:
        url, n = request.query["url"], int(request.query["n"])
        source = request.query.get("source")
        if state["session"] is None:
            by_source.clear()  # closed by a disconnect
            state["session"] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None, connect=60),
            )
        session = state["session"]
        if source is not None:
            if source not in by_source:
                by_source[source] = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0, local_addr=(source, 0)),
                    timeout=aiohttp.ClientTimeout(total=None, connect=60),
                )
            session = by_source[source]
        gate = asyncio.Semaphore(200)
        opened: asyncio.Queue[bool] = asyncio.Queue()
        start = time.perf_counter()
        state["tasks"] += [
            asyncio.create_task(client(url, session, gate, opened)) for _ in range(n)
        ]
        ok = 0
        deadline = time.monotonic() + 300
        for _ in range(n):
            try:
                got = await asyncio.wait_for(opened.get(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            ok += got
        return web.json_response({"connected": ok, "seconds": time.perf_counter() - start})

    async def disconnect(_request: web.Request) -> web.Response:
        await close_clients(state)
        for session in by_source.values():
            await session.close()
        by_source.clear()
        return web.json_response({"open": state["open"]})

    async def status(_request: web.Request) -> web.Response:
        return web.json_response({"open": state["open"], "closed": state["closed"]})

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/ctl/connect", connect)
    app.router.add_post("/ctl/disconnect", disconnect)
    app.router.add_get("/ctl/status", status)
    app.router.add_get("/healthz", healthz)
    serve(app, port, loop)


# -- conductor: processes -----------------------------------------------------------------


@dataclass
class Placement:
    """Where the servers under test and the helpers run (``--placement``).

    On a small machine the helpers share the hub's cores: each POST the hub writes wakes
    the callbacks process, which the kernel placed on the hub's own core and let preempt
    it, so a 100-callback fan-out took ~100 µs a POST instead of the ~25 µs of hub CPU
    (bench/results/hub.jsonl, figure 4 in 2026-11-24). In a deployment the receivers are other
    machines.

    * ``apart``: the servers (the hub with its workers and parse pool, the bare baselines)
      on the first CPU, the helpers (WebSocket clients, callbacks, idle clients, ``XADD``
      clients) and this conductor on the others. Redis is left to the scheduler.
    * ``batch``: no pinning; the helpers and the conductor are ``SCHED_BATCH``, whose
      wake-ups never preempt a running process.
    * ``shared``: everything left to the scheduler (the runs before 2026-11-24 20:00).
    """

    mode: str = "shared"
    server_cpus: frozenset[int] = frozenset()
    helper_cpus: frozenset[int] = frozenset()

    @classmethod
    def choose(cls, mode: str) -> Placement:
        cpus = sorted(os.sched_getaffinity(0))
        if mode == "apart":
            if len(cpus) < 2:
                print("--placement apart needs 2 CPUs: running shared", file=sys.stderr)
                return cls()
            return cls(mode, frozenset(cpus[:1]), frozenset(cpus[1:]))
        return cls(mode)

    def server(self) -> None:
        """In a server under test between fork and exec (its threads and children follow);
        its parent, this conductor, may be a placed helper already."""
        if self.server_cpus:
            os.sched_setaffinity(0, self.server_cpus)
        if self.mode == "batch":
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

    def helper(self) -> None:
        """In a helper between fork and exec, and in the conductor at its start."""
        if self.helper_cpus:
            os.sched_setaffinity(0, self.helper_cpus)
        if self.mode == "batch":
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))

    @contextlib.contextmanager
    def as_server(self) -> Iterator[None]:
        """This conductor placed as a server under test, for a baseline it runs itself
        (figure 4's bare fan-out sends from where the hub sent)."""
        if not self.server_cpus:
            yield
            return
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.server_cpus)
        try:
            yield
        finally:
            os.sched_setaffinity(0, before)

    def describe(self) -> str:
        if self.mode == "apart":
            return (
                f"placement apart: hub and bare on CPU {_cpus(self.server_cpus)}, helpers and "
                f"conductor on CPU {_cpus(self.helper_cpus)}, Redis unpinned"
            )
        if self.mode == "batch":
            return "placement batch: helpers and conductor SCHED_BATCH, nothing pinned"
        return "placement shared: every process left to the scheduler"


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


#: Set by ``main`` from ``--placement``; helpers started by :class:`Processes` follow it.
PLACEMENT = Placement()


def _die_with_parent() -> None:  # in the child between fork and exec
    os.setsid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` from ``/proc/PID/status`` (0 if it is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User+system CPU seconds used so far by ``pid`` (0 if unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def descendants_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by the live descendants of ``pid`` (e.g. the hub's parse
    pool), which its own figure does not include."""
    total, todo = 0.0, [pid]
    while todo:
        parent = todo.pop()
        for task in (
            Path(f"/proc/{parent}/task").glob("*/children")
            if Path(f"/proc/{parent}").exists()
            else ()
        ):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            total += sum(cpu_seconds(k) for k in kids)
            todo.extend(kids)
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy so far (``/proc/stat``), to see other load."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / _TICK


class CpuMeter:
    """Cores used per process over a stretch of time: ``with meter.measure(label):``."""

    def __init__(
        self,
        pids: dict[str, int],
        groups: dict[str, tuple[str, ...]] | None = None,
        report_others: bool = False,
    ) -> None:
        self.pids = pids
        #: Also report ``others``: busy cores of the machine not used by ``pids``.
        self.report_others = report_others
        #: Extra figures summed over several processes (e.g. every hub worker).
        self.groups = groups or {}
        self.lines: list[str] = []
        #: Cores per process (and group) of the last measured stretch.
        self.last: dict[str, float] = {}
        self.by_label: dict[str, dict[str, float]] = {}

    @contextlib.contextmanager
    def measure(self, label: str) -> Iterator[None]:
        before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        hub_pid = self.pids.get("hub")
        pool_before = descendants_cpu_seconds(hub_pid) if hub_pid else 0.0
        machine = machine_busy_seconds()
        start = time.perf_counter()
        try:
            yield
        finally:
            wall = max(1e-6, time.perf_counter() - start)
            used = {
                name: (cpu_seconds(pid) - before[name]) / wall for name, pid in self.pids.items()
            }
            if hub_pid:  # the parse pool's processes, reported as "hub pool"
                used["hub pool"] = (descendants_cpu_seconds(hub_pid) - pool_before) / wall
            others = (machine_busy_seconds() - machine) / wall - sum(used.values())
            for group, names in self.groups.items():
                used[group] = sum(used[name] for name in names)
            if self.groups or self.report_others:
                used["others"] = max(0.0, others)
            self.last = used
            self.by_label[label] = used
            busy = ", ".join(f"{name} {cores:.2f}" for name, cores in used.items() if cores >= 0.02)
            line = f"     cores used during {label} ({wall:.1f} s): {busy}"
            self.lines.append(line)
            print(line, flush=True)


class Processes:
    """The helper processes this run started; :meth:`stop_all` ends each by its pid."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self,
        name: str,
        args: list[str],
        env: dict[str, str] | None = None,
        *,
        server: bool = False,
        cwd: Path = ROOT,
    ) -> subprocess.Popen[bytes]:
        """Start ``name``, placed as a server under test (``server``: the hub, the bare
        baseline) or as a helper (:data:`PLACEMENT`); ``cwd`` is where ``-m`` imports from."""
        log = (self.logdir / f"{name}.log").open("wb")
        place = PLACEMENT.server if server else PLACEMENT.helper
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: (_die_with_parent(), place()),
            env={**os.environ, **(env or {})},
        )
        log.close()
        self.procs[name] = proc
        return proc

    def log_tail(self, name: str, chars: int = 1500) -> str:
        path = self.logdir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self, name: str, timeout: float = 15.0) -> None:
        """SIGTERM ``name`` and its children (its own session); SIGKILL after ``timeout``."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"{name} did not exit {timeout} s after SIGTERM; killing it", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)  # its own session: just it and kids
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()


#: What a benchmark reports as its own failure (anything else is a bug: a traceback).
FAILURES = (RuntimeError, TimeoutError, aiohttp.ClientError)


@contextlib.contextmanager
def bench_run(prefix: str, keep: bool, appendfsync: str = "everysec") -> Iterator[Harness]:
    """A temp dir, the helper processes and an embedded Redis for one benchmark; all
    stopped, and the dir removed unless ``keep``, at the end (also on error)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    harness = Harness(tmp, Processes(tmp), EmbeddedRedis(tmp / "redis", appendfsync=appendfsync))
    try:
        yield harness
    finally:
        harness.procs.stop_all()
        harness.redis.stop()
        if keep:
            print(f"logs kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Harness:
    tmp: Path
    procs: Processes
    redis: EmbeddedRedis

    def failed(self, what: str, exc: BaseException) -> int:
        """Say why ``what`` failed, with each helper's log tail; the exit status (1)."""
        print(f"{what} failed: {exc!s}", file=sys.stderr)
        for name in list(self.procs.procs):
            print(f"--- {name} log tail:\n{self.procs.log_tail(name)}", file=sys.stderr)
        return 1


async def wait_healthy(
    session: aiohttp.ClientSession, url: str, procs: Processes, name: str, timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if procs.procs[name].poll() is not None:
            raise RuntimeError(f"{name} exited early:\n{procs.log_tail(name)}")
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{name} not healthy at {url} after {timeout}s:\n{procs.log_tail(name)}")


# -- conductor: load generation -----------------------------------------------------------


async def post_all(
    session: aiohttp.ClientSession,
    url: str,
    bodies: Callable[[int], bytes],
    count: int,
    concurrency: int,
    ok: tuple[int, ...] = (202, 204),
) -> float:
    """POST ``bodies(k)`` for k < count with ``concurrency`` in flight; seconds taken."""
    next_k = 0
    failures: list[str] = []

    async def worker() -> None:
        nonlocal next_k
        while next_k < count and len(failures) < 5:
            k = next_k
            next_k += 1
            async with session.post(url, data=bodies(k), headers=XML_HEADERS) as resp:
                text = await resp.read()
                if resp.status not in ok:
                    failures.append(f"{resp.status}: {text[:200]!r}")

    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), 120)
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"publishes to {url} failed: {failures}")
    return elapsed


async def post_for(
    session: aiohttp.ClientSession,
    url: str,
    bodies: Callable[[int], bytes],
    seconds: float,
    concurrency: int,
) -> float:
    """POST for ``seconds`` with ``concurrency`` in flight; completed requests per second."""
    done = 0
    failures: list[str] = []
    start = time.perf_counter()
    deadline = start + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline and len(failures) < 5:
            async with session.post(url, data=bodies(done), headers=XML_HEADERS) as resp:
                text = await resp.read()
                if resp.status in (202, 204):
                    done += 1
                else:
                    failures.append(f"{resp.status}: {text[:200]!r}")

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), seconds + 60)
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"publishes to {url} failed: {failures}")
    return done / elapsed


async def paced(
    session: aiohttp.ClientSession,
    url: str,
    per_post: int,
    interval: float,
    seconds: float,
    first: int,
    rtts: list[int] | None = None,
) -> int:
    """POST ``per_post`` fresh changes every ``interval`` s for ``seconds``; changes sent.
    Each POST's round trip (ns, from its send stamp to the response read) goes to ``rtts``."""
    slots = asyncio.Semaphore(64)
    failures: list[int] = []

    async def one(k: int) -> None:
        async with slots:
            stamp = time.perf_counter_ns()
            body = notification(first + k * per_post, per_post, stamp)
            async with session.post(url, data=body, headers=XML_HEADERS) as resp:
                await resp.read()
                if resp.status != 202:
                    failures.append(resp.status)
            if rtts is not None:
                rtts.append(time.perf_counter_ns() - stamp)

    ticks = await rawload.run_paced(one, interval, seconds)
    if failures:
        raise RuntimeError(f"paced publishes failed: {failures[:5]}")
    return ticks * per_post


class Control:
    """Calls a helper's ``/ctl`` endpoints."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(
        self, method: str, path: str, wait: float = 30.0, **params: Any
    ) -> dict[str, Any]:
        query = {k: str(v) for k, v in params.items()}
        async with self.session.request(
            method,
            self.base + path,
            params=query,
            timeout=aiohttp.ClientTimeout(total=wait + 10),
        ) as resp:
            resp.raise_for_status()
            return dict(await resp.json())

    async def reset(self, target: int, latency: bool = False) -> None:
        await self.call("POST", "/ctl/reset", target=target, latency=int(latency))

    async def expect(self, timeout: float) -> dict[str, Any]:
        return await self.call("POST", "/ctl/expect", wait=timeout, timeout=timeout)


# -- the XADD baseline of figure 2 --------------------------------------------------------


@dataclass(frozen=True)
class XaddResult:
    """Changes/s XADDed by all client processes together, their span and CPU."""

    changes: int
    seconds: float
    cpu_seconds: float

    @property
    def rate(self) -> float:
        return self.changes / self.seconds


def xadd_client(
    url: str,
    key: str,
    payloads: list[list[bytes]],
    rounds: list[int],
    ready: Any,
    results: Any,
) -> None:
    """One process of the XADD baseline: a blocking socket, every round one pipeline of
    hiredis-packed ``XADD``s written at once, the replies read with a hiredis reader.
    Puts (start ns, end ns, CPU s, changes) on ``results``; timing starts after ``ready``
    (a barrier of every client), so process start-up and the warm-up round are outside."""
    import hiredis

    parts = urllib.parse.urlsplit(url)
    sock = socket.create_connection((parts.hostname or HOST, parts.port or 6379))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = hiredis.Reader()
    if parts.password is not None:  # the embedded Redis has a password of its own
        secret = urllib.parse.unquote(parts.password)
        sock.sendall(hiredis.pack_command(("AUTH", secret)))
        reader.feed(sock.recv(1 << 10))
        if isinstance(answer := reader.gets(), hiredis.ReplyError):
            raise RuntimeError(f"AUTH failed: {answer}")

    def pipeline(batch: list[bytes]) -> None:
        commands: list[tuple[Any, ...]] = [("XADD", key, "*", "e", p) for p in batch]
        sock.sendall(b"".join(hiredis.pack_command(c) for c in commands))
        replies = 0
        while replies < len(batch):
            data = sock.recv(1 << 16)
            if not data:
                raise RuntimeError("Redis closed the connection")
            reader.feed(data)
            while (reply := reader.gets()) is not False:
                if isinstance(reply, hiredis.ReplyError):
                    raise RuntimeError(f"XADD failed: {reply}")
                replies += 1

    try:
        pipeline(payloads[0])  # warm-up
        ready.wait(120)
        cpu = time.process_time()
        start = time.perf_counter_ns()
        changes = 0
        for r in rounds:
            pipeline(payloads[r % len(payloads)])
            changes += len(payloads[r % len(payloads)])
        end = time.perf_counter_ns()
        results.put((start, end, time.process_time() - cpu, changes))
    finally:
        sock.close()


async def xadd_baseline(
    url: str,
    payloads: list[list[bytes]],
    rounds: int,
    clients: int,
    key: str = "bench:xadd",
    timed: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
) -> XaddResult:
    """``rounds`` pipelines of ``XADD``s of the hub's stored payloads, spread over
    ``clients`` processes (as many as the hub's concurrent publishers): the best a
    hand-written client could do. One redis-py process in the conductor was its own
    bottleneck (0.6 core of client for 0.1 core of Redis). ``timed`` wraps the measured
    span only (after the processes started and warmed up)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(clients + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=xadd_client,
            args=(url, key, payloads, list(range(k, rounds, clients)), ready, results),
            daemon=True,
        )
        for k in range(clients)
    ]
    for proc in procs:
        proc.start()
    try:
        await asyncio.to_thread(ready.wait, 120)
        with timed():
            got = [await asyncio.to_thread(results.get, True, 120) for _ in procs]
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.join, 10)
            if proc.is_alive():
                proc.kill()
    from redis.asyncio import Redis

    redis = Redis.from_url(url)
    try:
        await redis.delete(key)
    finally:
        await redis.aclose()
    start = min(g[0] for g in got)
    end = max(g[1] for g in got)
    return XaddResult(
        changes=sum(g[3] for g in got),
        seconds=(end - start) / 1e9,
        cpu_seconds=sum(g[2] for g in got),
    )


# -- results ------------------------------------------------------------------------------


def number(value: float) -> str:
    """``12,345`` from 100 up, ``12.3`` from 1, ``0.123`` below."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if value >= 1 else f"{value:.3f}"


@dataclass
class Row:
    figure: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    #: ("ratio", 0.5) = value/baseline >= 0.5; ("min", x) = value >= x; ("max", x) <= x.
    target: tuple[str, float] | None = None
    note: str = ""
    #: False when some events never arrived: the figure is then no measurement at all.
    complete: bool = True

    @property
    def passed(self) -> bool | None:
        if not self.complete:
            return False
        if self.target is None:
            return None
        kind, bound = self.target
        if kind == "ratio":
            return bool(self.baseline) and self.value / (self.baseline or 1) >= bound
        if kind == "min":
            return self.value >= bound
        return self.value <= bound

    def cells(self) -> list[str]:
        value = f"{number(self.value)} {self.unit}"
        base = "—"
        if self.baseline is not None:
            base = f"{number(self.baseline)} ({self.baseline_name})"
        ratio = f"{self.value / self.baseline:.2f}" if self.baseline else "—"
        if self.target is None:
            goal = "—"
        elif self.target[0] == "ratio":
            goal = f"ratio {ratio} (>= {self.target[1]})"
        elif self.target[0] == "min":
            goal = f">= {self.target[1]:,.0f}" + (f" (ratio {ratio})" if self.baseline else "")
        else:
            goal = f"<= {self.target[1]:g}" + (f" (ratio {ratio})" if self.baseline else "")
        verdict = {None: "info", True: "PASS", False: "FAIL"}[self.passed]
        return [self.figure + (f" [{self.note}]" if self.note else ""), value, base, goal, verdict]


def exit_status(rows: list[Row]) -> int:
    """0 if no figure failed (information rows pass unless incomplete), else 2."""
    return 0 if all(r.passed is not False for r in rows) else 2


def print_table(rows: list[Row], title: str) -> None:
    header = ["figure", "value", "baseline", "ratio / target", "result"]
    table = [header] + [r.cells() for r in rows]
    widths = [max(len(line[c]) for line in table) for c in range(len(header))]
    print(f"\n{title}\n")
    for n, line in enumerate(table):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


# -- conductor: the figures ---------------------------------------------------------------


@dataclass
class Bench:
    session: aiohttp.ClientSession
    hub: str
    bare: str
    redis_url: str
    sizes: Sizes
    ws: Control
    callbacks: Control
    callbacks_base: str
    pause_before: set[str]
    hub_pid: int
    cpu: CpuMeter
    #: The ``--role idle`` helper (the ``idle`` figure only).
    idle_ctl: Control | None = None
    #: Figure 1 through :mod:`bench.rawload` instead of aiohttp (``--workers`` runs).
    raw_publish: bool = False
    #: Figure 4's latency publishes through aiohttp's client, stamped before it builds the
    #: request (``--websub-publisher aiohttp``, the figure before 2026-11-25), instead of
    #: :func:`bench.rawload.post_paced`, stamped as the bare fan-out stamps.
    websub_aiohttp: bool = False
    rows: list[Row] = field(default_factory=list)
    seq: Iterator[int] = field(default_factory=lambda: iter(range(10**12)))

    def fresh(self, n: int) -> int:
        """First of ``n`` unused change numbers (distinct locs across the run)."""
        first = next(self.seq)
        for _ in range(n - 1):
            next(self.seq)
        return first

    async def pause(self, name: str) -> None:
        if name in self.pause_before:
            print(
                f"  [pause] hub pid {self.hub_pid}: attach a profiler now; "
                f"starting '{name}' in 10 s",
                flush=True,
            )
            await asyncio.sleep(10)

    async def publishes(self) -> None:
        s = self.sizes
        pool = [notification(i, 1) for i in range(100)]

        async def rate(base: str, label: str) -> float:
            url = f"{base}/topics/single"
            await post_all(
                self.session, url, lambda k: pool[k % 100], s.publish_warmup, s.publish_concurrency
            )
            if self.raw_publish:
                port = int(base.rsplit(":", 1)[1])
                requests = [
                    rawload.post_request(HOST, port, "/topics/single", body, "application/xml")
                    for body in pool
                ]
                with self.cpu.measure(label):
                    return await rawload.post_for(
                        HOST, port, requests, s.publish_seconds, s.publish_concurrency
                    )
            with self.cpu.measure(label):
                return await post_for(
                    self.session,
                    url,
                    lambda k: pool[k % 100],
                    s.publish_seconds,
                    s.publish_concurrency,
                )

        bare = await rate(self.bare, "bare 204 publishes")
        await self.pause("publish")
        hub = await rate(self.hub, "hub publishes")
        self.rows.append(
            Row(
                f"1. single-change publishes/s (c=32, {s.publish_seconds:.0f} s)",
                hub,
                "/s",
                bare,
                "bare aiohttp 204",
                ("ratio", 0.8),
            )
        )
        print(f"  1. publishes/s hub {hub:,.0f} vs bare {bare:,.0f}", flush=True)

    async def fragments(self) -> None:
        s = self.sizes
        bodies = [notification(self.fresh(1000), 1000) for _ in range(8)]
        payloads = [stored_payloads(b) for b in bodies]
        clients = s.fragment_concurrency
        xadd = await xadd_baseline(
            self.redis_url,
            payloads,
            max(100, s.fragments),  # a span long enough to time (0.3 s here)
            clients,
            timed=lambda: self.cpu.measure("pipelined XADD"),
        )
        base_rate = xadd.rate
        print(
            f"     ({clients} XADD client processes used {xadd.cpu_seconds / xadd.seconds:.2f} "
            f"cores in {xadd.seconds:.2f} s)",
            flush=True,
        )
        url = f"{self.hub}/topics/fragments"
        await post_all(self.session, url, lambda k: bodies[k % 8], 3, 1)
        await self.pause("fragments")
        with self.cpu.measure("hub 1,000-change publishes"):
            elapsed = await post_all(
                self.session, url, lambda k: bodies[k % 8], s.fragments, clients
            )
        hub = s.fragments * 1000 / elapsed
        self.rows.append(
            Row(
                f"2. changes/s in 1,000-change publishes (c={clients})",
                hub,
                "/s",
                base_rate,
                f"hiredis pipelined XADD, {clients} processes",
                ("ratio", 1.5),
            )
        )
        print(f"  2. changes/s hub {hub:,.0f} vs XADD {base_rate:,.0f}", flush=True)

    async def websocket(self) -> None:
        s = self.sizes
        n, frag = s.ws_changes, s.ws_fragment
        topic = "wsbench"
        hub_ws = f"ws://{HOST}:{self.hub.rsplit(':', 1)[1]}/topics/{topic}/ws"
        url = f"{self.hub}/topics/{topic}"
        await self.session.post(url, data=notification(self.fresh(1), 1), headers=XML_HEADERS)
        got = await self.ws.call("POST", "/ctl/connect", url=hub_ws)
        if got["connected"] != s.ws_clients:
            raise RuntimeError(f"only {got['connected']} WebSocket clients connected to the hub")
        # probe: one change reaches everybody
        await self.ws.reset(1)
        await self.session.post(url, data=notification(self.fresh(1), 1), headers=XML_HEADERS)
        probe = await self.ws.expect(20)
        if not probe["complete"]:
            raise RuntimeError(f"WebSocket probe did not reach every client: {probe}")

        first = self.fresh(n)
        bodies = [notification(first + k * frag, frag) for k in range(n // frag)]
        await self.ws.reset(n)
        await self.pause("ws")
        with self.cpu.measure("hub WebSocket fan-out"):
            t0 = time.perf_counter_ns()
            took = await post_all(self.session, url, lambda k: bodies[k], len(bodies), 4)
            res = await self.ws.expect(90)
        print(
            f"     (publishing the {n:,} changes took {took:.2f} s of "
            f"{(res['done_ns'] - t0) / 1e9:.2f} s)",
            flush=True,
        )
        hub_rate = res["events"] / ((res["done_ns"] - t0) / 1e9)
        hub_note = "" if res["complete"] else f"INCOMPLETE min {res['min_count']}/{n}"

        # steady 1,000 changes/s: 10 changes every 10 ms, latency measured at the clients
        changes = round(s.ws_latency_seconds / 0.01) * 10
        await self.ws.reset(changes, latency=True)
        with self.cpu.measure("WebSocket latency run"):
            await paced(self.session, url, 10, 0.01, s.ws_latency_seconds, self.fresh(changes))
            lat = await self.ws.expect(30)
        lat_note = "" if lat["complete"] else f"INCOMPLETE min {lat['min_count']}/{changes}"

        # baseline: the bare broadcaster, same clients, same batch size
        bare_ws = f"ws://{HOST}:{self.bare.rsplit(':', 1)[1]}/topics/{topic}/ws"
        got = await self.ws.call("POST", "/ctl/connect", url=bare_ws)
        if got["connected"] != s.ws_clients:
            raise RuntimeError(f"only {got['connected']} clients connected to the bare server")
        await self.ws.reset(n)
        with self.cpu.measure("bare broadcast"):
            started = await Control(self.session, self.bare).call(
                "POST", "/ctl/broadcast", n=n, batch=frag, topic=topic
            )
            base = await self.ws.expect(90)
        # from the bare server's own start stamp: building its frames is not timed
        base_rate = base["events"] / ((base["done_ns"] - started["t0_ns"]) / 1e9)
        await self.ws.call("POST", "/ctl/disconnect")
        if not base["complete"]:
            hub_note = "; ".join(
                filter(None, [hub_note, f"bare INCOMPLETE min {base['min_count']}/{n}"])
            )

        self.rows.append(
            Row(
                f"3. WebSocket events/s delivered ({s.ws_clients} clients)",
                hub_rate,
                "/s",
                base_rate,
                "bare broadcast, one pre-encoded frame per batch",
                ("ratio", 0.5),
                hub_note,
                complete=res["complete"] and base["complete"],
            )
        )
        self.rows.append(
            Row(
                "3. WebSocket latency p50 @1,000 changes/s",
                lat["p50_ms"],
                "ms",
                note=lat_note,
                complete=lat["complete"],
            )
        )
        self.rows.append(
            Row(
                "3. WebSocket latency p99 @1,000 changes/s",
                lat["p99_ms"],
                "ms",
                target=("max", 10),
                note=lat_note,
                complete=lat["complete"],
            )
        )
        print(
            f"  3. ws events/s hub {hub_rate:,.0f} vs bare {base_rate:,.0f}; latency p50 "
            f"{lat['p50_ms']:.1f} ms p99 {lat['p99_ms']:.1f} ms max {lat['max_ms']:.1f} ms "
            f"({lat['samples']:,} samples)",
            flush=True,
        )

    async def subscribe_callbacks(self, topic: str, signed: bool) -> str:
        """Subscribe every callback path to ``topic`` (with ``hub.secret`` ``secret-{i}``
        if ``signed``), wait until each is verified and a probe change reached them all;
        the topic's URL."""
        s = self.sizes
        url = f"{self.hub}/topics/{topic}"
        await self.session.post(url, data=notification(self.fresh(1), 1), headers=XML_HEADERS)
        for i in range(s.websub_callbacks):
            form = {
                "hub.mode": "subscribe",
                "hub.topic": url,
                "hub.callback": f"{self.callbacks_base}/cb/{i}",
            }
            if signed:
                form["hub.secret"] = callback_secret(i)
            async with self.session.post(f"{self.hub}/", data=form) as resp:
                if resp.status != 202:
                    raise RuntimeError(f"subscribe {i}: {resp.status} {await resp.text()}")
        deadline = time.monotonic() + 30
        verified = 0
        while time.monotonic() < deadline:
            verified = (await self.callbacks.call("GET", "/ctl/verified", topic=url))["verified"]
            if verified >= s.websub_callbacks:
                break
            await asyncio.sleep(0.1)
        if verified < s.websub_callbacks:
            raise RuntimeError(f"only {verified} callbacks verified for {topic}")
        # probes until one change reaches every callback (activation follows verification)
        await self.callbacks.reset(1)
        probe: dict[str, Any] = {}
        for _ in range(15):
            await self.session.post(url, data=notification(self.fresh(1), 1), headers=XML_HEADERS)
            probe = await self.callbacks.expect(1)
            if probe["complete"]:
                break
        if not probe.get("complete"):
            raise RuntimeError(f"WebSub probe did not reach every callback: {probe}")
        await asyncio.sleep(0.5)  # let straggling probe deliveries finish
        return url

    async def websub(self) -> None:
        s = self.sizes
        url = await self.subscribe_callbacks("websubbench", signed=False)
        n, frag = s.websub_changes, 100
        first = self.fresh(n)
        bodies = [notification(first + k * frag, frag) for k in range(n // frag)]
        await self.callbacks.reset(n)
        await self.pause("websub")
        with self.cpu.measure("hub WebSub fan-out"):
            t0 = time.perf_counter_ns()
            await post_all(self.session, url, lambda k: bodies[k], len(bodies), 4)
            res = await self.callbacks.expect(90)
        rate = res["events"] / ((res["done_ns"] - t0) / 1e9)
        note = "" if res["complete"] else f"INCOMPLETE min {res['min_count']}/{n}"

        changes = round(s.websub_latency_seconds / 0.05)
        await asyncio.sleep(0.5)
        await self.callbacks.reset(changes, latency=True)
        with self.cpu.measure("WebSub latency run"):
            first = self.fresh(changes)
            if self.websub_aiohttp:
                await paced(self.session, url, 1, 0.05, s.websub_latency_seconds, first)
            else:
                where = urllib.parse.urlsplit(url)
                await rawload.post_paced(
                    where.hostname or HOST,
                    where.port or 80,
                    where.path,
                    lambda k, stamp: notification(first + k, 1, stamp),
                    0.05,
                    s.websub_latency_seconds,
                )
            lat = await self.callbacks.expect(30)
        lat_note = "" if lat["complete"] else f"INCOMPLETE min {lat['min_count']}/{changes}"

        # baseline: the same pace and receiver, POSTs written at once from the hub's CPU
        await self.callbacks.reset(changes, latency=True)
        link = f'<{self.hub}/>; rel="hub", <{url}>; rel="self"'
        with self.cpu.measure("bare fan-out"), PLACEMENT.as_server():
            await bare_fanout(
                self.callbacks_base,
                s.websub_callbacks,
                0.05,
                s.websub_latency_seconds,
                self.fresh(changes),
                link,
            )
        bare = await self.callbacks.expect(30)
        if not bare["complete"]:
            lat_note = "; ".join(
                filter(None, [lat_note, f"bare INCOMPLETE min {bare['min_count']}/{changes}"])
            )

        self.rows.append(
            Row(
                f"4. WebSub changes/s delivered (sum, {s.websub_callbacks} callbacks)",
                rate,
                "/s",
                target=("min", 3000),
                note=note,
                complete=res["complete"],
            )
        )
        self.rows.append(
            Row(
                "4. WebSub latency p50 @20 changes/s",
                lat["p50_ms"],
                "ms",
                bare["p50_ms"],
                "bare fan-out",
                target=("max", 3),
                note=lat_note,
                complete=lat["complete"] and bare["complete"],
            )
        )
        self.rows.append(
            Row(
                "4. WebSub latency p99 @20 changes/s",
                lat["p99_ms"],
                "ms",
                bare["p99_ms"],
                "bare fan-out",
                target=("max", 10),
                note=lat_note,
                complete=lat["complete"] and bare["complete"],
            )
        )
        print(
            f"  4. websub changes/s {rate:,.0f}; latency min {lat['min_ms']:.1f} ms "
            f"p50 {lat['p50_ms']:.1f} ms "
            f"p99 {lat['p99_ms']:.1f} ms max {lat['max_ms']:.1f} ms "
            f"({lat['samples']:,} samples); bare fan-out p50 {bare['p50_ms']:.1f} ms "
            f"p99 {bare['p99_ms']:.1f} ms",
            flush=True,
        )

    async def delivery_cpu(self) -> None:
        """Hub CPU per signed WebSub POST beside an aiohttp client's CPU per POST."""
        from hub.core.websub import signature

        s = self.sizes
        callbacks = s.websub_callbacks
        url = await self.subscribe_callbacks("cpubench", signed=True)
        n, per_post = s.cpu_publishes, 4
        await self.callbacks.reset(n * per_post)
        await self.pause("delivery-cpu")
        before = cpu_seconds(self.hub_pid)
        with self.cpu.measure("hub signed WebSub deliveries"):
            await paced(
                self.session, url, per_post, 1 / s.cpu_rate, n / s.cpu_rate, self.fresh(n * 4)
            )
            res = await self.callbacks.expect(60)
        hub_cpu = cpu_seconds(self.hub_pid) - before
        posts = max(1, res["posts"])
        hub_ms = hub_cpu / posts * 1000
        body = await self.callbacks_sample()
        notes = [f"{posts:,} POSTs, {res['events'] / posts:.1f} changes/POST, {len(body):,} B"]
        if not res["complete"]:
            notes.append(f"INCOMPLETE min {res['min_count']}/{n * per_post}")
        if res["signed"] != res["posts"]:
            notes.append(f"only {res['signed']} of {res['posts']} signed")

        # baseline: the same number of POSTs of the same signed body, from this process
        per_callback = math.ceil(posts / callbacks)
        link = f'<{self.hub}/>; rel="hub", <{url}>; rel="self"'

        async def send(client: aiohttp.ClientSession, i: int, count: int) -> None:
            target = f"{self.callbacks_base}/cb/{i}"
            for _ in range(count):
                headers = {
                    "Content-Type": "application/xml",
                    "Link": link,
                    "X-Hub-Signature": signature(callback_secret(i), body),
                }
                async with client.post(target, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 204:
                        raise RuntimeError(f"baseline POST to {target}: {resp.status}")

        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as client:
            await asyncio.gather(*(send(client, i, 1) for i in range(callbacks)))  # warm up
            await self.callbacks.reset(per_callback * body.count(b"<url>"))
            own = time.process_time()
            with self.cpu.measure("aiohttp client signed POSTs"):
                await asyncio.wait_for(
                    asyncio.gather(*(send(client, i, per_callback) for i in range(callbacks))),
                    120,
                )
                own = time.process_time() - own
        base = await self.callbacks.expect(30)
        base_ms = own / max(1, base["posts"]) * 1000
        self.rows.append(
            Row(
                f"5. hub CPU per signed WebSub POST ({callbacks} callbacks)",
                hub_ms,
                "ms",
                base_ms,
                "aiohttp client",
                ("max", 0.15),
                "; ".join(notes),
                complete=res["complete"] and base["complete"],
            )
        )
        print(
            f"  5. delivery CPU: hub {hub_cpu:.2f} s for {posts:,} POSTs = {hub_ms:.3f} ms/POST; "
            f"aiohttp client {own:.2f} s for {base['posts']:,} = {base_ms:.3f} ms/POST",
            flush=True,
        )

    async def callbacks_sample(self) -> bytes:
        async with self.session.get(self.callbacks.base + "/ctl/sample") as resp:
            return await resp.read()

    async def idle(self) -> None:
        """Active clients' latency and publish round trips without, then with, idle ones."""
        s = self.sizes
        if self.idle_ctl is None:
            raise RuntimeError("the idle figure needs the idle helper process")
        port = self.hub.rsplit(":", 1)[1]
        url = f"{self.hub}/topics/idleactive"
        for topic in ("idleactive", "idlequiet"):
            await self.session.post(
                f"{self.hub}/topics/{topic}",
                data=notification(self.fresh(1), 1),
                headers=XML_HEADERS,
            )
        got = await self.ws.call(
            "POST", "/ctl/connect", url=f"ws://{HOST}:{port}/topics/idleactive/ws"
        )
        if got["connected"] != s.ws_clients:
            raise RuntimeError(f"only {got['connected']} active clients connected")

        async def run(label: str) -> tuple[dict[str, Any], list[int]]:
            changes = round(s.idle_latency_seconds / 0.01) * 10
            rtts: list[int] = []
            await self.ws.reset(changes, latency=True)
            with self.cpu.measure(label):
                await paced(
                    self.session, url, 10, 0.01, s.idle_latency_seconds, self.fresh(changes), rtts
                )
                res = await self.ws.expect(60)
            if not res["complete"]:
                res["note"] = f"INCOMPLETE min {res['min_count']}/{changes}"
            return res, rtts

        base, base_rtts = await run("latency, no idle clients")
        k = s.idle_clients
        t0 = time.perf_counter()
        with self.cpu.measure(f"connecting {k:,} idle clients"):
            got = await self.idle_ctl.call(
                "POST", "/ctl/connect", wait=300, url=f"ws://{HOST}:{port}/topics/idlequiet/ws", n=k
            )
        connect_s = time.perf_counter() - t0
        if got["connected"] != k:
            raise RuntimeError(f"only {got['connected']:,} of {k:,} idle clients connected")
        await self.pause("idle")
        loaded, loaded_rtts = await run(f"latency, {k:,} idle clients")
        still = (await self.idle_ctl.call("GET", "/ctl/status"))["open"]
        await self.idle_ctl.call("POST", "/ctl/disconnect", wait=120)
        await self.ws.call("POST", "/ctl/disconnect")
        note = loaded.get("note", "") or ("" if still == k else f"only {still:,} idle still open")
        if not base["complete"]:
            note = "; ".join(filter(None, [note, f"no-idle run {base['note']}"]))
        complete = loaded["complete"] and base["complete"]
        rtt = {
            name: (percentile(v, 0.50) / 1e6, percentile(v, 0.99) / 1e6)
            for name, v in (("base", base_rtts), ("loaded", loaded_rtts))
        }
        self.rows.append(
            Row(
                f"6. WebSocket latency p50, {s.ws_clients} active + {k:,} idle",
                loaded["p50_ms"],
                "ms",
                base["p50_ms"],
                "no idle",
                note=note,
                complete=complete,
            )
        )
        self.rows.append(
            Row(
                f"6. WebSocket latency p99, {s.ws_clients} active + {k:,} idle",
                loaded["p99_ms"],
                "ms",
                base["p99_ms"],
                "no idle",
                ("max", 10),
                note,
                complete=complete,
            )
        )
        self.rows.append(
            Row(
                f"6. publish round trip p99 @1,000 changes/s, {k:,} idle",
                rtt["loaded"][1],
                "ms",
                rtt["base"][1],
                "no idle",
                ("max", 50),
            )
        )
        print(
            f"  6. {k:,} idle connected in {connect_s:.1f} s; active p50/p99 "
            f"{loaded['p50_ms']:.1f}/{loaded['p99_ms']:.1f} ms (no idle "
            f"{base['p50_ms']:.1f}/{base['p99_ms']:.1f}); publish round trip p50/p99 "
            f"{rtt['loaded'][0]:.1f}/{rtt['loaded'][1]:.1f} ms (no idle "
            f"{rtt['base'][0]:.1f}/{rtt['base'][1]:.1f})",
            flush=True,
        )


def callback_secret(i: int) -> str:
    """The ``hub.secret`` of callback path ``i`` in signed subscriptions."""
    return f"bench-secret-{i}"


FIGURES = ("publish", "fragments", "ws", "websub", "delivery-cpu", "idle")


def role_cmd(role: str, port: int, loop: str, sinks: int = 0) -> list[str]:
    """The command line of a helper process of this script."""
    cmd = [sys.executable, str(SCRIPT), "--role", role, "--port", str(port), "--loop", loop]
    return cmd + (["--sinks", str(sinks)] if sinks else [])


def hub_env(args: argparse.Namespace) -> dict[str, str]:
    """The hub's environment: the loop kind, room for the idle clients, ``--hub-env``."""
    env = {
        "RSHUB_UVLOOP": "true" if args.loop == "uvloop" else "false",
        "RSHUB_MAX_CONNECTIONS": "15000",
    }
    return env | dict(item.split("=", 1) for item in args.hub_env or ())


async def conduct(
    args: argparse.Namespace, procs: Processes, redis_url: str, redis_pid: int
) -> list[Row]:
    sizes = QUICK if args.quick else Sizes()
    figures = args.only or FIGURES
    py = sys.executable
    hub_port, bare_port, ws_port, cb_port, idle_port = (free_port() for _ in range(5))
    hub = procs.start(
        "hub",
        [
            py,
            "-m",
            "rshub",
            "serve",
            "--host",
            HOST,
            "--port",
            str(hub_port),
            "--redis-url",
            redis_url,
            "--allow-private-callbacks",  # the bench's callbacks are on loopback
            "--log-level",
            args.hub_log_level,
        ],
        env=hub_env(args),
        server=True,
        cwd=args.hub_src,
    )
    procs.start("bare", role_cmd("bare", bare_port, args.loop), server=True)
    procs.start("wsclients", role_cmd("wsclients", ws_port, args.loop, sizes.ws_clients))
    procs.start("callbacks", role_cmd("callbacks", cb_port, args.loop, sizes.websub_callbacks))
    if "idle" in figures:
        procs.start("idle", role_cmd("idle", idle_port, args.loop))
    connector = aiohttp.TCPConnector(limit=64)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        urls = {
            "hub": f"http://{HOST}:{hub_port}",
            "bare": f"http://{HOST}:{bare_port}",
            "wsclients": f"http://{HOST}:{ws_port}",
            "callbacks": f"http://{HOST}:{cb_port}",
        }
        if "idle" in figures:
            urls["idle"] = f"http://{HOST}:{idle_port}"
        for name, base in urls.items():
            await wait_healthy(session, base + "/healthz", procs, name)
        print(f"hub pid {hub.pid} at {urls['hub']}, redis {redis_url}", flush=True)
        bench = Bench(
            session=session,
            hub=urls["hub"],
            bare=urls["bare"],
            redis_url=redis_url,
            sizes=sizes,
            ws=Control(session, urls["wsclients"]),
            callbacks=Control(session, urls["callbacks"]),
            callbacks_base=await raw_callbacks(session, urls["callbacks"]),
            pause_before=set(args.pause_before or ()),
            hub_pid=hub.pid,
            cpu=CpuMeter(
                {"hub": hub.pid, "redis": redis_pid, "loadgen": os.getpid()}
                | {name: procs.procs[name].pid for name in urls if name != "hub"}
            ),
            idle_ctl=Control(session, urls["idle"]) if "idle" in urls else None,
            websub_aiohttp=args.websub_publisher == "aiohttp",
        )
        steps: dict[str, Callable[[], Awaitable[None]]] = {
            "publish": bench.publishes,
            "fragments": bench.fragments,
            "ws": bench.websocket,
            "websub": bench.websub,
            "delivery-cpu": bench.delivery_cpu,
            "idle": bench.idle,
        }
        for name in sorted(figures, key=FIGURES.index):
            await steps[name]()
            if hub.poll() is not None:
                raise RuntimeError(f"the hub exited during '{name}':\n{procs.log_tail('hub')}")
    return bench.rows


# -- conductor: --workers N ---------------------------------------------------------------


def child_pids(pid: int) -> list[int]:
    """The direct children of ``pid`` (the workers of ``rshub serve --workers N``)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


async def wait_workers(url: str, parent: int, count: int, timeout: float = 60.0) -> list[int]:
    """Wait until ``parent`` has ``count`` children and each answered ``/healthz`` on the
    shared port (new connection per request, so ``SO_REUSEPORT`` spreads them)."""
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        while time.monotonic() < deadline:
            kids = child_pids(parent)
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    if resp.status == 200:
                        seen.add(int((await resp.json())["pid"]))
            if len(kids) == count and seen >= set(kids):
                return sorted(kids)
            await asyncio.sleep(0.02)
    raise RuntimeError(f"{count} workers not all healthy after {timeout} s (saw {sorted(seen)})")


@dataclass
class WorkersResult:
    """One hub configuration of a ``--workers`` run: its rows and CPU per stretch."""

    label: str
    workers: int
    rows: list[Row]
    cpu: dict[str, dict[str, float]]

    def row(self, prefix: str) -> Row:
        return next(r for r in self.rows if r.figure.startswith(prefix))


async def conduct_workers(
    args: argparse.Namespace, procs: Processes, redis_url: str, redis_pid: int
) -> list[WorkersResult]:
    """Figures 1-3 for the single-process hub, then ``--workers N`` for each N, on one
    port, one Redis and the same helper processes, each beside its own bare baselines."""
    sizes = QUICK if args.quick else Sizes()
    counts = [worker_count(c) for c in args.workers.split(",")]
    py = sys.executable
    hub_port, bare_port, ws_port = (free_port() for _ in range(3))
    hub_cmd = [
        py, "-m", "rshub", "serve", "--host", HOST, "--port", str(hub_port),
        "--redis-url", redis_url, "--log-level", args.hub_log_level,
        "--allow-private-callbacks",  # the bench's callbacks are on loopback
    ]  # fmt: skip
    env = hub_env(args)
    bare = procs.start("bare", role_cmd("bare", bare_port, args.loop), server=True)
    wsclients = procs.start(
        "wsclients", role_cmd("wsclients", ws_port, args.loop, sizes.ws_clients)
    )
    urls = {
        "hub": f"http://{HOST}:{hub_port}",
        "bare": f"http://{HOST}:{bare_port}",
        "wsclients": f"http://{HOST}:{ws_port}",
    }
    configs = [("single process (no --workers)", 0)] + [(f"--workers {n}", n) for n in counts]
    results: list[WorkersResult] = []
    connector = aiohttp.TCPConnector(limit=64)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for name in ("bare", "wsclients"):
            await wait_healthy(session, urls[name] + "/healthz", procs, name)
        for label, n in configs:
            hub = procs.start(
                "hub",
                hub_cmd + (["--workers", str(n)] if n else []),
                env=env,
                server=True,
                cwd=args.hub_src,
            )
            await wait_healthy(session, urls["hub"] + "/healthz", procs, "hub")
            pids = {"hub": hub.pid}
            groups: dict[str, tuple[str, ...]] = {}
            if n > 1:  # --workers 1 runs the hub in the parent process itself
                kids = await wait_workers(urls["hub"] + "/healthz", hub.pid, n)
                pids = {"hub parent": hub.pid} | {f"w{k}": pid for k, pid in enumerate(kids)}
                groups = {"hub total": tuple(pids)}
            print(f"\n== hub {label}: pids {pids}", flush=True)
            cpu = CpuMeter(
                pids
                | {
                    "redis": redis_pid,
                    "loadgen": os.getpid(),
                    "bare": bare.pid,
                    "wsclients": wsclients.pid,
                },
                groups,
                report_others=True,
            )
            bench = Bench(
                session=session,
                hub=urls["hub"],
                bare=urls["bare"],
                redis_url=redis_url,
                sizes=sizes,
                ws=Control(session, urls["wsclients"]),
                callbacks=Control(session, urls["wsclients"]),
                callbacks_base="",
                pause_before=set(),
                hub_pid=hub.pid,
                cpu=cpu,
                raw_publish=True,
            )
            for step in (bench.publishes, bench.fragments, bench.websocket):
                await step()
                if hub.poll() is not None:
                    raise RuntimeError(f"the hub exited during {label}:\n{procs.log_tail('hub')}")
            # every process of the configuration must still be the one measured
            if n > 1 and sorted(child_pids(hub.pid)) != sorted(
                p for k, p in pids.items() if k[0] == "w"
            ):
                raise RuntimeError(
                    f"a worker was restarted during {label}:\n{procs.log_tail('hub')}"
                )
            results.append(WorkersResult(label, n, bench.rows, cpu.by_label))
            procs.stop("hub")
    return results


def _cores(used: dict[str, float], names: tuple[str, ...]) -> str:
    return ", ".join(f"{n} {used[n]:.2f}" for n in names if n in used and used[n] >= 0.02)


def print_workers(results: list[WorkersResult]) -> bool:
    """Per-configuration tables, where the CPU went, and the summary; True if every run
    was complete and the goal (``--workers 2`` >= 1.3x ``--workers 1`` on publishes/s) was
    met or not measured."""
    complete = all(r.complete for res in results for r in res.rows)
    for res in results:
        print_table(res.rows, f"Hub {res.label}")
        print()
        for stretch, used in res.cpu.items():
            hub_names = ("hub", "hub total", "hub parent", *(f"w{k}" for k in range(64)))
            print(
                f"  cores during {stretch}: "
                + _cores(used, (*hub_names, "redis", "loadgen", "bare", "wsclients", "others"))
            )
    single = results[0]
    by_workers = {r.workers: r for r in results}
    base_pub = single.row("1.").value
    print("\nScale-out summary (each row beside the baselines measured just before it)\n")
    header = (
        "| hub | publishes/s | bare 204 | x single | x w1 | per hub core | "
        "hub cores (per worker) | redis | loadgen | others | "
        "ingest changes/s | XADD | WS events/s | bare broadcast |"
    )
    print(header)
    print("|" + "|".join("---" for _ in range(14)) + "|")
    for res in results:
        pub, ing, ws = res.row("1."), res.row("2."), res.row("3. WebSocket events")
        used = res.cpu.get("hub publishes", {})
        workers = [used[k] for k in sorted(used) if k[0] == "w" and k[1:].isdigit()]
        hub_cores = used.get("hub total", used.get("hub", 0.0))
        per = f" ({' / '.join(f'{w:.2f}' for w in workers)})" if workers else ""
        w1 = by_workers.get(1)
        x_w1 = f"{pub.value / w1.row('1.').value:.2f}" if w1 else "—"
        print(
            f"| {res.label} | {pub.value:,.0f} | {pub.baseline or 0:,.0f} | "
            f"{pub.value / base_pub:.2f} | {x_w1} | {pub.value / max(hub_cores, 0.01):,.0f} | "
            f"{hub_cores:.2f}{per} | "
            f"{used.get('redis', 0):.2f} | {used.get('loadgen', 0):.2f} | "
            f"{used.get('others', 0):.2f} | "
            f"{ing.value:,.0f} | {ing.baseline or 0:,.0f} | {ws.value:,.0f} | "
            f"{ws.baseline or 0:,.0f} |"
        )
    if 1 in by_workers and 2 in by_workers:
        ratio = by_workers[2].row("1.").value / by_workers[1].row("1.").value
        met = ratio >= 1.3
        print(
            f"\ngoal --workers 2 >= 1.3x --workers 1 on publishes/s: {ratio:.2f} "
            f"{'PASS' if met else 'MISSED'}"
        )
        return met and complete
    return complete


async def flush_redis(url: str) -> None:
    """Empty Redis between ``--repeat`` runs, so each run starts from the same state."""
    from redis.asyncio import Redis

    redis = Redis.from_url(url)
    try:
        await redis.flushall()
    finally:
        await redis.aclose()


def print_repeats(runs: list[list[Row]]) -> bool:
    """Each figure's value per run and in how many runs its target was met; True if every
    target was met in at least 3 of 5 runs (60 %, rounded up) and no run lost events."""
    n = len(runs)
    needed = math.ceil(0.6 * n)
    figures = list(dict.fromkeys(r.figure for rows in runs for r in rows))
    print(f"\nSummary of {n} runs (target met in >= {needed} of {n} counts as met)\n")
    header = ["figure", *(f"run {k + 1}" for k in range(n)), "target", "met"]
    table = [header]
    ok = True
    for figure in figures:
        rows = [next((r for r in run if r.figure == figure), None) for run in runs]
        cells = [f"{number(r.value)} {r.unit}" + ("" if r.passed is not False else " ✗")
                 + ("" if r.complete else " INCOMPLETE") if r else "—" for r in rows]  # fmt: skip
        first = next(r for r in rows if r)
        if first.target is None:
            table.append([figure, *cells, "—", "info"])
            continue
        kind, bound = first.target
        goal = {"ratio": f"ratio >= {bound:g}", "min": f">= {bound:g}"}.get(kind, f"<= {bound:g}")
        k = sum(bool(r and r.passed) for r in rows)
        ok = ok and k >= needed
        table.append([figure, *cells, goal, f"{k} of {n}"])
    widths = [max(len(line[c]) for line in table) for c in range(len(header))]
    for i, line in enumerate(table):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lost = [k + 1 for k, run in enumerate(runs) if not all(r.complete for r in run)]
    if lost:
        print(f"\nINCOMPLETE: events never all arrived in run(s) {lost}: that fails the summary")
    return ok and not lost


#: Figures whose bench target is a ratio to their baseline, recorded as that ratio too, under
#: the names bench/results/benchmarks.json lists as current (the target for figure 1 is 0.6).
RATIO_FIGURES = {
    "1. single-change publishes/s": (
        "1. single-change publishes ÷ bare aiohttp 204",
        "× bare aiohttp",
        "≥ 0.6",
        0.6,
    ),
    "3. WebSocket events/s delivered": (
        "3. WebSocket events/s ÷ bare broadcast",
        "× bare broadcast",
        "≥ 0.5",
        0.5,
    ),
}


def kept(x: float) -> float:
    """A measured value as a record keeps it: rates whole, times to the microsecond."""
    return round(x) if abs(x) >= 1000 else round(x, 4)


def run_record(runs: list[list[Row]], command: str, date: str, hub_src: Path) -> dict[str, Any]:
    """The runs as one record of bench/results/hub.jsonl (``--record``): each figure's value
    per run beside its baseline and ratio per run, its target and in how many runs it was met.
    A run whose events did not all arrive gives that figure no value (noted)."""
    n = len(runs)
    figures: list[dict[str, Any]] = []
    for name in dict.fromkeys(r.figure for rows in runs for r in rows):
        rows = [r for run in runs for r in run if r.figure == name and r.complete]
        lost = sum(1 for run in runs for r in run if r.figure == name and not r.complete)
        if not rows:
            continue
        unit = rows[0].unit
        if unit == "/s":
            unit = next((u for u in ("changes/s", "events/s") if u in name), "/s")
        figure: dict[str, Any] = {"name": name, "unit": unit, "runs": [kept(r.value) for r in rows]}
        if all(r.baseline for r in rows):
            bases = [kept(r.baseline or 0) for r in rows]
            figure["baseline"] = {"name": rows[0].baseline_name, "runs": bases}
            figure["ratio"] = {"runs": [round(r.value / (r.baseline or 1), 3) for r in rows]}
        if rows[0].target is not None:
            kind, bound = rows[0].target
            figure["target"] = {"ratio": f"ratio >= {bound:g}", "min": f">= {bound:g}"}.get(
                kind, f"<= {bound:g}"
            )
            figure["met"] = f"{sum(bool(r.passed) for r in rows)} of {n}"
        if lost:
            figure["note"] = f"events never all arrived in {lost} of {n} runs: no value there"
        figures.append(figure)
        derived = next((v for k, v in RATIO_FIGURES.items() if name.startswith(k)), None)
        if derived and "ratio" in figure:
            ratio_name, ratio_unit, target, bound = derived
            ratios = figure["ratio"]["runs"]
            figures.append(
                {"name": ratio_name, "unit": ratio_unit, "runs": ratios, "target": target,
                 "met": f"{sum(x >= bound for x in ratios)} of {n}"}
            )  # fmt: skip
    record: dict[str, Any] = {
        "bench": "hub",
        "command": command,
        "date": date,
        "until": utc_now(),
        "commit": commit_of(hub_src),
        "machine": this_machine(),
        "runs": n,
        "figures": figures,
    }
    return {k: v for k, v in record.items() if v is not None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, shorter runs")
    parser.add_argument(
        "--only", action="append", choices=FIGURES, help="run only this figure (repeatable)"
    )
    parser.add_argument(
        "--pause-before",
        action="append",
        choices=FIGURES,
        help="print the hub pid and wait 10 s before this figure's hub run",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temp dir with the helper processes' logs"
    )
    parser.add_argument("--hub-log-level", default="WARNING", help="the hub's --log-level")
    parser.add_argument(
        "--appendfsync",
        choices=("always", "everysec", "no"),
        default="everysec",
        help="the embedded Redis's AOF fsync policy (RSHUB_APPENDFSYNC; default everysec)",
    )
    parser.add_argument(
        "--hub-env",
        action="append",
        metavar="RSHUB_X=VALUE",
        help="extra environment for the hub (repeatable), e.g. a setting",
    )
    parser.add_argument(
        "--workers",
        metavar="N,N,...",
        help="scale-out run: the single-process hub, then rshub serve --workers N for each N "
        "(figures 1-3, publishes through a raw HTTP load generator)",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="uvloop",
        help="event loop of the hub (RSHUB_UVLOOP), the helper processes and the conductor",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the figures N times (fresh hub, flushed Redis) and summarise",
    )
    parser.add_argument(
        "--placement",
        choices=("apart", "batch", "shared"),
        default="apart",
        help="apart (default): the hub and bare baselines on one CPU, the helpers and this "
        "conductor on the others; batch: helpers SCHED_BATCH; shared: left to the scheduler",
    )
    parser.add_argument(
        "--websub-publisher",
        choices=("raw", "aiohttp"),
        default="raw",
        help="figure 4's latency publishes: raw (default; stamped right before the bytes are "
        "written, as the bare fan-out) or aiohttp (stamped before its client builds the "
        "request: the figure before 2026-11-25)",
    )
    parser.add_argument(
        "--hub-src",
        type=Path,
        default=ROOT,
        metavar="DIR",
        help="run rshub serve from this checkout (e.g. a worktree of main); default this one",
    )
    parser.add_argument(
        "--role", choices=("bare", "wsclients", "callbacks", "idle"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="append the run (figures 1-6, not --workers) to bench/results/hub.jsonl",
    )
    parser.add_argument(
        "--code",
        choices=CODES,
        help="with --record: whose code this is (earlier: the code a change replaced, with "
        "--hub-src; bench/render.py shows only main's as current)",
    )
    parser.add_argument("--label", help="with --record: what this run is, beside the others")
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sinks", type=int, default=100, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.loop == "uvloop" and not uvloop_installed():
        parser.error("uvloop is not installed: pip install uvloop, or pass --loop asyncio")

    if args.role == "bare":
        role_bare(args.port, args.loop)
        return 0
    if args.role == "wsclients":
        role_wsclients(args.port, args.sinks, args.loop)
        return 0
    if args.role == "callbacks":
        role_callbacks(args.port, args.sinks, args.loop)
        return 0
    if args.role == "idle":
        role_idle(args.port, args.loop)
        return 0

    started = time.perf_counter()
    began = utc_now()
    nofile = raise_nofile()
    global PLACEMENT
    # --workers N needs every core for the hub's processes: nothing is pinned there.
    PLACEMENT = Placement.choose("shared" if args.workers else args.placement)
    args.hub_src = args.hub_src.resolve()
    print(
        f"rshub hub benchmark: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"{args.loop} loop, RLIMIT_NOFILE {nofile}, {'quick' if args.quick else 'full'} run"
        + (f", {args.repeat} runs" if args.repeat > 1 else "")
        + f"; {PLACEMENT.describe()}; hub from {args.hub_src}",
        flush=True,
    )
    runs: list[list[Row]] = []
    with bench_run("rshub-bench-", args.keep, args.appendfsync) as harness:
        procs, redis = harness.procs, harness.redis
        try:
            redis_url = redis.start()  # before the conductor is placed: Redis is not a helper
            PLACEMENT.helper()  # this conductor, and the XADD clients it spawns, are helpers
            with asyncio.Runner(loop_factory=lambda: new_loop(args.loop)) as runner:
                if args.workers:
                    budget = 240.0 * (1 + len(args.workers.split(",")))
                    results = runner.run(
                        asyncio.wait_for(
                            conduct_workers(args, procs, redis_url, redis.pid or 0), budget
                        )
                    )
                for k in range(0 if args.workers else args.repeat):
                    if k:
                        runner.run(flush_redis(redis_url))
                    rows = runner.run(
                        asyncio.wait_for(conduct(args, procs, redis_url, redis.pid or 0), 600)
                    )
                    procs.stop_all()
                    runs.append(rows)
                    if args.repeat > 1:
                        print_table(rows, f"Run {k + 1} of {args.repeat}")
                        print(flush=True)
        except FAILURES as exc:
            return harness.failed("benchmark", exc)
    if args.workers:
        met = print_workers(results)
        print(f"\n({time.perf_counter() - started:.0f} s wall)")
        return 0 if met else 2
    if len(runs) == 1:
        print_table(runs[0], f"Results ({time.perf_counter() - started:.0f} s wall)")
        status = exit_status(runs[0])
    else:
        status = 0 if print_repeats(runs) else 2
        print(f"\n({time.perf_counter() - started:.0f} s wall)")
    if args.record:
        command = " ".join(["bench/hub.py", *(a for a in sys.argv[1:] if a != "--record")])
        record = run_record(runs, command, began, args.hub_src)
        record |= {k: v for k, v in (("code", args.code), ("label", args.label)) if v}
        print(f"recorded in {append_record(record)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
