"""How long one command holds Redis in each worst case of the store's stream-reading scripts.

Redis runs one command at a time, a Lua script included: while a script reads stream
entries (~2.7 us each into Lua) every other client waits (other topics' publishes, the live
feeds' XREADs, deliveries). This starts its own ``redis-server`` (``EmbeddedRedis`` in a
temporary directory), builds each worst case, runs the real store call, and reports from
``SLOWLOG`` (``slowlog-log-slower-than 0``) the script calls it made, the longest one (the
time every other client waited at worst) and their sum, beside baselines measured in the
same run (medians of 5: one ``XRANGE ... COUNT 1000`` of the same stream, and a script
reading those 1,000 entries into Lua):

* paging: ``PageChain.advance`` over a 100,000-event backlog;
* backlog: ``StreamStats.backlogs`` (the dashboard and ``/metrics``) of 20 positions each
  >= 10,000 behind (cap 10,000 each: 200,000 entries counted);
* lag: ``TopicAdmin.count_after`` of a position 99,999 behind (cap 100,000);
* age trim: one publish that expires 50,000 events (a 1-hour age bound);
* length trim: one publish to a 100,000-event stream bounded to 1,000 events, then
  ``EventStore.trim`` (the retention sweep) until the bound holds;
* exact Resource List: ``ResourceSnapshots.exact`` of a 50,000-URI fold (its ``HSCAN``
  and ``DEL`` counted with the scripts).

Events are ~85 bytes of JSON. ``--hub-src PATH`` runs the same cases with another
checkout's store code (a subprocess importing from PATH) against the same Redis, first::

    .venv/bin/python bench/redis_blocking.py --hub-src ../main-checkout

About 30 s per checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _checkout() -> Path:
    """The checkout whose store code runs: this one, or ``--checkout`` (the worker's)."""
    if "--checkout" in sys.argv:
        return Path(sys.argv[sys.argv.index("--checkout") + 1]).resolve()
    return Path(__file__).resolve().parent.parent


sys.path.insert(0, str(_checkout()))

import redis  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402

from hub.core.events import Change  # noqa: E402
from hub.store import keys  # noqa: E402
from hub.store.embedded_redis import EmbeddedRedis  # noqa: E402
from hub.store.event_store import EventStore, Retention  # noqa: E402
from hub.store.pages import PageChain  # noqa: E402
from hub.store.snapshots import ResourceSnapshots  # noqa: E402
from hub.store.stream_stats import StreamStats, backlog_cap  # noqa: E402
from hub.store.subscriptions import SubscriptionStore  # noqa: E402
from hub.store.topic_admin import TopicAdmin  # noqa: E402

BACKLOG = 100_000
EXPIRED = 50_000
POSITIONS = 20
RESOURCES = 50_000


def event(i: int) -> bytes:
    return b'{"loc":"http://bench/x/%08d","lastmod":"2024-01-01T00:00:00Z","change":"updated"}' % i


class Slowlog:
    """Every command's duration, from ``SLOWLOG`` (all logged: threshold 0)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)

    def reset(self) -> None:
        self.client.slowlog_reset()

    def read(self, names: tuple[bytes, ...] = (b"EVALSHA", b"EVAL")) -> dict[str, Any]:
        """The commands ``names`` (scripts by default) run since :meth:`reset`: calls,
        median, longest, total (us)."""
        entries = self.client.slowlog_get(100_000)
        scripts = [
            int(e["duration"])
            for e in entries
            if bytes(e["command"]).split(b" ", 1)[0].upper() in names
        ]
        ran = sorted(scripts) or [0]
        return {
            "calls": len(scripts),
            "median_us": ran[len(ran) // 2],
            "longest_us": ran[-1],
            "total_us": sum(scripts),
        }

    def baseline(self, *command: Any) -> dict[str, Any]:
        """The median of 5 runs of ``command`` (us), as a row."""
        runs = []
        for _ in range(5):
            self.reset()
            self.client.execute_command(*command)  # type: ignore[no-untyped-call]
            name = command[0].encode()
            runs.append(
                max(
                    int(e["duration"])
                    for e in self.client.slowlog_get(10)
                    if bytes(e["command"]).split(b" ", 1)[0].upper() == name
                )
            )
        middle = sorted(runs)[2]
        calls = 1 if command[0] == "EVAL" else 0
        return {"calls": calls, "median_us": middle, "longest_us": middle, "total_us": middle}

    def settle(self, stream: str) -> None:
        """Wait until Redis answers at its usual pace again after a bulk fill: for a second
        or two after one, every command (even ``SLOWLOG RESET``) took 5-90 ms here."""
        for _ in range(50):
            self.reset()
            self.client.xrange(stream, "-", "+", count=1000)
            if max(int(e["duration"]) for e in self.client.slowlog_get(10)) < 2_000:
                return
            time.sleep(0.2)


async def fill(store: EventStore, topic: str, n: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 1000):
        batch = [
            Change(f"http://bench/x/{i}", "updated", event(i))
            for i in range(start, min(n, start + 1000))
        ]
        ids += (await store.append(topic, batch)).ids
    return ids


async def cases(url: str) -> dict[str, dict[str, Any]]:
    sync = redis.Redis.from_url(url)
    sync.flushall()
    log = Slowlog(sync)
    client = aioredis.Redis.from_url(url)
    store = EventStore(client)
    out: dict[str, dict[str, Any]] = {}
    try:
        ids = await fill(store, "t", BACKLOG)
        stream = keys.events("t")

        log.settle(stream)
        out["baseline: XRANGE COUNT 1000"] = log.baseline("XRANGE", stream, "-", "+", "COUNT", 1000)
        out["baseline: 1,000 entries into Lua"] = log.baseline(
            "EVAL", "return #redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1000)", 1, stream
        )

        log.reset()
        await PageChain(store.scripts, window_seconds=3600, max_entries=50_000).advance("t")
        out["paging 100,000 (PageChain.advance)"] = log.read()

        stats = StreamStats(client, store.scripts)
        positions = [ids[50_000 + 1000 * i] for i in range(POSITIONS)]
        log.reset()
        found = await stats.backlogs("t", positions, backlog_cap(POSITIONS))
        out["backlog 20 x 10,000 (StreamStats.backlogs)"] = log.read()
        assert all(b.events == 10_000 and b.capped for b in found), found

        admin = TopicAdmin(client, store.scripts, SubscriptionStore(client))
        log.reset()
        lag = await admin.count_after("t", ids[0])
        out["lag 99,999 (TopicAdmin.count_after)"] = log.read()
        assert lag == BACKLOG - 1, lag

        aged = keys.events("aged")
        pipe = sync.pipeline(transaction=False)
        for i in range(EXPIRED):
            pipe.xadd(aged, {keys.EVENT_FIELD: event(i)}, id=f"{1_000_000 + i}-0")
        pipe.execute()
        log.settle(aged)
        expiring = EventStore(client, retention=Retention(seconds=3600))
        log.reset()
        await expiring.append("aged", [Change("http://bench/y", "updated", event(0))])
        out["age trim of 50,000 (one publish)"] = log.read()
        assert await expiring.length("aged") == 1
        assert await expiring.trimmed_through("aged") == f"{1_000_000 + EXPIRED - 1}-0"
        await expiring.close()

        bounded = EventStore(client, retention=Retention(max_events=1000))
        log.reset()
        last = await bounded.append("t", [Change("http://bench/y", "updated", event(0))])
        out["length trim of 99,001 (one publish)"] = log.read()
        log.reset()
        await bounded.trim("t")
        out["... then EventStore.trim to the bound"] = log.read()
        every = [*ids, *last.ids]
        assert await bounded.length("t") == 1000
        assert await bounded.trimmed_through("t") == every[-1001]
        await bounded.close()

        await fill(store, "rl", RESOURCES)
        log.settle(keys.events("rl"))
        resources = ResourceSnapshots(
            client, store.scripts, page_entries=RESOURCES, reuse_seconds=60, ttl_seconds=60
        )
        log.reset()
        exact = await resources.exact("rl")
        out["exact Resource List of 50,000 URIs (scripts, HSCAN, DEL)"] = log.read(
            (b"EVALSHA", b"EVAL", b"HSCAN", b"DEL")
        )
        assert exact is not None and len(exact.fold) == RESOURCES
    finally:
        await store.close()
        await client.aclose()
        sync.close()
    return out


def run_checkout(checkout: Path, url: str) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", "--checkout", str(checkout), "--redis-url", url],
        check=True,
        capture_output=True,
        text=True,
        cwd=checkout,
    )
    result: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def table(title: str, rows: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"{title}",
        "",
        "| case | script calls | median call (ms) | longest call (ms) | calls' total (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['calls']} | {r['median_us'] / 1000:.2f} | {r['longest_us'] / 1000:.2f}"
            f" | {r['total_us'] / 1000:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hub-src", type=Path, help="another checkout to run first")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(cases(args.redis_url))))
        return
    here = Path(__file__).resolve().parent.parent
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}")
    with tempfile.TemporaryDirectory(prefix="rshub-bench-") as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis")
        url = server.start()
        try:
            version = redis.Redis.from_url(url).info()["redis_version"]
            print(f"# Redis {version}\n")
            if args.hub_src:
                print(
                    table(f"{args.hub_src.resolve()}:", run_checkout(args.hub_src.resolve(), url))
                )
                print()
            print(table(f"{here}:", run_checkout(here, url)))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
