"""Benchmark the hub at scale: many WebSub subscriptions, many idle WebSocket clients, a
topic of a million resources.

Run ``.venv/bin/python bench/scale.py`` from the repository root (``--quick`` for a short
run; ``--only websub|websocket|resourcelist``). Everything runs on 127.0.0.1 and is killed
at the end:

1. **WebSub** (full: 100,000 subscriptions over 1,000 topics; quick: 10,000 over 100). An
   embedded ``redis-server``, one hub process (``rshub serve --redis-url``, with
   ``RSHUB_ALLOW_PRIVATE_CALLBACKS=true``) and one aiohttp process answering every callback
   path ``/cb/{i}`` (the challenge to verification GETs, 204 to deliveries). After one
   change per topic, the idle hub's RSS (``/proc/PID/status`` VmRSS) and Redis's
   ``used_memory`` are the baseline. Every subscription is then requested through the hub's
   ``POST /`` form; verification is asynchronous, so the bench waits until the topics'
   subscription hashes in Redis hold them all and ``/metrics`` counts them all active. It
   reports memory per subscription, then the *steady* figure: one change published to
   every topic, time until every callback received it. Then the hub is restarted (SIGTERM,
   start again): time to exit, to answer ``/healthz``, to count every subscription active in
   ``/metrics``, and until a change published to every topic as soon as ``/healthz``
   answered has reached every callback -- beside the steady figure.
2. **WebSocket** (full and quick: 10,000 idle clients). A fresh hub on a flushed Redis; 100
   active clients on one topic (``bench/hub.py --role wsclients``) and the idle ones on
   another topic with no traffic (held by a separate helper process). Publish-to-receive
   p50/p99 of the active clients at 1,000 changes/s, with no idle clients, with the idle
   ones connected, and again after they left; hub RSS at each step (target < 1 GiB with
   the idle clients).
3. **Resource List** (full: one topic of 1,000,000 URIs; quick: 100,000; ``--resources N``),
   published 1,000 changes at a time, 4 in flight, beside a fresh topic's publishes before
   and after. Redis bytes per URI of the folded Resource List (``MEMORY USAGE``, exact).
   Time to first byte of every document of the big topic beside the same documents of a
   small one and ``/healthz``: the Resource List's first request (no snapshot yet: 503 with
   ``Retry-After`` within ``document_wait_seconds``), the time until its snapshot,
   built in the background, is served, and, after one more publish, a reader's answer
   while the next is built (the last snapshot, at once). Then restart -> ``/healthz`` 200,
   twice, beside a hub on an empty database, and the Resource List's first byte after it.

The conductor raises its ``RLIMIT_NOFILE`` soft limit to the hard limit; the processes it
starts inherit it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent
sys.path.insert(0, str(ROOT))

from bench.hub import (  # noqa: E402
    FAILURES,
    HOST,
    XML_HEADERS,
    Control,
    CpuMeter,
    Processes,
    bench_run,
    notification,
    paced,
    raise_nofile,
    role_idle,
    rss_bytes,
    serve,
    wait_healthy,
)
from tests.support import free_port  # noqa: E402

#: Prometheus writes every sample as a float (``500.0``).
_ACTIVE = re.compile(r'^rshub_subscriptions\{state="active"\} ([0-9.e+]+)$', re.M)
_CLIENTS = re.compile(r'^rshub_stream_clients\{transport="\w+"\} ([0-9.e+]+)$', re.M)


#: The hub's --log-level (``--hub-log-level``).
LOG_LEVEL = ["WARNING"]


@dataclass(frozen=True)
class Sizes:
    subscriptions: int = 100_000
    topics: int = 1_000
    subscribe_concurrency: int = 64
    idle_clients: int = 10_000
    active_clients: int = 100
    latency_seconds: float = 10.0
    #: Bound on each long wait (subscribing, verification, restart, delivery).
    wait_seconds: float = 900.0


QUICK = Sizes(subscriptions=10_000, topics=100, latency_seconds=5.0, wait_seconds=300.0)


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


# -- helper process: many callback paths ----------------------------------------------


def role_callbacks(port: int, sinks: int) -> None:
    """``/cb/{i}``: the challenge to verification GETs, 204 to deliveries. Records which
    paths were verified and which received a delivery since the last ``/ctl/reset``."""
    raise_nofile()
    verified = bytearray(sinks)
    received = bytearray(sinks)
    state = {"verified": 0, "received": 0, "deliveries": 0, "done_ns": 0}
    reached = asyncio.Event()
    target = {"n": sinks}

    async def verify(request: web.Request) -> web.Response:
        i = int(request.match_info["i"])
        if request.query.get("hub.mode") == "subscribe" and not verified[i]:
            verified[i] = 1
            state["verified"] += 1
        return web.Response(text=request.query.get("hub.challenge", ""))

    async def deliver(request: web.Request) -> web.Response:
        await request.read()
        i = int(request.match_info["i"])
        state["deliveries"] += 1
        if not received[i]:
            received[i] = 1
            state["received"] += 1
            if state["received"] >= target["n"] and not reached.is_set():
                state["done_ns"] = time.perf_counter_ns()
                reached.set()
        return web.Response(status=204)

    async def reset(request: web.Request) -> web.Response:
        nonlocal reached
        received[:] = bytes(sinks)
        state.update(received=0, deliveries=0, done_ns=0)
        target["n"] = int(request.query.get("target", sinks))
        reached = asyncio.Event()
        return web.json_response({"ok": True})

    async def wait(request: web.Request) -> web.Response:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reached.wait(), float(request.query["timeout"]))
        return web.json_response(state | {"complete": reached.is_set()})

    async def status(_request: web.Request) -> web.Response:
        return web.json_response(state)

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/cb/{i:\\d+}", verify)
    app.router.add_post("/cb/{i:\\d+}", deliver)
    app.router.add_post("/ctl/reset", reset)
    app.router.add_post("/ctl/wait", wait)
    app.router.add_get("/ctl/status", status)
    app.router.add_get("/healthz", healthz)
    serve(app, port, backlog=4096)


# -- conductor --------------------------------------------------------------------------


class Hub:
    """The hub process: start, stop, and what it reports."""

    def __init__(self, procs: Processes, session: aiohttp.ClientSession, redis_url: str) -> None:
        self.procs = procs
        self.session = session
        self.redis_url = redis_url
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.pid = 0
        #: ``rshub serve --workers``.
        self.workers = 1
        # Room for the 10,000 idle WebSockets plus the active clients and the bench's own
        # requests: the default cap (10,000) refuses the last of them with 503.
        self.max_connections = 15_000

    def start(self, **settings: str) -> None:
        """Start it; ``settings``: more ``RSHUB_*`` variables."""
        cmd = [sys.executable, "-m", "rshub", "serve", "--host", HOST, "--port", str(self.port),
               "--redis-url", self.redis_url, "--log-level", LOG_LEVEL[0],
               "--workers", str(self.workers)]  # fmt: skip
        env = {
            "RSHUB_ALLOW_PRIVATE_CALLBACKS": "true",
            "RSHUB_MAX_CONNECTIONS": str(self.max_connections),
        }
        self.pid = self.procs.start("hub", cmd, env=env | settings).pid

    async def healthy(self, timeout: float) -> None:
        await wait_healthy(self.session, self.url + "/healthz", self.procs, "hub", timeout)

    def stop(self, timeout: float) -> None:
        self.procs.stop("hub", timeout)

    async def active(self) -> int:
        """Running delivery workers, from ``/metrics``."""
        async with self.session.get(self.url + "/metrics") as resp:
            match = _ACTIVE.search(await resp.text())
        return int(float(match.group(1))) if match else 0

    async def consumers_below(self, bound: int) -> int:
        """1 once ``/metrics`` counts fewer than ``bound`` live stream clients, else 0."""
        async with self.session.get(self.url + "/metrics") as resp:
            clients = sum(float(n) for n in _CLIENTS.findall(await resp.text()))
        return int(clients < bound)

    async def publish_everywhere(self, topics: int, first: int) -> None:
        """One change to each topic, 32 in flight."""
        gate = asyncio.Semaphore(32)

        async def one(k: int) -> None:
            async with (
                gate,
                self.session.post(
                    f"{self.url}/topics/t{k}",
                    data=notification(first + k, 1),
                    headers=XML_HEADERS,
                ) as resp,
            ):
                await resp.read()
                if resp.status != 202:
                    raise RuntimeError(f"publish to t{k}: {resp.status}")

        await asyncio.gather(*(one(k) for k in range(topics)))


async def redis_used_memory(redis: Any) -> int:
    return int((await redis.info("memory"))["used_memory"])


async def stored_subscriptions(redis: Any, topics: int) -> int:
    pipe = redis.pipeline(transaction=False)
    for k in range(topics):
        pipe.hlen(f"rshub:{{t{k}}}:subs")
    return int(sum(await pipe.execute()))


async def until(check: Any, goal: int, timeout: float, what: str, every: float = 0.5) -> float:
    """Poll ``check()`` until it reaches ``goal``; seconds taken. Bounded by ``timeout``."""
    start = time.perf_counter()
    value = 0
    while time.perf_counter() - start < timeout:
        value = await check()
        if value >= goal:
            return time.perf_counter() - start
        await asyncio.sleep(every)
    raise RuntimeError(f"{what}: {value:,} of {goal:,} after {timeout:.0f} s")


@dataclass
class Report:
    lines: list[tuple[str, str, str]]
    #: The measured numbers by key (``"changes/s"``, ``"p99 ms, 10000 idle"``...), for a
    #: caller that records them (bench/growth.py).
    values: dict[str, float] = field(default_factory=dict)

    def value(self, key: str, number: float) -> None:
        self.values[key] = number

    def add(self, figure: str, value: str, baseline: str = "—") -> None:
        self.lines.append((figure, value, baseline))
        print(f"  {figure}: {value}" + (f"  (baseline: {baseline})" if baseline != "—" else ""),
              flush=True)  # fmt: skip

    def print(self, title: str) -> None:
        header = ("figure", "value", "baseline (same run)")
        rows = [header, *self.lines]
        widths = [max(len(r[c]) for r in rows) for c in range(3)]
        print(f"\n{title}\n")
        for n, row in enumerate(rows):
            print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
            if n == 0:
                print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


async def bench_websub(
    sizes: Sizes, procs: Processes, redis_url: str, redis_pid: int, report: Report
) -> None:
    from redis.asyncio import Redis

    n, topics = sizes.subscriptions, sizes.topics
    py, me = sys.executable, str(SCRIPT)
    cb_port = free_port()
    callbacks = procs.start(
        "callbacks", [py, me, "--role", "callbacks", "--port", str(cb_port), "--sinks", str(n)]
    )
    cb_base = f"http://{HOST}:{cb_port}"
    redis = Redis.from_url(redis_url)
    connector = aiohttp.TCPConnector(limit=128)
    timeout = aiohttp.ClientTimeout(total=sizes.wait_seconds + 30)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            hub = Hub(procs, session, redis_url)
            hub.start()
            await hub.healthy(60)
            await wait_healthy(session, cb_base + "/healthz", procs, "callbacks")
            ctl = Control(session, cb_base)

            def meter() -> CpuMeter:
                return CpuMeter(
                    {
                        "hub": hub.pid,
                        "redis": redis_pid,
                        "callbacks": callbacks.pid,
                        "loadgen": os.getpid(),
                    },
                    report_others=True,
                )

            await hub.publish_everywhere(topics, 0)
            await asyncio.sleep(1.0)  # let the publishes' buffers go before the baseline
            rss0, mem0 = rss_bytes(hub.pid), await redis_used_memory(redis)
            report.add("idle hub RSS (one change per topic)", mib(rss0))
            report.add("idle Redis used_memory", mib(mem0))

            # subscribe everything through POST /
            gate = asyncio.Semaphore(sizes.subscribe_concurrency)
            failures: list[str] = []

            async def subscribe(i: int) -> None:
                form = {
                    "hub.mode": "subscribe",
                    "hub.topic": f"{hub.url}/topics/t{i % topics}",
                    "hub.callback": f"{cb_base}/cb/{i}",
                }
                async with gate, session.post(hub.url + "/", data=form) as resp:
                    if resp.status != 202:
                        failures.append(f"{i}: {resp.status} {await resp.text()}")

            cpu = meter()
            with cpu.measure("subscribing"):
                t0 = time.perf_counter()
                await asyncio.gather(*(subscribe(i) for i in range(n)))
                t_req = time.perf_counter() - t0
                if failures:
                    raise RuntimeError(f"{len(failures)} subscribe requests failed: {failures[:3]}")
                await until(
                    lambda: stored_subscriptions(redis, topics),
                    n,
                    sizes.wait_seconds,
                    "subscriptions stored in Redis",
                )
                t_stored = time.perf_counter() - t0
                await until(hub.active, n, sizes.wait_seconds, "subscriptions active (/metrics)")
                t_active = time.perf_counter() - t0
            report.value("subscribe requests/s", n / t_req)
            report.value("subscriptions verified and stored/s", n / t_stored)
            report.add(
                f"{n:,} subscribe requests answered (64 in flight)",
                f"{t_req:.1f} s ({n / t_req:,.0f}/s)",
            )
            report.add(
                "... all verified and stored / all active",
                f"{t_stored:.1f} s ({n / t_stored:,.0f}/s) / {t_active:.1f} s",
            )
            await asyncio.sleep(1.0)
            rss1, mem1 = rss_bytes(hub.pid), await redis_used_memory(redis)
            report.value("hub RSS B per subscription", (rss1 - rss0) / n)
            report.value("Redis B per subscription", (mem1 - mem0) / n)
            report.add(
                "hub RSS per subscription (after subscribing)",
                f"{(rss1 - rss0) / n:,.0f} B ({mib(rss1)} total)",
                f"idle hub {mib(rss0)}",
            )
            report.add(
                "Redis used_memory per subscription",
                f"{(mem1 - mem0) / n:,.0f} B ({mib(mem1)} total)",
                f"idle {mib(mem0)}",
            )

            # steady state: one change per topic reaches every callback
            async def everyone(first: int, label: str) -> float:
                await ctl.call("POST", "/ctl/reset", target=n)
                with cpu.measure(label):
                    t0 = time.perf_counter_ns()
                    await hub.publish_everywhere(topics, first)
                    got = await ctl.call(
                        "POST", "/ctl/wait", wait=sizes.wait_seconds, timeout=sizes.wait_seconds
                    )
                if not got["complete"]:
                    raise RuntimeError(f"{label}: only {got['received']:,} of {n:,} callbacks")
                return (int(got["done_ns"]) - t0) / 1e9

            steady = await everyone(topics, "steady delivery to every callback")
            rss2, mem2 = rss_bytes(hub.pid), await redis_used_memory(redis)
            report.value("deliveries/s", n / steady)
            report.add(
                f"one change per topic -> all {n:,} callbacks (running hub)",
                f"{steady:.2f} s ({n / steady:,.0f} deliveries/s)",
            )
            report.add(
                "hub RSS / Redis used_memory per subscription (after one delivery each)",
                f"{(rss2 - rss0) / n:,.0f} B / {(mem2 - mem0) / n:,.0f} B",
                f"idle {mib(rss0)} / {mib(mem0)}",
            )

            # restart
            t0 = time.perf_counter()
            hub.stop(timeout=120)
            t_exit = time.perf_counter() - t0
            await ctl.call("POST", "/ctl/reset", target=n)
            with cpu.measure("restart until every callback got a change"):
                t0 = time.perf_counter()
                t0_ns = time.perf_counter_ns()
                hub.start()
                cpu.pids["hub"] = hub.pid  # the old one has exited: it counted 0 at the start
                await hub.healthy(sizes.wait_seconds)
                t_health = time.perf_counter() - t0
                active_task = asyncio.create_task(
                    until(hub.active, n, sizes.wait_seconds, "active after restart", every=0.1)
                )
                await hub.publish_everywhere(topics, 2 * topics)
                got = await ctl.call(
                    "POST", "/ctl/wait", wait=sizes.wait_seconds, timeout=sizes.wait_seconds
                )
                t_active = await active_task
            if not got["complete"]:
                raise RuntimeError(f"after restart only {got['received']:,} of {n:,} callbacks")
            t_all = (got["done_ns"] - t0_ns) / 1e9
            report.value("restart: SIGTERM -> exit s", t_exit)
            report.value("restart: start -> /healthz s", t_health)
            report.value("restart: start -> all active s", t_health + t_active)
            report.value("restart: start -> every callback s", t_all)
            report.add("restart: SIGTERM -> exit", f"{t_exit:.2f} s")
            report.add("restart: start -> /healthz 200", f"{t_health:.2f} s")
            report.add(f"restart: start -> /metrics active = {n:,}", f"{t_health + t_active:.2f} s")
            report.add(
                "restart: start -> every callback got the change published at /healthz",
                f"{t_all:.2f} s",
                f"running hub: {steady:.2f} s from publish",
            )
            report.add("restart: hub RSS after", mib(rss_bytes(hub.pid)))
            for line in cpu.lines:
                report.add("cores", line.split("cores used during ", 1)[1])
            hub.stop(timeout=120)
    finally:
        await redis.aclose()
        procs.stop("callbacks", 15)


#: Idle clients per helper process at most: each process connects from its own source
#: address, and one address reaches the hub's port from the ~28,000 ephemeral ports of
#: ``net.ipv4.ip_local_port_range`` only.
CLIENTS_PER_SOURCE = 25_000


def idle_source(chunk: int) -> str | None:
    """The loopback address of the ``chunk``-th helper's idle clients (the first: the
    default, 127.0.0.1; then 127.0.0.2, 127.0.0.3, ...)."""
    return None if chunk == 0 else f"127.0.0.{1 + chunk}"


def tree_rss(pid: int) -> int:
    """VmRSS of ``pid`` and its children (``--workers N``: the worker processes)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        kids = [int(k) for k in children.read_text().split()]
    except (OSError, ValueError):
        kids = []
    return rss_bytes(pid) + sum(rss_bytes(k) for k in kids)


class IdleClients:
    """Idle WebSocket clients held by helper processes (``--role idle``) of ``per_process``
    clients each: a process's open files are bounded by ``RLIMIT_NOFILE``, and its source
    address by the ephemeral ports."""

    def __init__(self, procs: Processes, session: aiohttp.ClientSession, per_process: int) -> None:
        self.procs = procs
        self.session = session
        self.per_process = min(per_process, CLIENTS_PER_SOURCE)
        self.names: list[str] = []
        self.ctls: list[Control] = []
        self.connected = 0

    async def helper(self, i: int) -> Control:
        """The ``i``-th helper, started (and those before it) if need be."""
        while len(self.ctls) <= i:
            name = "idle" if not self.names else f"idle{len(self.names)}"
            port = free_port()
            self.procs.start(
                name, [sys.executable, str(SCRIPT), "--role", "idle", "--port", str(port)]
            )
            await wait_healthy(self.session, f"http://{HOST}:{port}/healthz", self.procs, name)
            self.names.append(name)
            self.ctls.append(Control(self.session, f"http://{HOST}:{port}"))
        return self.ctls[i]

    async def grow(self, url: str, total: int) -> None:
        """Connect more clients to ``url`` until ``total`` are open."""
        while self.connected < total:
            i = self.connected // self.per_process
            more = min(total, (i + 1) * self.per_process) - self.connected
            ctl = await self.helper(i)
            query: dict[str, Any] = {"url": url, "n": more}
            if (source := idle_source(i)) is not None:
                query["source"] = source
            got = await ctl.call("POST", "/ctl/connect", wait=600, **query)
            if got["connected"] != more:
                raise RuntimeError(
                    f"only {self.connected + got['connected']:,} of {total:,} idle clients "
                    f"connected (helper {i}, from {source or HOST})"
                )
            self.connected += more

    async def still_open(self) -> int:
        return sum([(await ctl.call("GET", "/ctl/status"))["open"] for ctl in self.ctls])

    async def disconnect(self) -> None:
        for ctl in self.ctls:
            await ctl.call("POST", "/ctl/disconnect", wait=120)
        self.connected = 0

    def stop(self) -> None:
        for name in self.names:
            self.procs.stop(name, 60)
        self.names, self.ctls = [], []


async def bench_websocket(
    sizes: Sizes,
    procs: Processes,
    redis_url: str,
    redis_pid: int,
    report: Report,
    *,
    idle_steps: Sequence[int] | None = None,
    flush: bool = True,
    workers: int = 1,
    idle_per_process: int = CLIENTS_PER_SOURCE,
) -> None:
    """Active clients' publish-to-receive latency with no idle client, then with each of
    ``idle_steps`` idle clients connected (default: ``sizes.idle_clients``), and after they
    left. ``flush``: empty Redis first (else the hub runs over what it holds); ``workers``:
    ``rshub serve --workers``; ``idle_per_process``: idle clients per helper process."""
    from redis.asyncio import Redis

    if idle_steps is None:
        idle_steps = (sizes.idle_clients,)
    steps = sorted({k for k in idle_steps if k > 0})
    if flush:
        redis = Redis.from_url(redis_url)
        await redis.flushall()
        await redis.aclose()
    py, hub_py = sys.executable, str(SCRIPT.parent / "hub.py")
    ws_port = free_port()
    active = procs.start(
        "wsclients",
        [
            py,
            hub_py,
            "--role",
            "wsclients",
            "--port",
            str(ws_port),
            "--sinks",
            str(sizes.active_clients),
        ],
    )
    connector = aiohttp.TCPConnector(limit=64)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        hub = Hub(procs, session, redis_url)
        hub.workers = workers
        hub.max_connections = max(hub.max_connections, max(steps, default=0) + 5_000)
        hub.start()
        await hub.healthy(120)
        await wait_healthy(session, f"http://{HOST}:{ws_port}/healthz", procs, "wsclients")
        ws = Control(session, f"http://{HOST}:{ws_port}")
        idlers = IdleClients(procs, session, idle_per_process)
        await idlers.helper(0)
        cpu = CpuMeter(
            {
                "hub": hub.pid,
                "redis": redis_pid,
                "active clients": active.pid,
                "idle clients": procs.procs["idle"].pid,
                "loadgen": os.getpid(),
            },
            report_others=True,
        )
        ws_base = f"ws://{HOST}:{hub.port}/topics"
        for topic in ("active", "quiet"):
            await session.post(
                f"{hub.url}/topics/{topic}", data=notification(0, 1), headers=XML_HEADERS
            )
        got = await ws.call("POST", "/ctl/connect", url=f"{ws_base}/active/ws")
        if got["connected"] != sizes.active_clients:
            raise RuntimeError(f"only {got['connected']} active clients connected")
        seq = iter(range(1, 10**9, 100_000))

        async def latency(label: str) -> dict[str, Any]:
            changes = round(sizes.latency_seconds / 0.01) * 10
            await ws.reset(changes, latency=True)
            with cpu.measure(label):
                await paced(
                    session, f"{hub.url}/topics/active", 10, 0.01, sizes.latency_seconds, next(seq)
                )
                res = await ws.expect(60)
            if not res["complete"]:
                raise RuntimeError(f"{label}: incomplete {res}")
            return res

        await asyncio.sleep(1.0)
        rss_quiet = tree_rss(hub.pid)
        base = await latency("latency, no idle clients")
        report.value("p50 ms, 0 idle", base["p50_ms"])
        report.value("p99 ms, 0 idle", base["p99_ms"])
        rss_base = tree_rss(hub.pid)
        t_connect = 0.0
        for k in steps:
            before = idlers.connected
            t0 = time.perf_counter()
            with cpu.measure(f"connecting idle clients up to {k:,}"):
                await idlers.grow(f"{ws_base}/quiet/ws", k)
            t_connect = time.perf_counter() - t0
            report.value(f"idle connects/s, up to {k} idle", (k - before) / t_connect)
            await asyncio.sleep(1.0)
            rss_idle = tree_rss(hub.pid)
            loaded = await latency(f"latency, {k:,} idle clients")
            report.value(f"p50 ms, {k} idle", loaded["p50_ms"])
            report.value(f"p99 ms, {k} idle", loaded["p99_ms"])
            report.add(
                f"p50 / p99 publish->receive, {sizes.active_clients} active, {k:,} idle connected",
                f"{loaded['p50_ms']:.1f} / {loaded['p99_ms']:.1f} ms "
                f"({loaded['samples']:,} samples)",
                f"no idle: {base['p50_ms']:.1f} / {base['p99_ms']:.1f} ms",
            )
            which = " (target < 1 GiB)" if workers == 1 else f" ({workers} workers)"
            per_idle = (rss_idle - rss_base) / k / 1024
            report.value(f"hub RSS B per idle client, {k} idle", per_idle * 1024)
            report.add(
                f"hub RSS with {k:,} idle + {sizes.active_clients} active clients{which}",
                f"{mib(rss_idle)} ({per_idle:,.1f} KiB per idle client)",
                f"{sizes.active_clients} active only: {mib(rss_quiet)}, "
                f"{mib(rss_base)} after a run",
            )
        rss_loaded = tree_rss(hub.pid)
        still = await idlers.still_open()
        await idlers.disconnect()
        await until(
            lambda: hub.consumers_below(sizes.active_clients + 10),
            1,
            120,
            "hub closing the idle clients' streams",
        )
        after = await latency("latency, idle clients gone")
        report.value("p99 ms, idle gone", after["p99_ms"])
        rss_after = tree_rss(hub.pid)

        if steps:
            k = steps[-1]
            report.add(f"connect {k:,} idle clients (the last step)", f"{t_connect:.1f} s")
            report.add(f"idle clients still open after the run (of {k:,})", f"{still:,}")
            report.add("hub RSS after the latency runs", mib(rss_loaded))
        report.add(
            "p50 / p99 publish->receive, idle clients gone",
            f"{after['p50_ms']:.1f} / {after['p99_ms']:.1f} ms",
            f"no idle: {base['p50_ms']:.1f} / {base['p99_ms']:.1f} ms",
        )
        report.add("hub RSS after the idle clients left", mib(rss_after))
        for line in cpu.lines:
            report.add("cores", line.split("cores used during ", 1)[1])
        hub.stop(timeout=60)
        idlers.stop()
    procs.stop("wsclients", 15)


@dataclass(frozen=True)
class BigTopic:
    """The big-topic run: ``resources`` URIs published ``per_publish`` at a time."""

    resources: int = 1_000_000
    per_publish: int = 1_000
    in_flight: int = 4
    #: Publishes of the baseline topics (before and after the big one) and of the big
    #: topic's last, measured part.
    sample_publishes: int = 50
    #: Bound on the waits for a snapshot.
    wait_seconds: float = 600.0
    #: Wait for the snapshot after one more publish too (False: only its reader's first
    #: byte meanwhile; at 10,000,000 URIs the wait is a second build of many minutes).
    next_snapshot: bool = True


_AT = re.compile(rb'<rs:md capability="resourcelist" at="([^"]+)"')
_LOC = re.compile(rb"<loc>([^<]+)</loc>")


async def first_byte(session: aiohttp.ClientSession, url: str) -> tuple[float, int, bytes, Any]:
    """Seconds until the answer's head arrived, its status, body and headers."""
    t0 = time.perf_counter()
    async with session.get(url) as resp:
        ttfb = time.perf_counter() - t0
        body = await resp.read()
        return ttfb, resp.status, body, resp.headers


async def publish_batches(
    session: aiohttp.ClientSession, url: str, first: int, batches: int, size: BigTopic
) -> float:
    """``batches`` notifications of ``size.per_publish`` new URIs each (from URI ``first``),
    ``size.in_flight`` at a time; changes stored per second."""
    gate = asyncio.Semaphore(size.in_flight)

    async def one(b: int) -> None:
        async with gate:
            body = notification(first + b * size.per_publish, size.per_publish)
            async with session.post(url, data=body, headers=XML_HEADERS) as resp:
                await resp.read()
                if resp.status != 202:
                    raise RuntimeError(f"publish to {url}: {resp.status}")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(b) for b in range(batches)))
    return batches * size.per_publish / (time.perf_counter() - t0)


async def until_served(
    session: aiohttp.ClientSession, url: str, timeout: float, other_than: bytes | None = None
) -> tuple[float, bytes, float]:
    """Poll ``url`` until it is a 200 (with a snapshot ``at`` other than ``other_than``):
    seconds taken, the body, and the slowest answer's time to first byte meanwhile."""
    t0 = time.perf_counter()
    slowest = 0.0
    while time.perf_counter() - t0 < timeout:
        ttfb, status, body, _ = await first_byte(session, url)
        slowest = max(slowest, ttfb)
        if status == 200:
            found = _AT.search(body)
            if other_than is None or (found is not None and found.group(1) != other_than):
                return time.perf_counter() - t0, body, slowest
        elif status != 503:
            raise RuntimeError(f"{url}: {status} {body[:300]!r}")
        await asyncio.sleep(0.25)
    raise RuntimeError(f"{url} not served within {timeout:.0f} s")


async def start_to_healthy(hub: Hub, timeout: float, **settings: str) -> float:
    """Start ``hub``: seconds from exec until ``/healthz`` answered 200 (polled every 20 ms)."""
    t0 = time.perf_counter()
    hub.start(**settings)
    while time.perf_counter() - t0 < timeout:
        if hub.procs.procs["hub"].poll() is not None:
            raise RuntimeError(f"hub exited early:\n{hub.procs.log_tail('hub')}")
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with hub.session.get(
                hub.url + "/healthz", timeout=aiohttp.ClientTimeout(total=2)
            ) as resp:
                if resp.status == 200:
                    return time.perf_counter() - t0
        await asyncio.sleep(0.02)
    raise RuntimeError(f"hub not healthy {timeout:.0f} s after its start")


async def bench_resourcelist(
    size: BigTopic, procs: Processes, redis_url: str, report: Report
) -> None:
    """A topic of ``size.resources`` URIs: publish rate, Redis bytes per URI, time to first
    byte of every document (the Resource List's first snapshot built in the background),
    and restart -> serving; each beside a baseline of the same run."""
    from redis.asyncio import Redis

    from hub.store import keys

    n = size.resources
    batches = n // size.per_publish
    measured = min(size.sample_publishes, batches // 2)
    redis = Redis.from_url(redis_url)
    await redis.flushall()
    empty_url = redis_url.rsplit("/", 1)[0] + "/1"  # another database: an empty hub
    # A reader right after a publish starts the next snapshot (the last one is served).
    settings = {"RSHUB_RESOURCELIST_SNAPSHOT_SECONDS": "0"}
    connector = aiohttp.TCPConnector(limit=64)
    timeout = aiohttp.ClientTimeout(total=size.wait_seconds)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            hub = Hub(procs, session, redis_url)
            hub.start(**settings)
            await hub.healthy(60)
            base = f"{hub.url}/topics"

            # publish: baseline topics before and after, the big topic's last part beside
            before = await publish_batches(session, f"{base}/small1", 0, measured, size)
            mem0 = await redis_used_memory(redis)
            t0 = time.perf_counter()
            bulk = await publish_batches(session, f"{base}/big", 0, batches - measured, size)
            last = await publish_batches(
                session, f"{base}/big", (batches - measured) * size.per_publish, measured, size
            )
            t_all = time.perf_counter() - t0
            after = await publish_batches(session, f"{base}/small2", 0, measured, size)
            report.value("changes/s", bulk)
            report.value("changes/s, the last publishes", last)
            report.value("changes/s, a fresh topic before", before)
            report.value("changes/s, a fresh topic after", after)
            report.add(
                f"publish {n:,} URIs to one topic ({size.per_publish:,} per publish, "
                f"{size.in_flight} in flight)",
                f"{t_all:.1f} s; {bulk:,.0f} changes/s, the last {measured} publishes "
                f"{last:,.0f}/s",
                f"a fresh topic: {before:,.0f}/s before, {after:,.0f}/s after",
            )
            mem1 = await redis_used_memory(redis)
            fold = int(await redis.memory_usage(keys.resources("big"), samples=0) or 0)
            stream = int(await redis.memory_usage(keys.events("big"), samples=0) or 0)
            events = int(await redis.xlen(keys.events("big")))
            report.value("Redis B per resource", (mem1 - mem0) / n)
            report.value("Redis B per resource, the fold", fold / n)
            report.value("Redis B per event, the stream", stream / max(events, 1))
            report.add(
                "Redis bytes per URI: the folded Resource List (MEMORY USAGE)",
                f"{fold / n:,.0f} B ({mib(fold)})",
                f"the topic's stream: {stream / max(events, 1):,.0f} B per event "
                f"({events:,} events); used_memory {(mem1 - mem0) / n:,.0f} B per URI",
            )

            # time to first byte of every document
            health, *_ = await first_byte(session, hub.url + "/healthz")
            report.value("first byte ms: /healthz", health * 1000)
            small = {}
            for name, path in (
                ("Capability List", "capabilitylist.xml"),
                ("topic URI (open Change List page)", ""),
                ("Change List index", "changelist.xml"),
                ("Change List page 1", "changelist/1.xml"),
                ("changes.xml", "changes.xml"),
            ):
                small[name], *_ = await first_byte(session, f"{base}/small1/{path}".rstrip("/"))
                ttfb, status, _, _ = await first_byte(session, f"{base}/big/{path}".rstrip("/"))
                report.value(f"first byte ms: {name}", ttfb * 1000)
                report.value(f"first byte ms: {name}, the small topic", small[name] * 1000)
                report.add(
                    f"first byte: {name}, {n:,}-URI topic",
                    f"{ttfb * 1000:,.0f} ms ({status})",
                    f"{measured * size.per_publish:,}-URI topic {small[name] * 1000:,.0f} ms; "
                    f"/healthz {health * 1000:.0f} ms",
                )
            listing = f"{base}/big/resourcelist.xml"
            ttfb, status, _, headers = await first_byte(session, listing)
            report.value("first byte ms: Resource List, first request", ttfb * 1000)
            report.add(
                "first byte: Resource List, first request (no snapshot yet)",
                f"{ttfb * 1000:,.0f} ms ({status}, Retry-After {headers.get('Retry-After')})",
                f"/healthz {health * 1000:.0f} ms",
            )
            took, index, slowest = await until_served(session, listing, size.wait_seconds)
            report.value("Resource List first snapshot s", ttfb + took)
            report.add(
                "... first snapshot served (built in the background)",
                f"{ttfb + took:.1f} s after the first request; slowest answer meanwhile "
                f"{slowest * 1000:,.0f} ms",
            )
            ttfb, status, index, _ = await first_byte(session, listing)
            report.value("first byte ms: Resource List index", ttfb * 1000)
            if b"<sitemapindex" in index:
                pages = [m.group(1).decode() for m in _LOC.finditer(index)]
                page_ttfb, page_status, _, _ = await first_byte(session, pages[0])
                report.value("first byte ms: Resource List page 1", page_ttfb * 1000)
            else:  # one page: the list itself (its <loc>s are the resources)
                pages, page_ttfb, page_status = [listing], ttfb, status
            report.add(
                "first byte: Resource List index / its first page",
                f"{ttfb * 1000:,.0f} ms ({status}) / {page_ttfb * 1000:,.0f} ms ({page_status}); "
                f"{len(pages)} pages",
                f"/healthz {health * 1000:.0f} ms",
            )
            at = _AT.search(index)
            assert at is not None
            await publish_batches(session, f"{base}/big", n, 1, size)
            ttfb, status, during, _ = await first_byte(session, listing)
            same = (found := _AT.search(during)) is not None and found.group(1) == at.group(1)
            report.value("first byte ms: Resource List, next snapshot being built", ttfb * 1000)
            report.add(
                "first byte: Resource List after a publish (next snapshot being built)",
                f"{ttfb * 1000:,.0f} ms ({status}, "
                f"{'the last snapshot' if same else 'a new snapshot'}, at={at.group(1).decode()})",
                f"/healthz {health * 1000:.0f} ms",
            )
            if size.next_snapshot:
                took, _, slowest = await until_served(
                    session, listing, size.wait_seconds, other_than=at.group(1)
                )
                report.value("Resource List next snapshot s", took)
                report.add(
                    "... next snapshot served",
                    f"{took:.1f} s later; slowest answer meanwhile {slowest * 1000:,.0f} ms",
                )

            # restart -> serving, beside a hub on an empty database
            rounds: dict[str, list[float]] = {"big": [], "empty": []}
            first_rl: list[tuple[float, int]] = []
            empty = Hub(procs, session, empty_url)
            empty.port, empty.url = hub.port, hub.url
            for _ in range(2):
                for name, which in (("big", hub), ("empty", empty)):
                    if "hub" in procs.procs:
                        procs.stop("hub", 120)
                    rounds[name].append(await start_to_healthy(which, 120, **settings))
                    if name == "big":
                        ttfb, status, _, _ = await first_byte(session, listing)
                        first_rl.append((ttfb, status))
            procs.stop("hub", 120)
            report.value("restart: start -> /healthz s", min(rounds["big"]))
            report.value("restart: start -> /healthz s, an empty hub", min(rounds["empty"]))
            report.value("first byte ms: Resource List after a restart", first_rl[0][0] * 1000)
            report.add(
                f"restart: start -> /healthz 200, {n:,}-URI topic (2 rounds)",
                " / ".join(f"{t:.2f} s" for t in rounds["big"]),
                "empty hub: " + " / ".join(f"{t:.2f} s" for t in rounds["empty"]),
            )
            report.add(
                "restart: first byte of the Resource List just after /healthz",
                " / ".join(f"{t * 1000:,.0f} ms ({s})" for t, s in first_rl),
            )
    finally:
        await redis.aclose()


async def conduct(
    args: argparse.Namespace, procs: Processes, redis_url: str, redis_pid: int
) -> Report:
    sizes = QUICK if args.quick else Sizes()
    report = Report([])
    if args.only in (None, "websub"):
        await bench_websub(sizes, procs, redis_url, redis_pid, report)
    if args.only in (None, "websocket"):
        await bench_websocket(sizes, procs, redis_url, redis_pid, report)
    if args.only in (None, "resourcelist"):
        big = BigTopic(resources=args.resources or (100_000 if args.quick else 1_000_000))
        await bench_resourcelist(big, procs, redis_url, report)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="10,000 subscriptions, 100 topics")
    parser.add_argument("--only", choices=("websub", "websocket", "resourcelist"))
    parser.add_argument(
        "--resources", type=int, help="URIs of the big topic (default 1,000,000; quick 100,000)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    parser.add_argument("--hub-log-level", default="WARNING", help="the hub's --log-level")
    parser.add_argument("--role", choices=("callbacks", "idle"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sinks", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "callbacks":
        role_callbacks(args.port, args.sinks)
        return 0
    if args.role == "idle":
        role_idle(args.port)
        return 0

    LOG_LEVEL[0] = args.hub_log_level
    nofile = raise_nofile()
    started = time.perf_counter()
    print(
        f"rshub scale benchmark: Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"RLIMIT_NOFILE {nofile}, {'quick' if args.quick else 'full'} run, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        flush=True,
    )
    with bench_run("rshub-scale-", args.keep) as harness:
        try:
            redis_url = harness.redis.start()
            report = asyncio.run(conduct(args, harness.procs, redis_url, harness.redis.pid or 0))
        except FAILURES as exc:
            return harness.failed("benchmark", exc)
    report.print(f"Results ({time.perf_counter() - started:.0f} s wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
