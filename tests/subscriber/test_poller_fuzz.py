"""The poller against a hostile Source: a seeded fuzz, under the watchdog.

``rshub sync --source`` reads whatever a Source serves: documents of the wrong type where
another is expected, indexes that list themselves, entries without ``rs:md``, change or
time, links anywhere, and bytes cut or changed. Whatever they are, :meth:`Poller.poll` and
:meth:`Poller.resources` return or raise a :class:`SubscriberError` that says why (which
the follower reports and polls again): no other exception, no hang, no stall.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from aiohttp import web

from resourcesync import (
    CapabilityList,
    Change,
    ChangeList,
    ChangeListIndex,
    Entry,
    Link,
    Metadata,
    ResourceList,
    ResourceListIndex,
    SourceDescription,
    serialize,
)
from subscriber.exceptions import SubscriberError
from subscriber.poller import Poller
from tests.publisher.helpers import serve
from tests.watchdog import Watchdog

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = ["desc", "cap", "cl", "cli", "rl", "rli"]
TYPES = [ChangeList, ChangeListIndex, CapabilityList, SourceDescription, ResourceList,
         ResourceListIndex]  # fmt: skip


def moment(rng: random.Random) -> datetime:
    return T0 + timedelta(seconds=rng.randint(-5, 9))


def entry(rng: random.Random, base: str) -> Entry:
    loc = rng.choice(
        [f"{base}/{rng.choice(NAMES)}.xml", f"{base}/r{rng.randint(0, 5)}", "http://r.invalid/a"]
    )
    md = rng.choice(
        [
            None,
            Metadata(change=rng.choice(list(Change))),
            Metadata(capability=rng.choice(["changelist", "resourcelist", "capabilitylist"])),
            Metadata(from_=moment(rng), until=rng.choice([None, moment(rng)])),
            Metadata(datetime=moment(rng), change=Change.UPDATED),
        ]
    )
    return Entry(loc=loc, lastmod=rng.choice([None, moment(rng)]), md=md)


def document(rng: random.Random, base: str) -> bytes:
    """A document of any type, linking anywhere among the Source's, sometimes mangled."""
    cls = rng.choice(TYPES)
    md = Metadata(
        from_=rng.choice([None, T0]), at=rng.choice([None, T0]), until=rng.choice([None, T0])
    )
    links = tuple(
        Link(rel=rng.choice(["up", "index"]), href=f"{base}/{rng.choice(NAMES)}.xml")
        for _ in range(rng.randint(0, 2))
    )
    entries = tuple(entry(rng, base) for _ in range(rng.randint(0, 5)))
    data = bytearray(serialize(cls(md=md, entries=entries, links=links)))
    if rng.random() < 0.2:
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            data[at : at + rng.randint(0, 5)] = rng.choice([b"", b"<", b'"', b"x", b"9999"])
    return bytes(data)


@pytest.fixture
async def source() -> AsyncIterator[tuple[str, dict[str, bytes]]]:
    """A Source serving ``docs`` (name -> bytes), which each case replaces."""
    docs: dict[str, bytes] = {}

    async def answer(request: web.Request) -> web.Response:
        body = docs.get(request.match_info["name"])
        if body is None:
            return web.Response(status=404)
        return web.Response(body=body, content_type="application/xml")

    app = web.Application()
    app.router.add_get("/{name}", answer)
    async with serve(app) as base:
        yield base, docs


async def test_fuzz_the_poller_reads_any_source_or_says_why(
    source: tuple[str, dict[str, bytes]],
) -> None:
    base, docs = source
    rng = random.Random(6041)
    polled = with_changes = refused = 0
    async with aiohttp.ClientSession() as session, Watchdog() as dog:
        for _ in range(300):
            docs.clear()
            docs.update({f"{name}.xml": document(rng, base) for name in NAMES})
            poller = Poller(session, f"{base}/{rng.choice(NAMES)}.xml", overlap=timedelta(0))
            try:
                async with asyncio.timeout(10):
                    changes = await poller.poll(rng.choice([None, T0]))
                    polled += 1
                    with_changes += bool(changes)
                    async for _entry in poller.resources():
                        pass
            except SubscriberError:
                refused += 1
    await dog.sockets_back()
    # The seed reaches every outcome: refusals, empty polls and polls with changes.
    assert refused > 100 and polled > 30 and with_changes > 10, (refused, polled, with_changes)
