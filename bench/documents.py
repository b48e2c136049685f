"""Benchmark resourcesync parsing and serialization against bare lxml.

Run ``python bench/documents.py`` from the repository root (no arguments, < 60 s). It
generates a 1,000-entry ``changelist-notification`` and reports, best of N runs:

* bare lxml: ``etree.fromstring`` plus reading every element's text and attributes;
* parse+validate: :func:`resourcesync.parse` with validation;
* their ratio (the hub's ingest target is >= 0.3 and >= 100,000 entries/s);
* serialize: :func:`resourcesync.serialize` of the parsed document.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lxml import etree

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
REPEAT = 40


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


def best_of(func: Callable[[], object]) -> float:
    """Best mean seconds per call over ROUNDS rounds of REPEAT calls."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(REPEAT):
            func()
        best = min(best, (time.perf_counter() - start) / REPEAT)
    return best


def main() -> None:
    data = make_notification()
    parser = etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )

    def bare_lxml() -> None:
        root = etree.fromstring(data, parser)
        for element in root.iter():
            _ = element.text, element.attrib.items()

    doc = parse(data)
    assert len(doc.entries) == ENTRIES

    lxml_s = best_of(bare_lxml)
    parse_s = best_of(lambda: parse(data))
    serialize_s = best_of(lambda: serialize(doc))
    print(
        f"python {platform.python_version()}, lxml {etree.__version__}, "
        f"{platform.machine()}, {platform.processor() or platform.platform()}"
    )
    print(f"document: {ENTRIES} entries, {len(data):,} bytes; best of {ROUNDS}x{REPEAT}")
    print(f"bare lxml        {ENTRIES / lxml_s:>12,.0f} entries/s")
    print(f"parse+validate   {ENTRIES / parse_s:>12,.0f} entries/s")
    print(f"ratio            {lxml_s / parse_s:>12.2f}")
    print(f"serialize        {ENTRIES / serialize_s:>12,.0f} entries/s")


if __name__ == "__main__":
    main()
