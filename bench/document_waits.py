"""How long a reader waits for each Change List document of a 50,000-entry topic.

    python bench/document_waits.py [--rounds 3] [--repeat 2] [--baseline-src DIR]

Starts an embedded Redis and a fresh hub on 127.0.0.1 (in a child process per run),
publishes 99,990 changes (page 1 closed with 50,000 entries, page 2 open with 49,990),
then times over HTTP, each read the first of its version in that process (every cache of
rendered documents emptied before each round):

- the closed page, cold, again (cached), and as a fresh process reads it (this process's
  caches emptied: the page kept in Redis, if the code keeps it there, else built again);
- the open page, cold; then, after one more change is published, the open page again (the
  new change must be in it) and with ``Accept-Encoding: gzip``;
- the Change List Index.

Each time is to the first byte of the body (what a reader waits before anything comes) and
to its last (the whole document). Every body is checked once to be the whole document
(``resourcesync.parse``: entry count, ``until`` on the closed page only).

``--baseline-src DIR``: a copy of the hub's code to measure beside this one (e.g.
``git archive <commit> | tar -x -C DIR``), run alternately with it, ``--repeat`` runs of
each, in the same venv.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CLOSED = 50_000
#: Page 2's entries: it stays open however many rounds publish their two changes to it.
OPEN = 49_990


async def timed_get(session: object, url: str, **headers: str) -> tuple[float, float, bytes]:
    """(seconds to the body's first byte, seconds to its end, the body)."""
    import aiohttp

    assert isinstance(session, aiohttp.ClientSession)
    start = time.perf_counter()
    async with session.get(url, headers=headers) as resp:
        assert resp.status == 200, (url, resp.status, await resp.text())
        first = await resp.content.readany()
        ttfb = time.perf_counter() - start
        body = first + await resp.read()
        total = time.perf_counter() - start
        if resp.headers.get("Content-Encoding") == "gzip":
            import gzip

            body = gzip.decompress(body)
    return ttfb, total, body


async def measure(rounds: int) -> dict[str, list[list[float]]]:
    """One fresh hub: the figures of each document, ``[ttfb, total]`` per round."""
    import aiohttp
    from aiohttp import web

    from hub.core.settings import Settings
    from hub.store import keys
    from hub.store.embedded_redis import EmbeddedRedis
    from hub.web.app import RUNTIME, create_app
    from hub.web.documents import READING
    from resourcesync import parse
    from tests.support import changes, free_port, notification

    out: dict[str, list[list[float]]] = {}

    def record(name: str, ttfb: float, total: float) -> None:
        out.setdefault(name, []).append([ttfb, total])

    with tempfile.TemporaryDirectory() as tmp:
        redis = EmbeddedRedis(Path(tmp))
        redis.start()
        settings = Settings(
            host="127.0.0.1",
            port=free_port(),
            retention_max_events=0,
            changelist_page_seconds=86400 * 365,
        )
        app = create_app(settings, redis.url)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, settings.host, settings.port).start()
        reading = app[READING]

        def forget_here() -> None:
            """This process's rendered pages (what another process, or a restart, lacks)."""
            reading.doc_cache.clear()
            reading.builds.clear()
            page_builds = getattr(reading, "page_builds", None)
            if page_builds is not None:
                page_builds.clear()

        async def forget() -> None:
            """Every rendered page: this process's, and those kept in Redis (if any)."""
            forget_here()
            rendered_page = getattr(keys, "rendered_page", None)
            if rendered_page is not None:
                for n in (1, 2):
                    await app[RUNTIME].connections.main.delete(rendered_page("b", n))

        try:
            async with aiohttp.ClientSession(auto_decompress=False) as session:
                base = settings.public_url
                total_events = CLOSED + OPEN
                for start in range(0, total_events, 10_000):
                    body = notification(changes(min(10_000, total_events - start), start=start))
                    async with session.post(
                        f"{base}/topics/b",
                        data=io.BytesIO(body),
                        headers={"Content-Type": "application/xml"},
                    ) as r:
                        assert r.status == 202
                # The page boundaries as the hub's background scan records them (every
                # changelist_scan_seconds): reads never scan 99,990 events first.
                await app[RUNTIME].pages.advance("b")
                closed = f"{base}/topics/b/changelist/00000001.xml"
                opened = f"{base}/topics/b/changelist/00000002.xml"
                index = f"{base}/topics/b/changelist.xml"
                plain = {"Accept-Encoding": "identity"}
                for k in range(rounds):
                    await forget()
                    ttfb, total, page = await timed_get(session, closed, **plain)
                    record("closed page, cold", ttfb, total)
                    if k == 0:
                        doc = parse(page, validate=True)
                        assert len(doc.entries) == CLOSED and doc.md.until is not None
                    ttfb, total, again = await timed_get(session, closed, **plain)
                    record("closed page, again", ttfb, total)
                    assert again == page
                    # as another process (or this one restarted) reads it
                    forget_here()
                    await asyncio.sleep(0.5)  # (the build keeps it in Redis after its end)
                    ttfb, total, again = await timed_get(session, closed, **plain)
                    record("closed page, in a fresh process", ttfb, total)
                    assert again == page
                    ttfb, total, page = await timed_get(session, opened, **plain)
                    record("open page, cold", ttfb, total)
                    if k == 0:
                        doc = parse(page, validate=True)
                        assert len(doc.entries) == OPEN + k and doc.md.until is None
                    extra = notification(changes(1, prefix="http://example.org/new", start=k))
                    async with session.post(
                        f"{base}/topics/b",
                        data=extra,
                        headers={"Content-Type": "application/xml"},
                    ) as r:
                        assert r.status == 202
                    ttfb, total, page = await timed_get(session, opened, **plain)
                    record("open page, after a publish", ttfb, total)
                    assert f"http://example.org/new{k}".encode() in page
                    extra = notification(changes(1, prefix="http://example.org/more", start=k))
                    async with session.post(
                        f"{base}/topics/b",
                        data=extra,
                        headers={"Content-Type": "application/xml"},
                    ) as r:
                        assert r.status == 202
                    ttfb, total, page = await timed_get(
                        session, opened, **{"Accept-Encoding": "gzip"}
                    )
                    record("open page, after a publish, gzip", ttfb, total)
                    assert f"http://example.org/more{k}".encode() in page
                    ttfb, total, page = await timed_get(session, index, **plain)
                    record("index", ttfb, total)
        finally:
            await runner.cleanup()
            redis.stop()
    return out


def child(src: str, rounds: int) -> dict[str, list[list[float]]]:
    env = dict(os.environ, PYTHONPATH=src)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", src, "--rounds", str(rounds)],
        env=env,
        cwd=src,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        sys.exit(f"run in {src} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, list[list[float]]] = json.loads(proc.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--baseline-src", help="a copy of the code to measure beside this one")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.rounds <= (CLOSED - OPEN) // 2:
        parser.error(f"--rounds: 1 to {(CLOSED - OPEN) // 2}")
    if args.child:
        sys.path.insert(0, args.child)
        print(json.dumps(asyncio.run(measure(args.rounds))))
        return
    sources = {"this": str(HERE)}
    if args.baseline_src:
        sources = {"baseline": str(Path(args.baseline_src).resolve()), **sources}
    runs: dict[str, dict[str, list[list[float]]]] = {name: {} for name in sources}
    for _ in range(args.repeat):
        for name, src in sources.items():
            for doc, values in child(src, args.rounds).items():
                runs[name].setdefault(doc, []).extend(values)
    load = os.getloadavg()
    print(
        f"Change List documents, page 1 closed ({CLOSED:,} entries), page 2 open "
        f"({OPEN:,}); {args.repeat} run(s) x {args.rounds} rounds; load {load[0]:.1f}"
    )
    print(
        f"{'':36}" + "".join(f" {name + ' ttfb/total ms (median, max ttfb)':>42}" for name in runs)
    )
    for doc in runs["this"]:
        cells = []
        for name in runs:
            values = runs[name].get(doc, [])
            if not values:
                cells.append(f"{'-':>42}")
                continue
            ttfb = statistics.median(v[0] for v in values) * 1000
            total = statistics.median(v[1] for v in values) * 1000
            worst = max(v[0] for v in values) * 1000
            cells.append(f"{f'{ttfb:.0f} / {total:.0f} (max {worst:.0f})':>42}")
        print(f"{doc:36}" + "".join(f" {c}" for c in cells))


if __name__ == "__main__":
    main()
