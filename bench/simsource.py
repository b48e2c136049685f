"""The benchmark's Source: ``resync-simulator`` (PyPI) publishing every change to the hub.

The simulator's own ``Source`` makes the changes (create/update/delete, random payload up
to ``--max-size`` bytes, one every ``--delay`` seconds) and its Tornado ``HTTPInterface``
serves the resources on 127.0.0.1. Its observer hook (the one its Change List memory uses)
is given one more observer, which at each change:

1. appends ``monotonic-time <TAB> uri <TAB> md5-hex or -`` to the truth file (the lead
   states the metrics compare with; the initial state is written first);
2. submits the change (with ``hash`` and ``length``) to the hub through the ``publisher``
   library with no batching delay.

Resources are announced with ``--base-uri`` (the byte-counting proxy in front of
``--port``). Changes start once the ``--go`` file exists. Shims, neither changing the
simulator as a Source: ``random.sample`` accepts the ``dict_keys`` resync-simulator 1.1.0
passes it (Python 3.11 refuses them); Tornado listens on 127.0.0.1 only, with
``debug=False`` (no autoreload).

Usage: ``python bench/simsource.py --port P --base-uri URL --hub URL --topic T
--resources R --delay S --truth FILE --go FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import random
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

# Run as a script, this directory comes first on sys.path, where bench/publisher.py would
# shadow the publisher package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

_sample = random.sample


def _sample_any(population: Any, k: int, **kwargs: Any) -> list[Any]:
    if not isinstance(population, Sequence):
        population = list(population)
    return _sample(population, k, **kwargs)


random.sample = _sample_any

import tornado.httpserver  # noqa: E402
import tornado.ioloop  # noqa: E402
import tornado.platform.asyncio  # noqa: E402
import tornado.web  # noqa: E402
from simulator.http import HTTPInterface  # type: ignore[import-untyped]  # noqa: E402
from simulator.observer import Observer  # type: ignore[import-untyped]  # noqa: E402
from simulator.source import Source  # type: ignore[import-untyped]  # noqa: E402

from publisher import BatchPolicy, BlockingPublisher, make_change  # noqa: E402


class LocalHTTPInterface(HTTPInterface):  # type: ignore[misc]
    """The simulator's HTTP interface on 127.0.0.1, without Tornado's debug autoreload."""

    def run(self) -> None:
        asyncio.set_event_loop_policy(tornado.platform.asyncio.AnyThreadEventLoopPolicy())
        app = tornado.web.Application(handlers=self.handlers, debug=False, **self.settings)
        self.http_server = tornado.httpserver.HTTPServer(app)
        self.http_server.listen(self.port, address="127.0.0.1")
        tornado.ioloop.IOLoop.current().start()


class Announcer(Observer):  # type: ignore[misc]
    """Writes each change to the truth file and submits it to the hub."""

    def __init__(self, source: Any, truth: TextIO, publisher: BlockingPublisher) -> None:
        self.source = source
        self.truth = truth
        self.publisher = publisher
        self.lock = threading.Lock()

    def notify(self, change: Any) -> None:
        basename = change.uri.rsplit("/", 1)[1]
        now = datetime.now(UTC)
        if change.change == "deleted":
            digest, entry = "-", make_change(change.uri, "deleted", now)
        else:
            payload = self.source.resource_payload(basename).encode()
            digest = hashlib.md5(payload).hexdigest()
            entry = make_change(
                change.uri, change.change, now, hash=f"md5:{digest}", length=len(payload)
            )
        with self.lock:
            self.truth.write(f"{time.monotonic():.6f}\t{change.uri}\t{digest}\n")
            self.truth.flush()
        self.publisher.submit(entry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--base-uri", required=True)
    parser.add_argument("--hub", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--resources", type=int, required=True)
    parser.add_argument("--delay", type=float, required=True)
    parser.add_argument("--max-size", type=int, default=1000)
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--go", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    config = {
        "name": "rshub sync-model benchmark",
        "number_of_resources": args.resources,
        "change_delay": args.delay,
        "event_types": ["create", "update", "delete"],
        "average_payload": args.max_size,  # the simulator draws sizes from 0..this
        "max_events": -1,  # never reached: runs until stopped
        "stats_interval": 10**9,
    }
    source = Source(config, args.base_uri, args.port, "1.1")
    source.bootstrap()
    publisher = BlockingPublisher(
        args.hub, args.topic, batching=BatchPolicy(max_changes=1000, max_wait=0.0)
    )
    now = datetime.now(UTC)
    initial = []
    with args.truth.open("w") as truth:
        for resource in source.resources:
            basename = resource.uri.rsplit("/", 1)[1]
            payload = source.resource_payload(basename).encode()
            digest = hashlib.md5(payload).hexdigest()
            truth.write(f"0\t{resource.uri}\t{digest}\n")
            initial.append(
                make_change(resource.uri, "created", now, hash=f"md5:{digest}", length=len(payload))
            )
        for i in range(0, len(initial), 1000):
            publisher.publish(initial[i : i + 1000], timeout=60)
        truth.flush()
        http = LocalHTTPInterface(source)
        http.daemon = True
        http.start()
        print("ready", flush=True)
        deadline = time.monotonic() + 900
        while not args.go.exists():  # the benchmark's signal; bounded
            if time.monotonic() > deadline:
                sys.exit("simsource: no go signal")
            time.sleep(0.01)
        source.register_observer(Announcer(source, truth, publisher))
        source.simulate_changes()


if __name__ == "__main__":
    main()
