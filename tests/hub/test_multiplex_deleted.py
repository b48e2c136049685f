"""A topic deleted (``DELETE /admin/topics/{name}``) while a stream of several topics follows
it: the stream goes on for the others, nothing of theirs lost or repeated; the client is told
which topic ended, with an id that no longer names it; a prefix stream follows a topic of that
name again once it is published to anew. Deleting the last topic followed ends the stream
(``event: deleted``, WebSocket 1000), and deleting one while the stream catches up drops what
of it was read and unsent.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest

from hub.web.streams import STREAMING
from tests.conftest import Hub
from tests.hub.topic_streams import Reader, follow_sse, follow_ws, resume_topics
from tests.support import TIME_SCALE, changes, notification, wait_for

ADMIN = {"Authorization": "Bearer adm"}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"admin_token": "adm"}


async def publish(hub: Hub, topic: str, n: int = 1, start: int = 0) -> list[str]:
    resp = await hub.publish(topic, notification(changes(n, start=start)))
    assert resp.status == 202, await resp.text()
    ids: list[str] = (await resp.json())["ids"]
    return ids


async def delete(hub: Hub, topic: str) -> None:
    async with hub.session.delete(f"{hub.url}/admin/topics/{topic}", headers=ADMIN) as resp:
        assert resp.status == 200, await resp.text()


def _followed(hub: Hub) -> list[str]:
    """The topics the hub's open streams follow (one entry per topic and stream)."""
    return sorted(stream.feed.topic for stream in hub.app[STREAMING].closing._streams)


@contextlib.asynccontextmanager
async def _stream(hub: Hub, transport: str, query: str) -> AsyncIterator[tuple[Reader, Any]]:
    """A stream of several topics read in a task, as (its reader, the task)."""
    reader = Reader()
    done = asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        if transport == "sse":
            resp = await stack.enter_async_context(hub.session.get(f"{hub.url}/events?{query}"))
            assert resp.status == 200, await resp.text()
            task = asyncio.create_task(reader.sse(resp, done.is_set))
        else:
            ws = await stack.enter_async_context(hub.session.ws_connect(f"{hub.url}/ws?{query}"))
            task = asyncio.create_task(reader.ws(ws, done.is_set))
        try:
            await asyncio.wait_for(reader.opened.wait(), 10 * TIME_SCALE)
            yield reader, task
        finally:
            done.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _in_order(got: list[tuple[str, str]], topic: str) -> list[str]:
    theirs = [i for t, i in got if t == topic]
    assert theirs == sorted(theirs, key=lambda i: tuple(map(int, i.split("-"))))
    return theirs


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_deleting_one_of_three_topics_the_stream_goes_on_for_the_others(
    hub: Hub, transport: str
) -> None:
    published = {t: await publish(hub, t, 2) for t in ("t-a", "t-b", "t-c")}
    query = "topic=t-a&topic=t-b&topic=t-c&since=0"
    async with _stream(hub, transport, query) as (reader, task):
        await wait_for(lambda: len(reader.events) >= 6)
        await delete(hub, "t-c")
        await wait_for(lambda: reader.deleted() == ["t-c"])
        _kind, _data, notice_id = reader.named[0]
        assert notice_id is not None and "t-c" not in resume_topics(notice_id)
        await wait_for(lambda: _followed(hub) == ["t-a", "t-b"])
        for topic in ("t-a", "t-b"):
            published[topic] += await publish(hub, topic, 2, start=10)
        await wait_for(lambda: len(reader.events) >= 10)
        assert not task.done()  # still open
        assert reader.last_id is not None and "t-c" not in resume_topics(reader.last_id)
    got = reader.pairs()
    assert len(got) == len(set(got)) == 10
    for topic, ids in published.items():
        assert _in_order(got, topic) == ids
    # A reconnect with the last id resumes the others exactly, and does not ask for t-c.
    last = reader.last_id
    more = await publish(hub, "t-a", 1, start=20) + await publish(hub, "t-b", 1, start=20)
    if transport == "sse":
        url = f"{hub.url}/events?topic=t-a&topic=t-b&topic=t-c"
        again = await follow_sse(hub.session, url, 2, headers={"Last-Event-ID": last})
    else:
        again = await follow_ws(hub.session, f"{hub.url}/ws?{query[:-1]}{last}", 2)
    assert sorted(i for _t, i in again.pairs()) == sorted(more)


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_a_prefix_stream_goes_on_and_follows_the_topic_again_once_published_anew(
    hub: Hub, transport: str
) -> None:
    await publish(hub, "p-a")
    await publish(hub, "p-b")
    await publish(hub, "other")
    async with _stream(hub, transport, "topic_prefix=p-") as (reader, task):
        await wait_for(lambda: _followed(hub) == ["p-a", "p-b"])
        await delete(hub, "p-b")
        await wait_for(lambda: reader.deleted() == ["p-b"])
        expected = [("p-a", i) for i in await publish(hub, "p-a", 2, start=5)]
        await wait_for(lambda: len(reader.events) >= 2)
        # p-b published to anew is found as any new topic of the prefix, from its first event.
        expected += [("p-b", i) for i in await publish(hub, "p-b", 2, start=7)]
        expected += [("p-c", i) for i in await publish(hub, "p-c", 1)]
        await wait_for(lambda: len(reader.events) >= 5, timeout=20)
        assert not task.done()
    assert sorted(reader.pairs()) == sorted(expected)


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_deleting_every_topic_followed_ends_the_stream_with_its_resume_point(
    hub: Hub, transport: str
) -> None:
    await publish(hub, "e-a")
    await publish(hub, "e-b")
    async with _stream(hub, transport, "topic=e-a&topic=e-b") as (reader, task):
        await delete(hub, "e-a")
        await wait_for(lambda: reader.deleted() == ["e-a"])
        await delete(hub, "e-b")
        async with asyncio.timeout(10 * TIME_SCALE):
            await task  # the stream ended
    assert reader.last_id is not None and resume_topics(reader.last_id) == {}
    if transport == "sse":
        kind, data, resume = reader.named[-1]
        assert kind == "deleted" and resume == reader.last_id
        assert data == f"topic deleted: e-b; resume with Last-Event-ID: {resume}"
    else:
        assert reader.closed is not None
        code, reason = reader.closed
        assert code == 1000 and reason.startswith("topic deleted: e-b; resume with since=m1.")
    await wait_for(lambda: _followed(hub) == [])


async def test_deleting_a_topic_while_the_stream_catches_up(hub: Hub) -> None:
    """The client reads slowly (a small receive buffer, and a pause), so the hub is still
    sending the merged history when the topic is deleted: what of it was read and unsent is
    dropped, the others' history and live events arrive whole, in order, once."""
    n = 3000
    published = {t: await publish(hub, t, n) for t in ("h-a", "h-b", "h-c")}
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (hub.settings.host, hub.settings.port))
    stream_reader, writer = await asyncio.open_connection(sock=sock)
    query = "topic=h-a&topic=h-b&topic=h-c&since=0"
    writer.write(f"GET /events?{query} HTTP/1.0\r\nHost: {hub.settings.host}\r\n\r\n".encode())
    reader = Reader()
    try:
        async with asyncio.timeout(60 * TIME_SCALE):
            while await stream_reader.readline() not in (b"\r\n", b""):
                pass  # the response head
            response = cast(aiohttp.ClientResponse, SimpleNamespace(content=stream_reader))
            await reader.sse(response, reader.count(10))
            streams = hub.app[STREAMING].closing._streams
            assert not any(s.live for s in streams if s.feed.topic == "h-c")  # catching up
            await delete(hub, "h-c")
            await reader.sse(
                response, lambda: len(reader.events) >= 2 * n and bool(reader.deleted())
            )
            assert reader.deleted() == ["h-c"]
            live = await publish(hub, "h-a", 1, start=n)
            await reader.sse(response, reader.count(len(reader.events) + 1))
    finally:
        writer.close()
    got = reader.pairs()
    assert len(got) == len(set(got))
    assert _in_order(got, "h-a") == published["h-a"] + live
    assert _in_order(got, "h-b") == published["h-b"]
    theirs = _in_order(got, "h-c")  # sent before the delete, if any: the first of them
    assert theirs == published["h-c"][: len(theirs)]
    assert reader.last_id is not None and "h-c" not in resume_topics(reader.last_id)
