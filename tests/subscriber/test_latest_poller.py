"""The poller on a hub's ``changes.xml`` (``Poller(latest=...)``, what ``rshub sync`` reads):
the marker judged by the position, the publisher's lastmod kept, and a hub that sends what
it should not.

The hub here is a static server holding the documents each case needs: the marker's
``rshub:lost-through`` and an entry's ``rshub:lastmod`` are the hub's bytes, so named cases
and a seeded fuzz check that a poll either returns changes, or raises
:class:`ChangesNoLongerListed` (an id it cannot read counts as lost: never silent) or
:class:`SourceError`, and nothing else, without stalling the loop.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from xml.sax.saxutils import quoteattr

import aiohttp
import pytest

from resourcesync import parse_datetime
from subscriber.exceptions import ChangesNoLongerListed, SourceError
from subscriber.poller import Poller
from subscriber.position import EventCursor
from tests.publisher.helpers import StaticSource, serve
from tests.watchdog import Watchdog

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<urlset '
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/" xmlns:rshub="urn:rshub:1">'
)
#: The receipt time of event 1795341600120-0, and of the marker 1 ms before it.
T120 = "2026-11-22T10:00:00.12Z"
T119 = "2026-11-22T10:00:00.119Z"


def marker(lost: str, when: str = T119) -> str:
    return (
        f"<url><loc>http://hub.invalid/topics/t/changes-lost</loc><lastmod>{when}</lastmod>"
        f'<rs:md change="updated" datetime="{when}" rshub:lost-through={quoteattr(lost)}/></url>'
    )


def entry(loc: str, event_id: str, when: str, published: str = "2020-01-01T00:00:00Z") -> str:
    return (
        f"<url><loc>http://r.invalid/{loc}</loc><lastmod>{when}</lastmod>"
        f'<rs:md change="updated" datetime="{when}" rshub:id="{event_id}"'
        f" rshub:lastmod={quoteattr(published)}/></url>"
    )


def changes_xml(*urls: str, start: str = T119) -> bytes:
    root = '<rs:ln rel="up" href="http://hub.invalid/cap.xml"/>'
    root += f'<rs:md capability="changelist" from="{start}"/>'
    return (HEAD + root + "".join(urls) + "</urlset>").encode()


INDEX = (
    b'<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    b'xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="changelist" '
    b'from="2026-01-01T00:00:00Z"/></sitemapindex>'
)
CAPS = (
    HEAD + '<rs:ln rel="up" href="http://hub.invalid/sd"/><rs:md capability="capabilitylist"/>'
    '<url><loc>{base}/rl.xml</loc><rs:md capability="resourcelist"/></url>'
    '<url><loc>{base}/cl.xml</loc><rs:md capability="changelist"/></url></urlset>'
)


@pytest.fixture
def source() -> StaticSource:
    return StaticSource()


@pytest.mark.parametrize(
    ("position", "lost"),
    [
        (EventCursor(event_id="1795341600120-0"), False),  # it read the lost change
        (EventCursor(event_id="1795341600121-5"), False),
        (EventCursor(event_id="1795341600119-9"), True),
        (
            EventCursor(event_id="1795341600120-0", watermark=datetime(2000, 1, 1, tzinfo=UTC)),
            False,
        ),
        (EventCursor(watermark=parse_datetime(T120)), False),  # no id: the watermark judges
        (EventCursor(watermark=parse_datetime(T119)), True),
        (EventCursor(), True),
    ],
)
async def test_the_marker_is_judged_by_the_position(
    session: aiohttp.ClientSession, source: StaticSource, position: EventCursor, lost: bool
) -> None:
    body = changes_xml(
        marker("1795341600120-0"), entry("a", "1795341600125-0", "2026-11-22T10:00:00.125Z")
    )
    async with serve(source.app) as base:
        source.docs["/cap.xml"] = CAPS.format(base=base).encode()
        source.docs["/changes.xml"] = body
        poller = Poller(session, f"{base}/cap.xml", latest=f"{base}/changes.xml")
        if lost:
            with pytest.raises(ChangesNoLongerListed) as caught:
                await poller.poll(position.watermark, position.event_id)
            assert caught.value.trimmed_through == "1795341600120-0"
            assert caught.value.resourcelist == f"{base}/rl.xml"
            assert "re-baseline from" in str(caught.value) and caught.value.status == 410
            position.rebaselined("1795341600120-0")  # what sync does after its new baseline
        events = await poller.poll(position.watermark, position.event_id)
        assert [(e.loc, e.id) for e in events] == [("http://r.invalid/a", "1795341600125-0")]
        # the publisher's lastmod, as push delivers it; the hub's time as the change time
        assert events[0].lastmod == "2020-01-01T00:00:00Z"
        assert events[0].when == parse_datetime("2026-11-22T10:00:00.125Z")


@pytest.mark.parametrize(
    ("case", "body", "outcome"),
    [
        ("an id that is no id", changes_xml(marker("yesterday")), ChangesNoLongerListed),
        ("an empty id", changes_xml(marker("")), ChangesNoLongerListed),
        (
            "an id past 64 bits",
            changes_xml(marker("99999999999999999999999-0")),
            ChangesNoLongerListed,
        ),
        ("a lastmod that is no time", changes_xml(entry("a", "9-0", T120, "yesterday")), list),
        ("an index instead", INDEX, SourceError),
        ("not XML", b"<urlset", SourceError),
    ],
)
async def test_a_hub_that_sends_what_it_should_not(
    session: aiohttp.ClientSession,
    source: StaticSource,
    case: str,
    body: bytes,
    outcome: type,
) -> None:
    async with serve(source.app) as base:
        source.docs["/cap.xml"] = CAPS.format(base=base).encode()
        source.docs["/changes.xml"] = body
        poller = Poller(session, f"{base}/cap.xml", latest=f"{base}/changes.xml")
        position = EventCursor(event_id="1795341600200-0")
        if outcome is list:
            assert await poller.poll(position.watermark, position.event_id) == [], case
        else:
            with pytest.raises(outcome):
                await poller.poll(position.watermark, position.event_id)


async def test_fuzz_markers_and_lastmods(
    session: aiohttp.ClientSession, source: StaticSource
) -> None:
    rng = random.Random(20261122)
    values = [
        "1-0",
        "0-0",
        "",
        "x",
        "1795341600120-0",
        "1795341600120",
        "-1-0",
        "1e3-0",
        "\u00e9",
        "1-0-0",
        " 1-0",
        "2026-01-01T00:00:00Z",
        "1795341600300-0",
    ]
    async with serve(source.app) as base, Watchdog():
        source.docs["/cap.xml"] = CAPS.format(base=base).encode()
        poller = Poller(session, f"{base}/cap.xml", latest=f"{base}/changes.xml")
        for n in range(200):
            urls = [
                entry(
                    f"r{k}", f"1795341600{130 + k}-0", "2026-11-22T10:00:00.13Z", rng.choice(values)
                )
                for k in range(rng.randint(0, 3))
            ]
            if rng.random() < 0.7:
                urls.insert(
                    rng.randint(0, len(urls)),
                    marker(rng.choice(values), rng.choice([T119, T120, "2026-11-22T10:00:01Z"])),
                )
            source.docs["/changes.xml"] = changes_xml(*urls) + b" " * n  # a new version each time
            position = rng.choice(
                [
                    EventCursor(),
                    EventCursor(event_id="1795341600200-0"),
                    EventCursor(watermark=parse_datetime(T120) + timedelta(seconds=1)),
                ]
            )
            try:
                events = await poller.poll(position.watermark, position.event_id)
            except (ChangesNoLongerListed, SourceError):
                continue
            assert all(e.loc.startswith("http://r.invalid/") for e in events)
