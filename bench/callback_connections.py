"""Client CPU per WebSub delivery POST: the hub's CallbackConnections against aiohttp.

Run ``.venv/bin/python bench/callback_connections.py`` (about 20 s). A helper process
serves ``/cb/{i}`` on :class:`bench.hub.RawCallback` (answers 204 at once, on uvloop). This
process then POSTs the same 1.3 KB signed-looking body to 100 callback paths, each path with
one request in flight (as the hub's delivery workers do), for ``--posts`` POSTs in all:

* with an aiohttp ``ClientSession`` (``TCPConnector(limit=0)``, redirects off), the client
  the hub used for deliveries before;
* with :class:`hub.callback_connections.CallbackConnections`, the hub's delivery client.

Each on the asyncio loop and on uvloop. The figure is this process's CPU time
(``time.process_time()``) per POST, after a warm-up round that opens the connections.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.hub import HOST, new_loop, serve, serve_raw_callbacks  # noqa: E402
from hub.callback_connections import CallbackConnections  # noqa: E402
from tests.support import free_port  # noqa: E402

CALLBACKS = 100
BODY = b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">' + b"x" * 1240 + b"</urlset>"
HEADERS = {
    "Content-Type": "application/xml",
    "Link": '<http://127.0.0.1/>; rel="hub", <http://127.0.0.1/topics/t>; rel="self"',
    "X-Hub-Signature": "sha256=" + "0" * 64,
    "X-RSHub-First-Event-Id": "1795341600125-0",
    "X-RSHub-Last-Event-Id": "1795341600125-3",
    "X-RSHub-Event-Count": "4",
}


def role_server(port: int) -> None:
    app = web.Application()
    serve_raw_callbacks(app, lambda _topic, _i: None, lambda _i, _head, _body, _now: None)
    serve(app, port, "uvloop", backlog=1024)


async def endpoint(control: str) -> str:
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            try:
                async with session.get(control + "/ctl/endpoint") as resp:
                    return f"http://{HOST}:{(await resp.json())['port']}"
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
    raise RuntimeError("the callback server did not start")


Post = Callable[[str], Awaitable[int]]


async def cpu_per_post(base: str, posts: int, post: Post) -> float:
    urls = [f"{base}/cb/{i}" for i in range(CALLBACKS)]
    await asyncio.gather(*(post(u) for u in urls))  # warm-up: open the connections
    rounds = max(1, posts // CALLBACKS)

    async def path(url: str) -> None:
        for _ in range(rounds):
            if await post(url) != 204:
                raise RuntimeError("not 204")

    start = time.process_time()
    await asyncio.gather(*(path(u) for u in urls))
    return (time.process_time() - start) / (rounds * CALLBACKS)


async def with_aiohttp(base: str, posts: int) -> float:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:

        async def post(url: str) -> int:
            async with session.post(url, data=BODY, headers=HEADERS, allow_redirects=False) as resp:
                return resp.status

        return await cpu_per_post(base, posts, post)


async def with_callback_connections(base: str, posts: int) -> float:
    pool = CallbackConnections(allow_private=True)

    async def post(url: str) -> int:
        status, _ = await pool.post(url, BODY, HEADERS, 10.0)
        return status

    try:
        return await cpu_per_post(base, posts, post)
    finally:
        await pool.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--posts", type=int, default=20_000, help="POSTs per measurement")
    args = parser.parse_args()
    port = free_port()
    server = multiprocessing.get_context("spawn").Process(target=role_server, args=(port,))
    server.start()
    try:
        base = asyncio.run(endpoint(f"http://{HOST}:{port}"))
        print(f"client CPU per POST, {CALLBACKS} callbacks, {args.posts:,} POSTs each")
        for loop in ("asyncio", "uvloop"):
            figures = {}
            for name, run in (
                ("aiohttp ClientSession", with_aiohttp),
                ("CallbackConnections", with_callback_connections),
            ):
                with asyncio.Runner(loop_factory=functools.partial(new_loop, loop)) as runner:
                    figures[name] = runner.run(run(base, args.posts))
            a, c = figures["aiohttp ClientSession"], figures["CallbackConnections"]
            print(
                f"  {loop:8} aiohttp {a * 1e6:6.1f} µs   CallbackConnections {c * 1e6:6.1f} µs"
                f"   ({a / c:.1f}x less)"
            )
    finally:
        server.terminate()
        server.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
