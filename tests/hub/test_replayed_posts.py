"""A dead-letter replay sends the very request its delivery sent, with one header more.

For the same event, on a real hub, Redis and callback server: every delivery attempt (the
first written by the feed's fan-out from shared bytes on a ResourceSync topic, the retries
by the worker's task) and the replay that later delivers it are compared as the callback
received them: request line, header lines in order, body. ResourceSync topic and plain
WebSub topic; without a secret, with a WebSub ``X-Hub-Signature`` secret and with a
Standard Webhooks one.

What may differ, and why (nothing else):

- ``X-RSHub-Replay: dead-letter``: on the replay only. Its events come after events with
  later ids, and a subscriber must know to apply them by their own times.
- ``webhook-timestamp`` and ``webhook-signature`` (Standard Webhooks): the time of sending,
  and the signature over it, so that a receiver can refuse an old request replayed by
  someone else; each is checked here against the secret instead. ``X-Hub-Signature`` signs
  the body alone and must be the same.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from hub.core.placement import subscription_id
from hub.store import keys
from resourcesync import parse
from subscriber.signatures import verify
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import hub_workers, subscribe
from tests.support import changes, notification, wait_for

REPLAY = "X-RSHub-Replay"
#: Standard Webhooks signs the time of sending: different on every attempt (see above).
TIMED = frozenset({"webhook-timestamp", "webhook-signature"})
WHSEC = "whsec_" + base64.b64encode(b"k" * 32).decode()
#: A secret that signs nothing here.
OTHER = "whsec_" + base64.b64encode(b"x" * 32).decode()
TEXT = "text/plain; charset=ISO-8859-1"
#: Subscription form fields of each signing case, and the scheme and secret to verify by.
SIGNING: dict[str, tuple[dict[str, str], tuple[str, str] | None]] = {
    "unsigned": ({}, None),
    "websub": ({"hub.secret": "s3cret"}, ("websub", "s3cret")),
    "standard-webhooks": (
        {"hub.secret": WHSEC, "hub.signature": "standard-webhooks"},
        ("standard-webhooks", WHSEC),
    ),
}


@dataclass(frozen=True)
class Received:
    """One POST as the callback got it: the request line, the header lines in their order
    and spelling, the body."""

    line: tuple[str, str, str]
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def without(self, names: frozenset[str]) -> tuple[tuple[str, str], ...]:
        lowered = {n.lower() for n in names}
        return tuple((n, v) for n, v in self.headers if n.lower() not in lowered)

    def get(self, name: str) -> str | None:
        found = [v for n, v in self.headers if n.lower() == name.lower()]
        assert len(found) <= 1, (name, found)
        return found[0] if found else None


@dataclass
class Recorder(CallbackServer):
    """Records every POST, refused ones too; refuses (500) while ``down``."""

    down: bool = True
    received: list[Received] = field(default_factory=list)

    async def _deliver(self, request: web.Request) -> web.Response:
        body = await request.read()
        version = f"HTTP/{request.version.major}.{request.version.minor}"
        self.received.append(
            Received(
                (request.method, request.raw_path, version),
                tuple(
                    (n.decode("latin-1"), v.decode("utf-8", "backslashreplace"))
                    for n, v in request.raw_headers
                ),
                body,
            )
        )
        return web.Response(status=500 if self.down else 204)


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        # "torn": a plain topic of its own for the damaged content's test, whose warning
        # is said once per process.
        "websub_topics": ["notes", "torn"],
        "retry_base_seconds": 0.02,
        "retry_max_seconds": 0.1,
        "retry_window_seconds": 0.4,
        "delivery_batch_max_changes": 1,
    }


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    server = await Recorder().start()
    yield server
    await server.stop()


async def _dead_letters(hub: Hub, sub_id: str) -> int:
    async with hub.session.get(f"{hub.url}/admin/subscriptions/{sub_id}/dead-letters") as resp:
        assert resp.status == 200, await resp.text()
        return int((await resp.json())["total"])


async def _publish(hub: Hub, topic: str) -> None:
    if topic in ("notes", "torn"):
        async with hub.session.post(
            f"{hub.url}/topics/{topic}",
            data=b"caf\xe9 content\n",
            headers={"Content-Type": TEXT},
        ) as resp:
            assert resp.status == 202, await resp.text()
    else:
        resp = await hub.publish(topic, notification(changes(1)))
        assert resp.status == 202, await resp.text()


@pytest.mark.parametrize("signing", list(SIGNING))
@pytest.mark.parametrize("topic", ["t", "notes"])
async def test_a_replay_sends_what_its_delivery_sent(
    hub: Hub, recorder: Recorder, topic: str, signing: str
) -> None:
    form, check = SIGNING[signing]
    await subscribe(hub, recorder, topic, **form)
    worker = hub_workers(hub)[(topic, recorder.url)]
    if topic == "t":  # caught up: the fan-out writes the first attempt (shared bytes)
        await wait_for(lambda: worker._offered is not None)
    await _publish(hub, topic)
    sub_id = subscription_id(topic, recorder.url)

    async def dead_lettered() -> bool:
        return await _dead_letters(hub, sub_id) == 1

    await wait_for(dead_lettered, timeout=20)
    attempts = list(recorder.received)
    assert len(attempts) >= 2  # the first attempt and at least one retry
    if topic == "t":
        assert worker.offers_sent == 1  # so the shared-bytes path is among them

    recorder.down = False
    async with hub.session.post(
        f"{hub.url}/admin/subscriptions/{sub_id}/dead-letters/replay"
    ) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["replayed"] == 1
    replays = recorder.received[len(attempts) :]
    # Deliveries may go on meanwhile (the worker probes), but only the replay is marked.
    [replay] = [r for r in replays if r.get(REPLAY) is not None]
    assert replay.get(REPLAY) == "dead-letter"

    content_type = TEXT if topic == "notes" else "application/xml; charset=utf-8"
    for attempt in [*attempts, replay]:
        assert attempt.get("Content-Type") == content_type
        assert attempt.get("Link") == (
            f'<{hub.url}/>; rel="hub", <{hub.url}/topics/{topic}>; rel="self"'
        )
        headers = CIMultiDict(attempt.headers)
        if check is None:
            assert not {"X-Hub-Signature", *TIMED} & set(headers)
        else:
            scheme, secret = check
            assert verify(scheme, [secret], headers, attempt.body)  # type: ignore[arg-type]
            assert not verify(scheme, [OTHER], headers, attempt.body)  # type: ignore[arg-type]

    for attempt in attempts:
        assert attempt.get(REPLAY) is None
        assert attempt.line == replay.line
        assert attempt.body == replay.body
        assert attempt.without(TIMED) == replay.without(TIMED | {REPLAY}), (
            attempt.headers,
            replay.headers,
        )
    assert await _dead_letters(hub, sub_id) == 0


async def test_a_replay_of_a_plain_topic_whose_content_is_damaged_goes_as_its_deliveries_do(
    hub: Hub, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """A delivery sends the change notification when the content stored in Redis is not
    what the hub wrote (said once in the log); a replay, made by the same builder, does the
    same: it failed (500) before, while its deliveries went on."""
    await subscribe(hub, recorder, "torn", **{"hub.secret": "s3cret"})
    await _publish(hub, "torn")
    sub_id = subscription_id("torn", recorder.url)

    async def dead_lettered() -> bool:
        return await _dead_letters(hub, sub_id) == 1

    await wait_for(dead_lettered, timeout=20)
    await hub.redis.hdel(keys.content("torn"), keys.CONTENT_TYPE)
    recorder.down = False
    async with hub.session.post(
        f"{hub.url}/admin/subscriptions/{sub_id}/dead-letters/replay"
    ) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["replayed"] == 1
    [replay] = [r for r in recorder.received if r.get(REPLAY) is not None]
    assert replay.get("Content-Type") == "application/xml; charset=utf-8"
    [entry] = parse(replay.body).entries
    assert entry.loc == f"{hub.url}/topics/torn"
    assert verify("websub", ["s3cret"], CIMultiDict(replay.headers), replay.body)
    said = [r for r in caplog.records if "content of topic 'torn' is damaged" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"
