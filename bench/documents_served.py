"""Entries/s when the hub serves a full 50,000-entry Change List page, beside bare lxml.

    python bench/documents_served.py [--rounds 5]

Starts an embedded Redis and a hub on 127.0.0.1, publishes 50,001 changes (so page 1 is a
closed page of exactly 50,000 entries), then times over HTTP:

- cold: the page rendered from Redis (the in-process page cache emptied before each GET);
- cached: the same page from the in-process cache of closed pages;
- cached+gzip: the same with ``Accept-Encoding: gzip`` (gzipped once, then cached);

and, in the same process, the same 50,000 stored events serialized with bare lxml (build an
``etree`` of the page, ``tostring``), the floor any Python server pays for the XML alone.
Every timed body is checked to be the complete page once (``resourcesync.parse``).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web
from lxml import etree

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hub.core.rendering import RSHUB_NS, w3c_ms
from hub.core.settings import Settings
from hub.store import keys
from hub.store.embedded_redis import EmbeddedRedis
from hub.web.app import RUNTIME, create_app
from hub.web.documents import READING
from resourcesync import parse
from tests.support import changes, free_port, notification

N = 50_000
SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS = "http://www.openarchives.org/rs/terms/"


def lxml_page(rows: list[tuple[bytes, dict[bytes, bytes]]]) -> bytes:
    """The page's XML built with lxml from the same stored events."""
    nsmap = {None: SM, "rs": RS, "rshub": RSHUB_NS}
    root = etree.Element(f"{{{SM}}}urlset", nsmap=nsmap)
    etree.SubElement(root, f"{{{RS}}}ln", rel="up", href="http://h/topics/b/capabilitylist.xml")
    etree.SubElement(root, f"{{{RS}}}md", capability="changelist", **{"from": w3c_ms(0)})
    for eid, fields in rows:
        data = orjson.loads(fields[keys.EVENT_FIELD])
        event_id = eid.decode()
        url = etree.SubElement(root, f"{{{SM}}}url")
        etree.SubElement(url, f"{{{SM}}}loc").text = data["loc"]
        etree.SubElement(url, f"{{{SM}}}lastmod").text = data["lastmod"]
        md = etree.SubElement(url, f"{{{RS}}}md", change=data["change"])
        md.set("datetime", w3c_ms(int(event_id.split("-")[0])))
        md.set(f"{{{RSHUB_NS}}}id", event_id)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


async def timed_get(
    session: aiohttp.ClientSession, url: str, **headers: str
) -> tuple[float, bytes]:
    start = time.perf_counter()
    async with session.get(url, headers=headers) as resp:
        body = await resp.read()
        assert resp.status == 200, resp.status
    return time.perf_counter() - start, body


def rate(seconds: list[float]) -> str:
    best, median = min(seconds), statistics.median(seconds)
    return f"{N / median:>12,.0f} {N / best:>12,.0f} {median * 1000:>9.1f}"


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        redis = EmbeddedRedis(Path(tmp))
        redis.start()
        settings = Settings(
            host="127.0.0.1", port=free_port(), changelist_scan_seconds=0, retention_max_events=0
        )
        app = create_app(settings, redis.url)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, settings.host, settings.port).start()
        try:
            async with aiohttp.ClientSession() as session:
                base = settings.public_url
                for start in range(0, N + 1, 10_000):
                    body = notification(changes(min(10_000, N + 1 - start), start=start))
                    async with session.post(
                        f"{base}/topics/b",
                        data=io.BytesIO(body),
                        headers={"Content-Type": "application/xml"},
                    ) as r:
                        assert r.status == 202
                url = f"{base}/topics/b/changelist/00000001.xml"
                cold: list[float] = []
                for _ in range(rounds):
                    app[READING].doc_cache.clear()
                    seconds, page = await timed_get(session, url, **{"Accept-Encoding": "identity"})
                    cold.append(seconds)
                doc = parse(page, validate=True)
                assert len(doc.entries) == N and doc.md.until is not None
                cached = [
                    (await timed_get(session, url, **{"Accept-Encoding": "identity"}))[0]
                    for _ in range(rounds)
                ]
                await timed_get(session, url, **{"Accept-Encoding": "gzip"})
                gz = [
                    (await timed_get(session, url, **{"Accept-Encoding": "gzip"}))[0]
                    for _ in range(rounds)
                ]
            rows = await app[RUNTIME].connections.main.xrange(keys.events("b"), "-", "+", count=N)
            lx: list[float] = []
            for _ in range(rounds):
                start = time.perf_counter()
                lxml_page(rows)
                lx.append(time.perf_counter() - start)
        finally:
            await runner.cleanup()
            redis.stop()
    print(
        f"Serving one closed 50,000-entry Change List page ({len(page) / 1e6:.1f} MB), "
        f"{rounds} rounds, Python {sys.version.split()[0]}"
    )
    print(f"{'':36} {'entries/s':>12} {'best':>12} {'median ms':>9}")
    print(f"{'hub, cold (Redis -> XML -> HTTP)':36} {rate(cold)}")
    print(f"{'hub, cached page (HTTP)':36} {rate(cached)}")
    print(f"{'hub, cached page, gzip (HTTP)':36} {rate(gz)}")
    print(f"{'bare lxml: build + tostring only':36} {rate(lx)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args().rounds))
