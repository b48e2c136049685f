"""Standard Webhooks signatures and secret rotation, on a real hub, a real Redis and real
callback sockets; the subscriber library verifies what the hub signs."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from subscriber import CallbackReceiver
from subscriber.signatures import sign_standard, verify
from subscriber.websub import verify_signature
from tests.conftest import Hub
from tests.hub.test_websub import hub_workers
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for

A = "whsec_" + base64.b64encode(b"a" * 32).decode()
B = "whsec_" + base64.b64encode(b"b" * 32).decode()
STANDARD = {"hub.signature": "standard-webhooks"}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # The overlap outlasts a busy machine's delay between a re-subscription and the next
    # delivery; the tests wait for its end.
    overlap = max(3, round(3 * TIME_SCALE))
    return {"retry_base_seconds": 0.05, "retry_max_seconds": 0.2, "secret_overlap_seconds": overlap}


@dataclass
class Attempt:
    headers: Any  # aiohttp's CIMultiDictProxy: case-insensitive, as a receiver sees them
    body: bytes
    status: int


@dataclass
class Recorder:
    """A callback that records every delivery attempt, refused ones too."""

    statuses: list[int] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    url: str = ""
    runner: web.AppRunner | None = None

    async def _get(self, request: web.Request) -> web.Response:
        return web.Response(text=request.query.get("hub.challenge", ""))

    async def _post(self, request: web.Request) -> web.Response:
        status = self.statuses.pop(0) if self.statuses else 204
        self.attempts.append(Attempt(request.headers.copy(), await request.read(), status))
        return web.Response(status=status)

    @property
    def delivered(self) -> list[Attempt]:
        return [a for a in self.attempts if a.status < 300]

    async def start(self) -> Recorder:
        app = web.Application()
        app.router.add_get("/cb", self._get)
        app.router.add_post("/cb", self._post)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/cb"
        return self


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    rec = await Recorder().start()
    yield rec
    assert rec.runner is not None
    await rec.runner.cleanup()


async def subscribe(hub: Hub, rec: Recorder, secret: str, **extra: str) -> None:
    """(Re-)subscribe and wait until the worker runs with ``secret``."""
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/t",
        "hub.callback": rec.url,
        "hub.secret": secret,
        **extra,
    }
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 202, await resp.text()
    await wait_for(
        lambda: any(w.sub.secret == secret for k, w in hub_workers(hub).items() if k[1] == rec.url)
    )


def standard_ok(attempt: Attempt, *secrets: str) -> bool:
    return verify("standard-webhooks", secrets, attempt.headers, attempt.body)


async def test_standard_webhooks_signs_id_timestamp_and_body_and_a_retry_keeps_its_id(
    hub: Hub, recorder: Recorder
) -> None:
    recorder.statuses = [503, 503]
    await subscribe(hub, recorder, A, **STANDARD)
    ids = (await (await hub.publish("t", notification(changes(3)))).json())["ids"]
    await wait_for(lambda: len(recorder.delivered) == 1)
    assert [a.status for a in recorder.attempts] == [503, 503, 204]
    for attempt in recorder.attempts:
        assert standard_ok(attempt, A) and not standard_ok(attempt, B)
        assert "X-Hub-Signature" not in attempt.headers
        stamp = int(attempt.headers["webhook-timestamp"])
        assert abs(stamp - time.time()) < 60
        [signature] = attempt.headers["webhook-signature"].split(" ")
        assert signature == sign_standard(A, attempt.headers["webhook-id"], stamp, attempt.body)
    # One id for the batch, whichever attempt: a receiver de-duplicates retries by it.
    assert len({a.headers["webhook-id"] for a in recorder.attempts}) == 1
    assert recorder.attempts[0].headers["webhook-id"].endswith(f"_{ids[0]}_{ids[-1]}")
    # Tampering with the body, the id or the timestamp breaks the signature.
    good = recorder.attempts[-1]
    assert not verify("standard-webhooks", [A], good.headers, good.body + b" ")
    moved = {**good.headers, "webhook-timestamp": str(int(good.headers["webhook-timestamp"]) + 1)}
    assert not verify("standard-webhooks", [A], moved, good.body)
    # The next batch has another id.
    await hub.publish("t", notification(changes(1, start=3)))
    await wait_for(lambda: len(recorder.delivered) == 2)
    assert recorder.delivered[1].headers["webhook-id"] != good.headers["webhook-id"]


async def test_a_new_secret_signs_beside_the_old_one_for_the_overlap(
    hub: Hub, recorder: Recorder
) -> None:
    await subscribe(hub, recorder, A, **STANDARD)
    await hub.publish("t", notification(changes(1)))
    await wait_for(lambda: len(recorder.delivered) == 1)
    assert len(recorder.delivered[0].headers["webhook-signature"].split(" ")) == 1
    await subscribe(hub, recorder, B, **STANDARD)
    [worker] = [w for k, w in hub_workers(hub).items() if k[1] == recorder.url]
    assert worker.sub.previous_secret == A
    # Introspection says a previous secret is in force, never what it is.
    async with hub.session.get(f"{hub.url}/topics/t/subscriptions") as resp:
        text = await resp.text()
        assert resp.status == 200 and A not in text and B not in text
        [row] = (await resp.json())["subscriptions"]
        assert row["previous_secret"] is True and row["secret"] is True
    # A renewal with the same new secret keeps the overlap running, not restarted or ended.
    until = worker.sub.previous_until
    await subscribe(hub, recorder, B, **STANDARD)
    [worker] = [w for k, w in hub_workers(hub).items() if k[1] == recorder.url]
    assert (worker.sub.previous_secret, worker.sub.previous_until) == (A, until)
    await hub.publish("t", notification(changes(1, start=1)))
    await wait_for(lambda: len(recorder.delivered) == 2)
    during = recorder.delivered[1]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    assert standard_ok(during, A) and standard_ok(during, B)  # either secret verifies
    await wait_for(lambda: time.time() > until, 10)  # the overlap ends
    await hub.publish("t", notification(changes(1, start=2)))
    await wait_for(lambda: len(recorder.delivered) == 3)
    after = recorder.delivered[2]
    assert standard_ok(after, B) and not standard_ok(after, A)


async def test_x_hub_signature_keeps_the_old_secret_until_the_overlap_ends(
    hub: Hub, recorder: Recorder
) -> None:
    await subscribe(hub, recorder, "old")
    await subscribe(hub, recorder, "new")
    [worker] = [w for k, w in hub_workers(hub).items() if k[1] == recorder.url]
    until = worker.sub.previous_until
    await hub.publish("t", notification(changes(1)))
    await wait_for(lambda: len(recorder.delivered) == 1)
    during = recorder.delivered[0]
    assert "webhook-signature" not in during.headers
    assert verify_signature("old", during.headers["X-Hub-Signature"], during.body)
    assert not verify_signature("new", during.headers["X-Hub-Signature"], during.body)
    await wait_for(lambda: time.time() > until, 10)
    await hub.publish("t", notification(changes(1, start=1)))
    await wait_for(lambda: len(recorder.delivered) == 2)
    after = recorder.delivered[1]
    assert verify_signature("new", after.headers["X-Hub-Signature"], after.body)
    assert not verify_signature("old", after.headers["X-Hub-Signature"], after.body)


async def test_the_callback_receiver_takes_standard_webhooks_and_refuses_a_replay(
    hub: Hub,
) -> None:
    async with aiohttp.ClientSession() as session:
        receiver = CallbackReceiver(session, hub.url, "t", signature="standard-webhooks")
        await receiver.start()
        try:
            assert receiver.secret.startswith("whsec_")
            await receiver.subscribe()
            ids = (await (await hub.publish("t", notification(changes(2)))).json())["ids"]
            batches = receiver.deliveries().__aiter__()
            got = await asyncio.wait_for(batches.__anext__(), 10)
            assert isinstance(got, list) and [e.id for e in got] == ids
            assert receiver.rejected == 0
            # A recorded delivery sent again ten minutes later: refused by its timestamp.
            body = notification(changes(1, start=9))
            stale = int(time.time()) - 600
            for stamp, secret in ((stale, receiver.secret), (int(time.time()), A)):
                headers = {
                    "webhook-id": "msg_replay",
                    "webhook-timestamp": str(stamp),
                    "webhook-signature": sign_standard(secret, "msg_replay", stamp, body),
                }
                async with session.post(receiver.callback_url, data=body, headers=headers) as r:
                    assert r.status == 202  # acknowledged (WebSub §8), dropped
            assert receiver.rejected == 2
            # Nothing was queued from them: the next batch is the hub's next delivery.
            [next_id] = (await (await hub.publish("t", notification(changes(1, start=2)))).json())[
                "ids"
            ]
            got = await asyncio.wait_for(batches.__anext__(), 10)
            assert isinstance(got, list) and [e.id for e in got] == [next_id]
        finally:
            await receiver.close()
