"""Client CPU per WebSub delivery POST: the hub's CallbackConnections against aiohttp.

Run ``.venv/bin/python bench/callback_connections.py`` (about a minute). A helper process
serves ``/cb/{i}`` on :class:`bench.hub.RawCallback` (answers 204 at once, on uvloop), over
http and over https (a ``trustme`` certificate). This process then POSTs the same 1.3 KB
signed-looking body to 100 callback paths, each path with one request in flight (as the
hub's delivery workers do), for ``--posts`` POSTs in all:

* with an aiohttp ``ClientSession`` (``TCPConnector(limit=0)``, redirects off), the client
  the hub used for deliveries before;
* with ``CallbackConnections`` as it was at ``--before`` (default ``main``; its hand-written
  response parser), loaded from git, when that differs from the working tree's;
* with :class:`hub.live.callback_connections.CallbackConnections`, the hub's delivery client.

Each on the asyncio loop and on uvloop, over http and https. The figure is this process's
CPU time (``time.process_time()``) per POST, after a warm-up round that opens the
connections.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import multiprocessing
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.hub import HOST, RawCallback, new_loop, serve, serve_raw_callbacks  # noqa: E402
from hub.live import callback_connections  # noqa: E402
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


def role_server(port: int, cert: str) -> None:
    app = web.Application()
    serve_raw_callbacks(app, lambda _topic, _i: None, lambda _i, _head, _body, _now: None)
    tls_port: dict[str, int] = {}

    async def start_tls(_app: web.Application) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert)
        server = await asyncio.get_running_loop().create_server(
            lambda: RawCallback(lambda _t, _i: None, lambda _i, _h, _b, _n: None),
            HOST,
            0,
            backlog=1024,
            ssl=context,
        )
        tls_port["port"] = server.sockets[0].getsockname()[1]

    async def tls_endpoint(_request: web.Request) -> web.Response:
        return web.json_response(tls_port)

    app.router.add_get("/ctl/tls-endpoint", tls_endpoint)
    app.on_startup.append(start_tls)
    serve(app, port, "uvloop", backlog=1024)


def module_at(ref: str) -> ModuleType | None:
    """``hub.live.callback_connections`` as it is at git ``ref`` (None if unavailable or same)."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{ref}:hub/callback_connections.py"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    if source == Path(callback_connections.__file__).read_text():
        return None
    spec = importlib.util.spec_from_loader("hub._callback_connections_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "hub"
    exec(compile(source, f"{ref}:hub/callback_connections.py", "exec"), module.__dict__)
    return module


async def endpoints(control: str) -> tuple[str, str]:
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            try:
                async with session.get(control + "/ctl/endpoint") as resp:
                    plain = f"http://{HOST}:{(await resp.json())['port']}"
                async with session.get(control + "/ctl/tls-endpoint") as resp:
                    return plain, f"https://{HOST}:{(await resp.json())['port']}"
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


async def with_aiohttp(base: str, posts: int, tls: ssl.SSLContext) -> float:
    connector = aiohttp.TCPConnector(limit=0, ssl=tls)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:

        async def post(url: str) -> int:
            async with session.post(url, data=BODY, headers=HEADERS, allow_redirects=False) as resp:
                return resp.status

        return await cpu_per_post(base, posts, post)


async def with_pool(module: Any, base: str, posts: int, tls: ssl.SSLContext) -> float:
    pool = module.CallbackConnections(allow_private=True)
    pool._ssl = tls  # the one attribute both versions share for it

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
    parser.add_argument("--before", default="main", help="git ref of the 'before' client")
    parser.add_argument("--loops", default="asyncio,uvloop", help="event loops to measure")
    args = parser.parse_args()
    import trustme  # a test dependency: certificates for the https callbacks

    ca = trustme.CA()
    tmp = tempfile.TemporaryDirectory()
    cert = Path(tmp.name) / "server.pem"
    ca.issue_cert(HOST).private_key_and_cert_chain_pem.write_to_path(str(cert))
    tls = ssl.create_default_context()
    ca.configure_trust(tls)
    clients: dict[str, Callable[[str, int, ssl.SSLContext], Awaitable[float]]] = {
        "aiohttp": with_aiohttp
    }
    before = module_at(args.before)
    if before is not None:
        clients[f"{args.before} (hand parser)"] = functools.partial(with_pool, before)
    clients["llhttp (this tree)"] = functools.partial(with_pool, callback_connections)
    port = free_port()
    spawn = multiprocessing.get_context("spawn")
    server = spawn.Process(target=role_server, args=(port, str(cert)))
    server.start()
    try:
        bases = asyncio.run(endpoints(f"http://{HOST}:{port}"))
        print(f"client CPU per POST (µs), {CALLBACKS} callbacks, {args.posts:,} POSTs each")
        print(f"  {'loop':8} {'scheme':6} " + " ".join(f"{name:>20}" for name in clients))
        for loop in args.loops.split(","):
            for base in bases:
                figures = []
                for run in clients.values():
                    with asyncio.Runner(loop_factory=functools.partial(new_loop, loop)) as runner:
                        figures.append(runner.run(run(base, args.posts, tls)))
                scheme = base.split(":", 1)[0]
                print(f"  {loop:8} {scheme:6} " + " ".join(f"{f * 1e6:20.1f}" for f in figures))
    finally:
        server.terminate()
        server.join(5)
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
