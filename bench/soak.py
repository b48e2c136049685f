"""Soak the hub: a sustained publish rate to WebSocket clients and WebSub callbacks.

Run ``.venv/bin/python bench/soak.py`` from the repository root (defaults: 1,000 changes/s
for 360 s, 100 WebSocket clients and 100 WebSub callbacks on one topic, a report every
30 s; ``--rate``, ``--duration``, ``--ws``, ``--websub``, ``--interval``, ``--loop``). It
starts, all on 127.0.0.1: an embedded ``redis-server``; the hub (``python -m rshub serve
--allow-private-callbacks``, ``RSHUB_UVLOOP`` after ``--loop``); the WebSocket clients in
``--ws-procs`` processes of their own; the WebSub callbacks (subscribed with ``hub.secret``)
in one process of their own; and one publisher process, which POSTs ``rate / 100`` changes
every 10 ms. This process only steers and collects, so the measuring side shares no event
loop with the load.

Every change's ``loc`` carries its sequence number and send time (``perf_counter_ns``, as
in ``bench/hub.py``). Receivers mark which numbers they got and keep a histogram of
publish-to-receive latency (1 % buckets, mergeable across processes). Every interval this
prints the cores and RSS of the hub and of Redis (``/proc``), the cores of the client
processes, and p50/p99 per transport over the interval. At the end it prints, per
subscriber, how many published changes it missed, the total received, and whether the
hub's RSS stayed flat (last interval against the second: the first is warm-up). Exit status
0 only if no subscriber missed anything and every publish was accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import re
import signal
import sys
import time
from collections import Counter
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
    LOOPS,
    XML_HEADERS,
    Control,
    Processes,
    bench_run,
    callback_secret,
    cpu_seconds,
    new_loop,
    notification,
    raise_nofile,
    raw_callbacks,
    rss_bytes,
    serve,
    serve_raw_callbacks,
    uvloop_installed,
    wait_healthy,
)
from tests.support import free_port  # noqa: E402

_LOC_STR = re.compile(r"/x/(\d+)\?t=(\d+)")
_LOC_BYTES = re.compile(rb"/x/(\d+)\?t=(\d+)")
#: Probe changes (before the measured run) say a subscriber is live; not counted.
_PROBE_STR, _PROBE_BYTES = "/probe/", b"/probe/"
TOPIC = "soak"


# -- latency histogram ---------------------------------------------------------------------


def bucket(ns: int) -> int:
    """The 1 %-wide bucket of a latency (everything under 1 µs in bucket 0)."""
    return int(math.log(max(ns, 1000) / 1000) * 100)


def bucket_ms(b: int) -> float:
    return 1000 * math.exp(b / 100) / 1e6


def hist_percentile(hist: Counter[int], q: float) -> float:
    """The ``q`` quantile (ms) of a bucket histogram; NaN if empty."""
    total = sum(hist.values())
    if not total:
        return float("nan")
    rank, seen = q * (total - 1), 0
    for b in sorted(hist):
        seen += hist[b]
        if seen > rank:
            return bucket_ms(b)
    return bucket_ms(max(hist))


# -- receiving side ------------------------------------------------------------------------


@dataclass
class Receiver:
    """Which change numbers each sink got, duplicates, probes, latency since last read."""

    sinks: int
    got: list[bytearray] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    probed: list[bool] = field(default_factory=list)
    hist: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.got = [bytearray() for _ in range(self.sinks)]
        self.duplicates = [0] * self.sinks
        self.probed = [False] * self.sinks

    def take(self, sink: int, pairs: list[Any], now_ns: int, probe: bool) -> None:
        if probe:
            self.probed[sink] = True
        got, hist = self.got[sink], self.hist
        for seq_text, t_text in pairs:
            i = int(seq_text)
            if i >= len(got):
                got.extend(bytes(max(i + 1 - len(got), 1 << 16)))
            if got[i]:
                self.duplicates[sink] += 1
            got[i] = 1
            hist[bucket(now_ns - int(t_text))] += 1

    def routes(self, app: web.Application) -> None:
        """``/ctl/status``, ``/ctl/interval`` (histogram since the last call),
        ``/ctl/final?total=N`` (received and missed of changes 0..N-1 per sink)."""

        async def status(_request: web.Request) -> web.Response:
            return web.json_response({"sinks": self.sinks, "probed": sum(self.probed)})

        async def interval(_request: web.Request) -> web.Response:
            hist, self.hist = self.hist, Counter()
            return web.json_response({"hist": {str(b): n for b, n in hist.items()}})

        async def final(request: web.Request) -> web.Response:
            total = int(request.query["total"])
            received = [got[:total].count(1) for got in self.got]
            return web.json_response(
                {
                    "received": received,
                    "missed": [total - r for r in received],
                    "duplicates": self.duplicates,
                }
            )

        async def healthz(_request: web.Request) -> web.Response:
            return web.Response(text="ok")

        app.router.add_get("/ctl/status", status)
        app.router.add_get("/ctl/interval", interval)
        app.router.add_get("/ctl/final", final)
        app.router.add_get("/healthz", healthz)


def role_ws(port: int, sinks: int, loop: str) -> None:
    """``/ctl/connect?url=`` opens ``sinks`` WebSocket clients that record what they get."""
    receiver = Receiver(sinks)
    tasks: list[asyncio.Task[None]] = []

    sessions: list[aiohttp.ClientSession] = []

    async def client(
        i: int, session: aiohttp.ClientSession, url: str, up: asyncio.Queue[int]
    ) -> None:
        try:
            async with session.ws_connect(url, max_msg_size=64 * 1024 * 1024, heartbeat=None) as ws:
                up.put_nowait(i)
                async for msg in ws:
                    if msg.type is aiohttp.WSMsgType.TEXT:
                        data: str = msg.data
                        receiver.take(
                            i, _LOC_STR.findall(data), time.perf_counter_ns(), _PROBE_STR in data
                        )
        except (aiohttp.ClientError, OSError) as exc:
            print(f"ws client {i}: {exc!r}", file=sys.stderr, flush=True)
            up.put_nowait(-1)

    async def connect(request: web.Request) -> web.Response:
        url = request.query["url"]
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        sessions.append(session)
        up: asyncio.Queue[int] = asyncio.Queue()
        tasks.extend(asyncio.create_task(client(i, session, url, up)) for i in range(sinks))
        ok, deadline = 0, time.monotonic() + 60
        for _ in range(sinks):
            try:
                got = await asyncio.wait_for(up.get(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            ok += got >= 0
        return web.json_response({"connected": ok})

    async def on_cleanup(_app: web.Application) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for session in sessions:
            await session.close()

    app = web.Application()
    receiver.routes(app)
    app.router.add_post("/ctl/connect", connect)
    app.on_cleanup.append(on_cleanup)
    serve(app, port, loop)


def role_callbacks(port: int, sinks: int, loop: str) -> None:
    """``/cb/{i}`` on a :class:`bench.hub.RawCallback` server (so receiving costs the
    measuring side little): echo the challenge; record the changes of each delivery."""
    receiver = Receiver(sinks)
    verified: set[int] = set()

    def subscribed(_topic: str, i: int) -> None:
        verified.add(i)

    def delivered(i: int, _head: bytes, body: bytes, now: int) -> None:
        receiver.take(i, _LOC_BYTES.findall(body), now, _PROBE_BYTES in body)

    async def count_verified(_request: web.Request) -> web.Response:
        return web.json_response({"verified": len(verified)})

    app = web.Application()
    receiver.routes(app)
    app.router.add_get("/ctl/verified", count_verified)
    serve_raw_callbacks(app, subscribed, delivered)
    serve(app, port, loop, backlog=1024)


# -- publishing side -----------------------------------------------------------------------


def role_publisher(port: int, loop: str) -> None:
    """``/ctl/start?url=&rate=&duration=`` publishes changes 0, 1, ... at ``rate``/s
    (``rate/100`` per POST every 10 ms, 64 POSTs in flight at most); ``/ctl/status``."""
    state: dict[str, Any] = {"sent": 0, "accepted": 0, "failed": [], "done": False}
    rtts: Counter[int] = Counter()
    tasks: set[asyncio.Task[None]] = set()

    async def run(url: str, rate: float, duration: float) -> None:
        per_post = max(1, round(rate / 100))
        interval = per_post / rate
        ticks = round(duration / interval)
        slots = asyncio.Semaphore(64)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64), timeout=timeout
        ) as session:

            async def one(first: int) -> None:
                async with slots:
                    stamp = time.perf_counter_ns()
                    body = notification(first, per_post, stamp)
                    try:
                        async with session.post(url, data=body, headers=XML_HEADERS) as resp:
                            await resp.read()
                            status = resp.status
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        status, detail = 0, repr(exc)
                    else:
                        detail = str(status)
                    rtts[bucket(time.perf_counter_ns() - stamp)] += 1
                    if status == 202:
                        state["accepted"] += per_post
                    else:
                        state["failed"].append(f"{first}+{per_post}: {detail}")

            start = time.perf_counter()
            pending: set[asyncio.Task[None]] = set()
            for k in range(ticks):
                delay = start + k * interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(k * per_post))
                pending.add(task)
                task.add_done_callback(pending.discard)
                state["sent"] = (k + 1) * per_post
            await asyncio.wait_for(asyncio.gather(*pending), 60)
        state["done"] = True

    async def start(request: web.Request) -> web.Response:
        q = request.query
        task = asyncio.create_task(run(q["url"], float(q["rate"]), float(q["duration"])))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return web.json_response({"ok": True})

    async def status(_request: web.Request) -> web.Response:
        return web.json_response(state | {"failed": state["failed"][:20]})

    async def interval(_request: web.Request) -> web.Response:
        hist = dict(rtts)
        rtts.clear()
        return web.json_response({"hist": {str(b): n for b, n in hist.items()}})

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/ctl/start", start)
    app.router.add_get("/ctl/status", status)
    app.router.add_get("/ctl/interval", interval)
    app.router.add_get("/healthz", healthz)
    serve(app, port, loop)


# -- conductor -----------------------------------------------------------------------------


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


@dataclass
class Helper:
    """A client process: its name, pid, control and (for receivers) its transport."""

    name: str
    pid: int
    ctl: Control
    transport: str = ""


async def merged(helpers: list[Helper]) -> Counter[int]:
    hist: Counter[int] = Counter()
    for h in helpers:
        got = await h.ctl.call("GET", "/ctl/interval")
        hist.update({int(b): n for b, n in got["hist"].items()})
    return hist


async def until(check: Any, what: str, timeout: float, every: float = 0.2) -> None:
    """Wait (bounded) until ``await check()`` is true."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(every)


async def soak(args: argparse.Namespace, procs: Processes, redis_url: str, redis_pid: int) -> int:
    py, me = sys.executable, str(SCRIPT)
    loop = ["--loop", args.loop]
    hub_port = free_port()
    hub_url = f"http://{HOST}:{hub_port}"
    topic_url = f"{hub_url}/topics/{TOPIC}"
    hub = procs.start(
        "hub",
        [py, "-m", "rshub", "serve", "--host", HOST, "--port", str(hub_port),
         "--redis-url", redis_url, "--allow-private-callbacks", "--log-level", "WARNING"],
        env={"RSHUB_UVLOOP": "true" if args.loop == "uvloop" else "false"},
    )  # fmt: skip
    helpers: list[Helper] = []
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=32), timeout=aiohttp.ClientTimeout(total=120)
    )

    def helper(name: str, role: list[str], transport: str = "") -> Helper:
        port = free_port()
        proc = procs.start(name, [py, me, *role, "--port", str(port), *loop])
        h = Helper(name, proc.pid, Control(session, f"http://{HOST}:{port}"), transport)
        helpers.append(h)
        return h

    ws_procs = max(1, min(args.ws_procs, args.ws)) if args.ws else 0
    ws_split = [args.ws // ws_procs + (k < args.ws % ws_procs) for k in range(ws_procs)]
    ws_helpers = [
        helper(f"ws{k}", ["--role", "ws", "--sinks", str(n)], "websocket")
        for k, n in enumerate(ws_split)
    ]
    cb = (
        helper("callbacks", ["--role", "callbacks", "--sinks", str(args.websub)], "websub")
        if args.websub
        else None
    )
    pub = helper("publisher", ["--role", "publisher"])
    async with session:
        await wait_healthy(session, hub_url + "/healthz", procs, "hub")
        for h in helpers:
            await wait_healthy(session, h.ctl.base + "/healthz", procs, h.name)
        probe = notification(0, 1).replace(b"/x/", _PROBE_BYTES)
        async with session.post(topic_url, data=probe, headers=XML_HEADERS) as resp:
            if resp.status != 202:
                raise RuntimeError(f"first publish: {resp.status} {await resp.text()}")
        for h, n in zip(ws_helpers, ws_split, strict=True):
            got = await h.ctl.call("POST", "/ctl/connect", wait=60, url=f"{topic_url}/ws")
            if got["connected"] != n:
                raise RuntimeError(f"{h.name}: only {got['connected']} of {n} clients connected")
        if cb is not None:
            cb_base = await raw_callbacks(session, cb.ctl.base)
            for i in range(args.websub):
                form = {
                    "hub.mode": "subscribe",
                    "hub.topic": topic_url,
                    "hub.callback": f"{cb_base}/cb/{i}",
                    "hub.secret": callback_secret(i),
                }
                async with session.post(hub_url + "/", data=form) as resp:
                    if resp.status != 202:
                        raise RuntimeError(f"subscribe {i}: {resp.status} {await resp.text()}")

            async def all_verified() -> bool:
                got = await cb.ctl.call("GET", "/ctl/verified")
                return bool(got["verified"] >= args.websub)

            await until(all_verified, "every callback verified", 60)
        receivers = [h for h in helpers if h.transport]

        async def all_probed() -> bool:
            async with session.post(topic_url, data=probe, headers=XML_HEADERS) as resp:
                await resp.read()
            await asyncio.sleep(0.3)
            states = [await h.ctl.call("GET", "/ctl/status") for h in receivers]
            return all(s["probed"] >= s["sinks"] for s in states)

        await until(all_probed, "a probe change reaching every subscriber", 60, every=0.7)
        for h in [*receivers, pub]:  # drop the probes' figures
            await h.ctl.call("GET", "/ctl/interval")

        print(
            f"soak: {args.rate:,.0f} changes/s for {args.duration:.0f} s to {args.ws} WebSocket "
            f"clients ({ws_procs} processes) and {args.websub} signed WebSub callbacks; hub pid "
            f"{hub.pid}, redis pid {redis_pid}, {args.loop} loop",
            flush=True,
        )
        pids = {"hub": hub.pid, "redis": redis_pid}
        client_pids = [h.pid for h in helpers]
        rss_hub: list[int] = []
        await pub.ctl.call("POST", "/ctl/start", url=topic_url, rate=args.rate,
                           duration=args.duration)  # fmt: skip
        start = time.perf_counter()
        cpu = {n: cpu_seconds(p) for n, p in pids.items()}
        clients_cpu = sum(cpu_seconds(p) for p in client_pids)
        last, k, total = start, 0, 0
        done_at: float | None = None
        complete = False
        status: dict[str, Any] = {}
        while not complete:
            k += 1
            tick = start + k * args.interval
            # until the next report; once the publisher is done, until everything is in
            while time.perf_counter() < tick:
                await asyncio.sleep(min(0.5, max(0.0, tick - time.perf_counter())))
                status = await pub.ctl.call("GET", "/ctl/status")
                if status["done"]:
                    done_at = done_at or time.perf_counter()
                    total = int(status["sent"])
                    complete = await everything_in(receivers, total)
                    if complete or time.perf_counter() > done_at + args.drain:
                        break
            now = time.perf_counter()
            wall = max(1e-6, now - last)
            line = [f"[{now - start:5.0f} s]"]
            for name, pid in pids.items():
                used, rss = cpu_seconds(pid), rss_bytes(pid)
                line.append(f"{name} {(used - cpu[name]) / wall:.2f} cores {mib(rss)}")
                cpu[name] = used
                if name == "hub":
                    rss_hub.append(rss)
            used_clients = sum(cpu_seconds(p) for p in client_pids)
            line.append(f"clients {(used_clients - clients_cpu) / wall:.2f} cores")
            clients_cpu = used_clients
            for transport in ("websocket", "websub"):
                group = [h for h in receivers if h.transport == transport]
                if group:
                    hist = await merged(group)
                    line.append(
                        f"{transport} p50 {hist_percentile(hist, 0.5):.1f} "
                        f"p99 {hist_percentile(hist, 0.99):.1f} ms ({sum(hist.values()):,})"
                    )
            rtt = await merged([pub])
            line.append(f"publish p99 {hist_percentile(rtt, 0.99):.1f} ms")
            print(" | ".join(line), flush=True)
            last = now
            if done_at is not None and now > done_at + args.drain:
                break
            if now > start + args.duration + args.drain + 120:
                raise RuntimeError("the publisher did not finish")
        return await final_report(args, receivers, status, total, rss_hub)


async def everything_in(receivers: list[Helper], total: int) -> bool:
    """True once every subscriber got every change 0..total-1."""
    for h in receivers:
        got = await h.ctl.call("GET", "/ctl/final", total=total)
        if any(got["missed"]):
            return False
    return True


async def final_report(
    args: argparse.Namespace,
    receivers: list[Helper],
    status: dict[str, Any],
    total: int,
    rss_hub: list[int],
) -> int:
    missed_any = False
    received_total = duplicates = 0
    print(f"\npublished {total:,} changes; {status['accepted']:,} accepted by the hub")
    for h in receivers:
        got = await h.ctl.call("GET", "/ctl/final", total=total)
        received_total += sum(got["received"])
        duplicates += sum(got["duplicates"])
        missing = [(i, m) for i, m in enumerate(got["missed"]) if m]
        if missing:
            missed_any = True
            listed = ", ".join(f"#{i} missed {m:,}" for i, m in missing[:20])
            print(
                f"  {h.transport} ({h.name}): {len(missing)} subscribers missed changes: {listed}"
            )
        else:
            print(
                f"  {h.transport} ({h.name}): each of {len(got['missed'])} subscribers got all "
                f"{total:,}"
            )
    expected = total * (args.ws + args.websub)
    print(f"received {received_total:,} of {expected:,} ({duplicates:,} duplicates)")
    if status["failed"]:
        print(f"publishes not accepted: {status['failed']}")
    if len(rss_hub) >= 2:
        # After the first interval (warm-up: pools, rings and caches fill) unless that is all.
        start = 1 if len(rss_hub) >= 3 else 0
        first, end = rss_hub[start], rss_hub[-1]
        growth = (end - first) / max(first, 1)
        verdict = "flat" if growth <= 0.10 else "GREW"
        print(
            f"hub RSS after interval {start + 1} {mib(first)}, last {mib(end)}: {verdict} "
            f"({growth:+.0%}; first interval {mib(rss_hub[0])})"
        )
    ok = not missed_any and not status["failed"] and status["accepted"] == total
    print("nothing missed" if ok else "SOMETHING WAS MISSED")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="changes per second")
    parser.add_argument("--duration", type=float, default=360.0, help="seconds of publishing")
    parser.add_argument("--ws", type=int, default=100, help="WebSocket clients")
    parser.add_argument("--websub", type=int, default=100, help="WebSub callbacks")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between reports")
    parser.add_argument("--loop", choices=LOOPS, default="uvloop", help="every process's loop")
    parser.add_argument("--ws-procs", type=int, default=2, help="processes for the WS clients")
    parser.add_argument(
        "--drain", type=float, default=30.0, help="seconds to wait for stragglers at the end"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    parser.add_argument("--role", choices=("ws", "callbacks", "publisher"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sinks", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop == "uvloop" and not uvloop_installed():
        parser.error("uvloop is not installed: pip install uvloop, or pass --loop asyncio")
    if args.role == "ws":
        role_ws(args.port, args.sinks, args.loop)
        return 0
    if args.role == "callbacks":
        role_callbacks(args.port, args.sinks, args.loop)
        return 0
    if args.role == "publisher":
        role_publisher(args.port, args.loop)
        return 0

    raise_nofile()
    budget = args.duration + args.drain + 300
    with bench_run("rshub-soak-", args.keep) as harness:
        try:
            redis_url = harness.redis.start()
            with asyncio.Runner(loop_factory=lambda: new_loop(args.loop)) as runner:
                return runner.run(
                    asyncio.wait_for(
                        soak(args, harness.procs, redis_url, harness.redis.pid or 0), budget
                    )
                )
        except FAILURES as exc:
            return harness.failed("soak", exc)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)  # a SIGTERM cleans up like Ctrl-C
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    print("interrupted; every process it started was stopped", file=sys.stderr)
    sys.exit(130)
