"""Benchmark resourcesync parsing and serialization against bare lxml.

Run ``python bench/documents.py`` from the repository root (no arguments, about 15 s). It
generates a 1,000-entry ``changelist-notification`` and a 1-entry one (the common single-change
publish) and reports for each, best of N rounds, entries/s and documents/s of:

* bare lxml (the baseline): ``etree.fromstring`` plus reading every element's tag, text and
  attributes, with the same hardened parser;
* the same extraction through ``etree.iterparse`` and through ``etree.XMLPullParser``
  (the two streaming alternatives to building the tree first);
* parse+validate: :func:`resourcesync.parse` with validation, returning models;
* hub ingest: :func:`hub.core.events.packed_from_document`, parse and validate down to the
  bytes the hub's append script takes, through the models (the full path), and through
  :func:`hub.core.quick_ingest.packed_from_document` (what a publish costs before Redis);
* their ratio to bare lxml (targets: parse+validate >= 0.5);
* serialize: :func:`resourcesync.serialize` of the parsed 1,000-entry document.
"""

from __future__ import annotations

import io
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lxml import etree

from hub.core.events import packed_from_document
from hub.core.quick_ingest import packed_from_document as quick_packed
from resourcesync import (
    Change,
    ChangeListNotification,
    Entry,
    Link,
    Metadata,
    parse,
    serialize,
)

ENTRIES = 1_000
ROUNDS = 7
#: Each round runs for about this long.
ROUND_SECONDS = 0.2
_PARSER_OPTIONS = {
    "resolve_entities": False,
    "no_network": True,
    "load_dtd": False,
    "huge_tree": False,
    "remove_comments": True,
    "remove_pis": True,
}


def make_notification(n: int = ENTRIES) -> bytes:
    """A realistic notification: loc, lastmod, rs:md change/hash/length/type, one link."""
    start = datetime(2013, 1, 2, tzinfo=UTC)
    changes = list(Change)
    entries = [
        Entry(
            loc=f"http://example.com/resources/{i}?rev={i * 7}",
            lastmod=start + timedelta(seconds=i),
            md=Metadata(
                change=changes[i % 3],
                hash=f"md5:{i:032x}",
                length=1_000 + i,
                type="text/html",
            ),
            links=(Link(rel="alternate", href=f"http://example.com/resources/{i}.pdf"),)
            if i % 4 == 0
            else (),
        )
        for i in range(n)
    ]
    up = Link(rel="up", href="http://example.com/capabilitylist.xml")
    return serialize(ChangeListNotification(links=(up,), entries=tuple(entries)))


def best_of(funcs: list[Callable[[], object]]) -> list[float]:
    """Best mean seconds per call of each function over ROUNDS rounds of about ROUND_SECONDS.

    Rounds are interleaved (each round runs every function in turn) so that a busy machine
    slows all of them alike and the ratios stay meaningful.
    """
    repeats = []
    for func in funcs:
        start = time.perf_counter()
        func()
        repeats.append(max(1, int(ROUND_SECONDS / max(time.perf_counter() - start, 1e-7))))
    best = [float("inf")] * len(funcs)
    for _ in range(ROUNDS):
        for n, (func, repeat) in enumerate(zip(funcs, repeats, strict=True)):
            start = time.perf_counter()
            for _ in range(repeat):
                func()
            best[n] = min(best[n], (time.perf_counter() - start) / repeat)
    return best


def bare_lxml(data: bytes) -> Callable[[], None]:
    parser = etree.XMLParser(**_PARSER_OPTIONS)  # type: ignore[arg-type]

    def run() -> None:
        root = etree.fromstring(data, parser)
        for element in root.iter():
            _ = element.tag, element.text, element.items()

    return run


def iterparse(data: bytes) -> Callable[[], None]:
    def run() -> None:
        for _, element in etree.iterparse(io.BytesIO(data), events=("end",), **_PARSER_OPTIONS):
            _ = element.tag, element.text, element.items()

    return run


def pull_parser(data: bytes) -> Callable[[], None]:
    def run() -> None:
        parser = etree.XMLPullParser(events=("end",), **_PARSER_OPTIONS)
        parser.feed(data)
        parser.close()
        for _, element in parser.read_events():
            _ = element.tag, element.text, element.items()

    return run


def report(label: str, data: bytes, entries: int) -> None:
    assert len(parse(data).entries) == entries
    names = [
        "bare lxml (fromstring)",
        "lxml iterparse",
        "lxml XMLPullParser",
        "parse+validate",
        "hub ingest, full path",
        "hub ingest (quick_ingest)",
    ]
    times = best_of(
        [
            bare_lxml(data),
            iterparse(data),
            pull_parser(data),
            lambda: parse(data),
            lambda: packed_from_document(data, len(data)),
            lambda: quick_packed(data, len(data)),
        ]
    )
    baseline = times[0]
    rows = list(zip(names, times, strict=True))
    print(f"\n{label}: {entries:,} entries, {len(data):,} bytes; best of {ROUNDS} rounds")
    print(f"  {'':24} {'entries/s':>12} {'docs/s':>10} {'per doc':>11} {'vs bare':>8}")
    for name, seconds in rows:
        print(
            f"  {name:24} {entries / seconds:>12,.0f} {1 / seconds:>10,.0f}"
            f" {seconds * 1e6:>9,.1f}us {baseline / seconds:>8.2f}"
        )


def main() -> None:
    print(
        f"python {platform.python_version()}, lxml {etree.__version__}, "
        f"{platform.machine()}, {platform.processor() or platform.platform()}"
    )
    big = make_notification()
    report("1,000-entry notification", big, ENTRIES)
    report("1-entry notification", make_notification(1), 1)
    doc = parse(big)
    (serialize_s,) = best_of([lambda: serialize(doc)])
    print(f"\nserialize (1,000 entries) {ENTRIES / serialize_s:>12,.0f} entries/s")


if __name__ == "__main__":
    main()
