"""Graceful shutdown: SIGTERM ends every stream with its resume point, within two seconds.

``rshub serve`` runs as a child process on the session's Redis; 1,000 stream clients (500
WebSocket, 500 SSE on raw connections) follow a topic from this process. On SIGTERM each
WebSocket must get close code 1001 with the last event id in its reason, each SSE stream a
final ``event: shutdown`` with ``retry:`` and that ``id:``, and the process must exit in
under 2 s. Before, streams were left to aiohttp's shutdown timeout: 1006 after seconds, and
no final SSE event.

Then a subscriber (:class:`subscriber.stream.HubStream`) following one of two processes
reconnects at once to the other when its process shuts down, and misses and repeats nothing.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from subscriber.stream import HubStream
from tests.support import TIME_SCALE, HubProcess, changes, notification, wait_for

pytestmark = pytest.mark.timeout(180)

TOPIC = "shutdown"
WS_CLIENTS = 500
SSE_CLIENTS = 500
BOUND = 2.0


async def publish(session: aiohttp.ClientSession, hub: HubProcess, n: int, start: int) -> list[str]:
    async with session.post(
        f"{hub.url}/topics/{TOPIC}",
        data=notification(changes(n, start=start)),
        headers={"Content-Type": "application/xml"},
    ) as resp:
        assert resp.status == 202, await resp.text()
        ids: list[str] = (await resp.json())["ids"]
        return ids


class WsClient:
    def __init__(self) -> None:
        self.last_id: str | None = None
        self.close_code: int | None = None
        self.close_reason = ""

    async def run(self, session: aiohttp.ClientSession, url: str, ready: asyncio.Event) -> None:
        async with session.ws_connect(url, autoping=True) as ws:
            ready.set()
            while True:
                msg = await ws.receive()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    self.last_id = msg.json()[-1]["id"]
                    continue
                if msg.type == aiohttp.WSMsgType.CLOSE:
                    self.close_reason = str(msg.extra or "")
                break
            await ws.close()
            self.close_code = ws.close_code


class SseClient:
    """A raw SSE reader (HTTP/1.0: the body is not chunked): what a minimal client sees."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self.blocks: list[dict[str, str]] = []
        self.ready = asyncio.Event()

    async def run(self, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"GET /topics/{TOPIC}/events HTTP/1.0\r\nHost: 127.0.0.1\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        try:
            await reader.readuntil(b"\r\n\r\n")  # the response head
            self.ready.set()
            block: dict[str, str] = {}
            while line := await reader.readline():
                text = line.decode().rstrip("\r\n")
                if not text:
                    if block:
                        self.blocks.append(block)
                        if "id" in block and block.get("event") is None:
                            self.last_id = block["id"]
                    block = {}
                    continue
                name, _, value = text.partition(": ")
                block[name] = value
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("redis", ["shared", "embedded"])
async def test_sigterm_closes_1000_streams_with_their_resume_point_within_2s(
    redis_url: str, tmp_path: Path, redis: str
) -> None:
    env = {"RSHUB_CHANGELIST_SCAN_SECONDS": "0"}
    args = ("--redis-url", redis_url) if redis == "shared" else ()
    hub = HubProcess(str(tmp_path), None, *args, env=env).start()
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await publish(session, hub, 1, 0)  # the topic exists
            ws_clients = [WsClient() for _ in range(WS_CLIENTS)]
            sse_clients = [SseClient() for _ in range(SSE_CLIENTS)]
            ws_ready = [asyncio.Event() for _ in ws_clients]
            url = f"{hub.url}/topics/{TOPIC}/ws"
            tasks = [
                asyncio.create_task(c.run(session, url, r))
                for c, r in zip(ws_clients, ws_ready, strict=True)
            ]
            tasks += [asyncio.create_task(c.run(hub.port)) for c in sse_clients]
            await wait_for(
                lambda: (
                    all(r.is_set() for r in ws_ready) and all(c.ready.is_set() for c in sse_clients)
                ),
                timeout=60,
            )
            ids = await publish(session, hub, 3, 1)
            await wait_for(
                lambda: all(c.last_id == ids[-1] for c in [*ws_clients, *sse_clients]),
                timeout=30,
            )
            assert hub.proc is not None
            started = time.monotonic()
            hub.proc.send_signal(signal.SIGTERM)
            await wait_for(lambda: hub.proc is not None and hub.proc.poll() is not None, 10)
            took = time.monotonic() - started
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        codes = {c.close_code for c in ws_clients}
        assert codes == {1001}, codes
        reasons = {c.close_reason for c in ws_clients}
        assert reasons == {f"shutdown; resume with since={ids[-1]}"}, reasons
        finals = [c.blocks[-1] if c.blocks else {} for c in sse_clients]
        assert all(b.get("event") == "shutdown" for b in finals), finals[:3]
        assert all(b.get("id") == ids[-1] for b in finals), finals[:3]
        assert all(b.get("retry", "").isdigit() for b in finals), finals[:3]
        assert hub.proc.returncode == 0, hub.log()
        clients = WS_CLIENTS + SSE_CLIENTS
        print(f"SIGTERM with {clients} stream clients ({redis} Redis): exited in {took:.2f}s")
        assert took < BOUND * TIME_SCALE, f"shutdown took {took:.2f}s"
    finally:
        hub.stop()


@pytest.mark.parametrize("transport", ["ws", "sse"])
async def test_a_subscriber_moves_to_another_process_at_shutdown_without_gap_or_duplicate(
    redis_url: str, tmp_path: Path, transport: str
) -> None:
    env = {"RSHUB_CHANGELIST_SCAN_SECONDS": "0"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = HubProcess(str(tmp_path / "a"), None, "--redis-url", redis_url, env=env).start()
    b = HubProcess(str(tmp_path / "b"), None, "--redis-url", redis_url, env=env).start()
    try:
        async with aiohttp.ClientSession() as session:
            first = await publish(session, a, 1, 0)
            stream = HubStream(
                session,
                a.url,
                TOPIC,
                transport=transport,  # type: ignore[arg-type]
                since=first[0],
                other_hubs=(b.url,),
            )
            got: list[str] = []
            hubs_seen: list[str] = []

            async def follow() -> None:
                async for batch in stream.batches():
                    hubs_seen.append(stream.hub)
                    got.extend(str(e.id) for e in batch)

            follower = asyncio.create_task(follow())
            await asyncio.wait_for(stream.connected.wait(), 10 * TIME_SCALE)
            published = await publish(session, a, 5, 1)
            await wait_for(lambda: got[-1:] == published[-1:], timeout=10)
            assert a.proc is not None
            a.proc.send_signal(signal.SIGTERM)
            # Published while a shuts down and after: all must come, once, through b.
            for n in range(5):
                published += await publish(session, b, 2, 10 + 2 * n)
            await wait_for(lambda: got[-1:] == published[-1:], timeout=10)
            assert stream.hub == b.url
            assert got == published, "nothing missed, nothing twice, in order"
            follower.cancel()
    finally:
        a.stop()
        b.stop()
