"""Hub CPU of one publish's WebSub fan-out pass: ``DeliveryWorker.offer`` to N callbacks.

Run ``.venv/bin/python bench/delivery_fanout.py`` (``--hub-src DIR`` to load the hub from
another checkout, e.g. a worktree of main). It builds ``--callbacks`` real
:class:`hub.live.delivery.DeliveryWorker` objects on one real
:class:`hub.live.http_client.HttpClient`, each with a keep-alive connection open to a
:class:`bench.hub.RawCallback` server in a helper process, and then, ``--rounds`` times, hands
a one-change batch to every worker as the feed's fan-out does, timing that pass with this
thread's CPU clock (each POST's write included, the answers not). Rounds are paced at
``--rate`` per second (20, as bench/hub.py figure 4) so caches are as cold as in the hub;
``--signed`` gives every subscription a ``hub.secret``. The helper runs on another CPU than
this process (bench/hub.py ``--placement apart``). No Redis: the offer pass touches none.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def role_server(port: int) -> None:
    sys.path.insert(0, str(ROOT))
    from aiohttp import web

    from bench.hub import serve, serve_raw_callbacks

    app = web.Application()
    serve_raw_callbacks(app, lambda _t, _i: None, lambda _i, _h, _b, _n: None)
    serve(app, port, "uvloop")


async def measure(args: argparse.Namespace, base: str) -> list[float]:
    from hub.core import collector
    from hub.core.events import Event
    from hub.core.settings import Settings
    from hub.core.topics import HubUrls
    from hub.live.delivery import Bodies, DeliveryWorker
    from hub.live.http_client import HttpClient
    from hub.live.ownership import Lease, Validity
    from hub.store.subscriptions import Subscription

    settings = Settings(allow_private_callbacks=True, public_url="http://127.0.0.1:8000")
    client = HttpClient(settings)
    bodies = Bodies(HubUrls(settings.public_url), settings.delivery_batch_max_bytes)
    validity = Validity()
    validity.renewed(time.monotonic() + 3600)
    topic = "t"
    workers = []
    for i in range(args.callbacks):
        sub = Subscription(
            topic=topic,
            topic_url=f"{settings.public_url}/topics/{topic}",
            callback=f"{base}/cb/{i}",
            lease_seconds=86400,
            expires_at=time.time() + 86400,
            secret=f"secret-{i}" if args.signed else None,
        )
        none: Any = None
        workers.append(
            DeliveryWorker(
                sub,
                Lease(1, validity),
                node="bench",
                settings=settings,
                client=client,
                store=none,
                feeds=none,
                cursors=none,
                bodies=bodies,
                dead_letters=none,
            )
        )
    # one keep-alive connection per callback, as after the first delivery
    await asyncio.gather(*(client.post(w.sub.callback, b"<x/>", {}) for w in workers))
    collector.freeze_startup_heap()  # the collector as the hub sets it
    collector.tune(settings.gc_young_threshold)
    loop = asyncio.get_running_loop()
    per_post: list[float] = []
    for k in range(args.rounds + 5):
        stamp = time.time_ns()
        data = (
            b'{"loc":"http://bench/x/%d?t=%d","lastmod":"2024-01-01T00:00:00Z",'
            b'"change":"updated"}' % (k, stamp)
        )
        events = [Event(f"{stamp // 1_000_000}-{k}", data)]
        waiters = []
        for w in workers:
            w._offered = loop.create_future()
            waiters.append(w._offered)
        start = time.thread_time_ns()
        for w in workers:
            w.offer(events)
        spent = time.thread_time_ns() - start
        sent = [f.result() for f in waiters]
        if any(s is None for s in sent):
            raise RuntimeError(f"round {k}: {sent.count(None)} offers declined")
        await asyncio.gather(*(client.finish_post(s.request) for s in sent))
        for w in workers:
            w.posting = False
            w._idle.set()
        if k >= 5:  # warm-up rounds left out
            per_post.append(spent / len(workers) / 1000)
        await asyncio.sleep(1 / args.rate if args.rate > 0 else 0.005)
    await client.close()
    return per_post


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--callbacks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--rate", type=float, default=20.0, help="rounds per second (0: back to back, warm)"
    )
    parser.add_argument("--signed", action="store_true", help="every subscription signed")
    parser.add_argument("--hub-src", type=Path, default=ROOT, help="checkout to load the hub from")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "server":
        role_server(args.port)
        return 0
    sys.path.insert(0, str(args.hub_src.resolve()))
    sys.path.insert(1, str(ROOT))
    from tests.support import free_port

    cpus = sorted(os.sched_getaffinity(0))
    port = free_port()
    helper = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--role", "server", "--port", str(port)],
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus[1:])) if len(cpus) > 1 else None,
    )
    try:
        if len(cpus) > 1:
            os.sched_setaffinity(0, cpus[:1])
        import uvloop

        async def run() -> list[float]:
            import aiohttp

            control = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as session:
                for _ in range(200):
                    try:
                        async with session.get(control + "/ctl/endpoint") as resp:
                            raw = (await resp.json())["port"]
                            break
                    except (aiohttp.ClientError, KeyError):
                        await asyncio.sleep(0.05)
                else:
                    raise RuntimeError("the callbacks helper did not start")
            return await measure(args, f"http://127.0.0.1:{raw}")

        per_post = uvloop.run(run())
    finally:
        helper.terminate()
        helper.wait(10)
    q = statistics.quantiles(per_post, n=10)
    print(
        f"{args.hub_src.resolve()}: {'signed' if args.signed else 'unsigned'}, "
        f"{args.callbacks} callbacks, {len(per_post)} rounds at {args.rate:g}/s: hub CPU per "
        f"POST in the fan-out pass p10 {q[0]:.1f} / p50 {statistics.median(per_post):.1f} / "
        f"p90 {q[-1]:.1f} us",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
