"""``changedump-notification`` publishes: stored, and fanned out on SSE, WebSocket and
WebSub like change notifications, selected by ``change=changedump``; never mixed with
changes in one WebSub body, and left out of the documents for polling."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator

import orjson
import pytest

from resourcesync import ChangeDumpNotification, ChangeListNotification, parse
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_fuzz import mutate
from tests.hub.test_streams import sse_collect, ws_collect
from tests.hub.test_websub import subscribe
from tests.support import changes, notification, wait_for
from tests.watchdog import Watchdog

PACKAGE = "http://source.invalid/dump/part1.zip"
MANIFEST = "http://source.invalid/dump/part1.xml"


def dump_notification(*locs: str, declared: dict[str, str] | None = None) -> bytes:
    entries = b"".join(
        b"<url><loc>%s</loc>"
        b'<rs:md type="application/zip" length="2048" hash="md5:%s"'
        b' from="2026-01-01T00:00:00Z" until="2026-01-02T00:00:00Z"/>'
        b'<rs:ln rel="contents" href="%s" type="application/xml"/></url>'
        % (loc.encode(), b"0" * 32, MANIFEST.encode())
        for loc in locs
    )
    return (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        b' xmlns:rs="http://www.openarchives.org/rs/terms/">'
        b'<rs:ln rel="up" href="http://source.invalid/capabilitylist.xml"/>'
        + b"".join(
            b'<rs:ln rel="%s" href="%s"/>' % (rel.encode(), href.encode())
            for rel, href in (declared or {}).items()
        )
        + b'<rs:md capability="changedump-notification"/>'
        + entries
        + b"</urlset>"
    )


STORED = {
    "topic": "t",
    "loc": PACKAGE,
    "lastmod": "2026-01-02T00:00:00Z",
    "change": "changedump",
    "hash": "md5:" + "0" * 32,
    "length": 2048,
    "type": "application/zip",
    "from": "2026-01-01T00:00:00Z",
    "until": "2026-01-02T00:00:00Z",
    "links": [{"rel": "contents", "href": MANIFEST, "type": "application/xml"}],
}


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def publish(hub: Hub, body: bytes) -> list[str]:
    resp = await hub.publish("t", body)
    assert resp.status == 202, await resp.text()
    ids: list[str] = orjson.loads(await resp.read())["ids"]
    return ids


async def test_a_changedump_notification_reaches_websocket_and_sse(hub: Hub) -> None:
    ids = await publish(hub, dump_notification(PACKAGE))
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since=0") as ws:
        (event,) = await ws_collect(ws, 1)
    assert event == {"id": ids[0], **STORED}
    async with hub.session.get(f"{hub.url}/topics/t/events?since=0") as resp:
        (event,) = await sse_collect(resp, 1)
    assert event["change"] == "changedump" and event["id"] == ids[0]


async def test_the_change_filter_selects_packages_or_changes(hub: Hub) -> None:
    await publish(hub, notification(changes(2)))
    dump_ids = await publish(hub, dump_notification(PACKAGE))
    change_ids = await publish(hub, notification(changes(1, start=5)))
    url = f"{hub.url}/topics/t/ws?since=0&change=changedump"
    async with hub.session.ws_connect(url) as ws:
        assert [e["id"] for e in await ws_collect(ws, 1)] == dump_ids
    url = f"{hub.url}/topics/t/events?since={dump_ids[0]}&change=created,updated,deleted"
    async with hub.session.get(url) as resp:
        assert [e["id"] for e in await sse_collect(resp, 1)] == change_ids
    resp = await hub.session.get(f"{hub.url}/topics/t/events?change=dumps")
    assert resp.status == 400
    assert "changedump" in (await resp.json())["error"]


async def test_websub_delivers_packages_in_a_changedump_notification_of_their_own(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe(hub, callback)
    first = await publish(hub, notification(changes(1)))
    dumps = await publish(hub, dump_notification(PACKAGE, PACKAGE.replace("1", "2")))
    last = await publish(hub, notification(changes(1, start=3)))
    await wait_for(lambda: len(callback.ids) >= 4)
    assert callback.ids == first + dumps + last
    kinds = [type(parse(d.body)) for d in callback.deliveries]
    for delivery, kind in zip(callback.deliveries, kinds, strict=True):
        expected = ChangeDumpNotification if set(delivery.ids) <= set(dumps) else None
        assert expected is None or kind is expected
        assert set(delivery.ids) <= set(dumps) or not set(delivery.ids) & set(dumps)
    assert ChangeDumpNotification in kinds and ChangeListNotification in kinds
    package = next(parse(d.body) for d in callback.deliveries if set(d.ids) <= set(dumps)).entries[
        0
    ]
    assert package.loc == PACKAGE and package.md is not None
    assert package.md.type == "application/zip" and package.md.length == 2048
    assert [(ln.rel, ln.href) for ln in package.links] == [("contents", MANIFEST)]


async def test_a_websub_filter_on_changedump_gets_only_packages(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe(hub, callback, **{"hub.filter.change": "changedump"})
    await publish(hub, notification(changes(2)))
    dumps = await publish(hub, dump_notification(PACKAGE))
    await wait_for(lambda: len(callback.ids) >= 1)
    assert callback.ids == dumps


async def test_packages_stay_out_of_the_documents_for_polling(hub: Hub) -> None:
    await publish(hub, notification(changes(1)))
    await publish(hub, dump_notification(PACKAGE))
    for path in ("resourcelist.xml", "changelist/1.xml", "changes.xml"):
        resp = await hub.session.get(f"{hub.url}/topics/t/{path}")
        assert resp.status == 200, path
        body = await resp.read()
        parse(body)  # still a valid document
        assert PACKAGE.encode() not in body and b"example.org/r0" in body, path


async def capabilities(hub: Hub) -> tuple[dict[str, list[str]], str]:
    """The topic's Capability List: the locs of each capability, and its ETag."""
    resp = await hub.session.get(f"{hub.url}/topics/t/capabilitylist.xml")
    assert resp.status == 200
    doc = parse(await resp.read())
    found: dict[str, list[str]] = {}
    for entry in doc.entries:
        assert entry.md is not None
        found.setdefault(str(entry.md.capability), []).append(entry.loc)
    return found, resp.headers["ETag"]


async def test_the_dumps_a_source_declares_are_in_the_topics_capability_list(hub: Hub) -> None:
    await publish(hub, notification(changes(1)))
    before, etag = await capabilities(hub)
    assert "resourcedump" not in before and "changedump" not in before
    declared = {
        "resourcedump": "http://source.invalid/resourcedump.xml",
        "changedump": "http://source.invalid/changedump.xml",
    }
    await publish(hub, dump_notification(PACKAGE, declared=declared))
    after, etag2 = await capabilities(hub)
    assert after["resourcedump"] == [declared["resourcedump"]]
    assert after["changedump"] == [declared["changedump"]]
    assert etag2 != etag, "a cached Capability List is not served for the new one"
    moved = {"resourcedump": "http://source.invalid/v2/resourcedump.xml"}
    await publish(hub, dump_notification(PACKAGE, declared=moved))
    latest, _ = await capabilities(hub)
    assert latest["resourcedump"] == [moved["resourcedump"]]
    assert latest["changedump"] == [declared["changedump"]]
    locs = [loc for found in latest.values() for loc in found]
    assert len(locs) == len(set(locs)), "each loc once: resync keys a Capability List by loc"


async def test_a_declared_dump_never_takes_the_place_of_the_hubs_documents(hub: Hub) -> None:
    own = f"{hub.url}/topics/t/resourcelist.xml"
    declared = {"resourcedump": own, "changedump": f"{hub.url}/topics/t"}
    await publish(hub, dump_notification(PACKAGE, declared=declared))
    found, _ = await capabilities(hub)
    assert found["resourcelist"] == [own]
    assert "resourcedump" not in found and "changedump" not in found
    same = {"resourcedump": "http://s.invalid/d.xml", "changedump": "http://s.invalid/d.xml"}
    await publish(hub, dump_notification(PACKAGE, declared=same))
    found, _ = await capabilities(hub)
    assert found["resourcedump"] == ["http://s.invalid/d.xml"] and "changedump" not in found


@pytest.mark.parametrize(
    "href",
    ["relative/dump.xml", "javascript:alert(1)", "http://", "http://h.invalid/" + "x" * 3000],
    ids=["relative", "javascript", "no-host", "too-long"],
)
async def test_a_declared_dump_that_is_no_http_url_is_not_linked(hub: Hub, href: str) -> None:
    await publish(hub, dump_notification(PACKAGE, declared={"resourcedump": href}))
    found, _ = await capabilities(hub)
    assert "resourcedump" not in found


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (dump_notification(), "carries no packages"),
        (dump_notification("not a url"), "absolute http"),
        (
            dump_notification(PACKAGE)
            .replace(b' from="2026-01-01T00:00:00Z"', b"")
            .replace(b' until="2026-01-02T00:00:00Z"', b""),
            "needs lastmod",
        ),
        (dump_notification(PACKAGE).replace(b"md5:", b"md6:"), "hash"),
    ],
    ids=["empty", "relative-loc", "no-time", "bad-hash"],
)
async def test_a_bad_changedump_notification_is_a_clear_400_storing_nothing(
    hub: Hub, body: bytes, problem: str
) -> None:
    resp = await hub.publish("t", body)
    assert resp.status == 400
    assert problem in (await resp.json())["error"]
    resp = await hub.session.get(f"{hub.url}/topics/t/changes.xml")
    assert resp.status == 404, "nothing was stored: the topic does not exist"


async def test_seeded_fuzz_of_changedump_notifications_never_5xx(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutated changedump-notifications: each is stored whole (202) or refused (4xx),
    with no traceback, no stall of the hub's loop and every event readable after."""
    rng = random.Random(20261202)
    base = dump_notification(PACKAGE, PACKAGE.replace("1", "2"))
    statuses: Counter[int] = Counter()
    accepted = 0
    async with Watchdog(max_errors=0):
        for _ in range(200):
            resp = await hub.publish("t", mutate(rng, base))
            statuses[resp.status] += 1
            assert resp.status < 500, (resp.status, await resp.text())
            if resp.status == 202:
                accepted += len(orjson.loads(await resp.read())["ids"])
            else:
                assert "error" in await resp.json()
    assert statuses[202] > 10 and sum(n for s, n in statuses.items() if s >= 400) > 50, statuses
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since=0") as ws:
        events = await ws_collect(ws, accepted)
    assert len(events) == accepted and all(isinstance(e["loc"], str) for e in events)
    assert not [r for r in caplog.records if r.exc_info], "no traceback in the log"
