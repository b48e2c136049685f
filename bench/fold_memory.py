"""Redis memory per URI of a topic's Resource List fold: packed states beside the earlier form.

Run ``.venv/bin/python bench/fold_memory.py`` from the repository root (``--resources N``,
default 1,000,000). For each form it starts a fresh ``redis-server`` (``EmbeddedRedis`` in a
temporary directory, so that no freed memory of the other form stays in its RSS), fills one
fold hash with ``N`` URIs of ``bench/hub.py``'s changes (``url_entry``: a 25-byte loc, the
publisher's ``lastmod``, an MD5 hash, a length, ``text/html``), each value as the publish
script writes it (:func:`hub.core.resource_states.encode` makes its very bytes; the earlier
form is ``"<event-id> <event-json>"``), with event ids 1,000 to a millisecond as a
1,000-change publish gets them, and reports per URI: ``MEMORY USAGE`` of the hash (exact,
``SAMPLES 0``), and the growth of ``used_memory`` and of ``used_memory_rss`` (what the
allocator holds, its overhead included). ``bench/scale.py --only resourcelist`` measures the
same fold filled through the hub. About 1-3 minutes for 1,000,000 URIs.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import orjson
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hub.core import resource_states  # noqa: E402
from hub.store import keys  # noqa: E402
from hub.store.embedded_redis import EmbeddedRedis  # noqa: E402

LASTMOD = "2024-01-01T00:00:00Z"
#: The first event id's ms (2026-11-23).
FIRST_MS = 1795341600000


def stored(i: int) -> bytes:
    """The JSON the hub stores for ``bench/hub.py``'s ``url_entry(i, 0)``."""
    return orjson.dumps(
        {
            "loc": f"http://bench/x/{i}?t=0",
            "lastmod": LASTMOD,
            "change": "updated",
            "hash": f"md5:{i % 65536:032x}",
            "length": 1000 + i % 1000,
            "type": "text/html",
        }
    )


def value(form: str, i: int) -> bytes:
    event_id = f"{FIRST_MS + i // 1000}-{i % 1000}"
    if form == "packed":
        return resource_states.encode(event_id, stored(i))
    return event_id.encode() + b" " + stored(i)


def measure(form: str, n: int) -> tuple[float, float, float]:
    """(MEMORY USAGE, used_memory growth, RSS growth) per URI of an ``n``-URI fold."""
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp))
        server.start()
        try:
            client = redis.Redis.from_url(server.url)
            before = client.info("memory")
            key = keys.resources("big")
            pipe = client.pipeline(transaction=False)
            for i in range(n):
                pipe.hset(key, f"http://bench/x/{i}?t=0", value(form, i))
                if i % 10_000 == 9_999:
                    pipe.execute()
            pipe.execute()
            after = client.info("memory")
            usage = int(client.memory_usage(key, samples=0) or 0)
            client.close()
        finally:
            server.stop()
    grown = after["used_memory"] - before["used_memory"]
    rss = after["used_memory_rss"] - before["used_memory_rss"]
    return usage / n, grown / n, rss / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", type=int, default=1_000_000)
    n = parser.parse_args().resources
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"fold memory, {n:,} URIs, {platform.python_version()}, {started}, load {' '.join(load)}")
    for form in ("earlier", "packed"):
        usage, grown, rss = measure(form, n)
        print(
            f"  {form:8s} MEMORY USAGE {usage:,.0f} B/URI; used_memory +{grown:,.0f} B/URI; "
            f"RSS +{rss:,.0f} B/URI",
            flush=True,
        )


if __name__ == "__main__":
    main()
