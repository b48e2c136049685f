"""The delivery failure policy against a real hub, real Redis and real callbacks: a batch
that fails for ``retry_window_seconds`` moves to the subscription's dead letters and the
next goes on in order; sustained failure disables (with a WebSub denial) until resume or
re-subscription; 4xx answers suspend sooner; 429 and 503 never suspend nor disable; the
admin API and ``rshub dead-letters`` list and replay dead letters."""

from __future__ import annotations

import itertools
import random
import re
import string
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

import pytest
from aiohttp import web

from hub.core.events import Event, parse_id
from hub.core.placement import subscription_id
from hub.store import keys
from hub.store.subscriptions import State, Subscription
from hub.web.app import RUNTIME
from resourcesync import parse
from tests.commands import Command
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.hostile_callback import Answer, HostileCallback
from tests.hub.test_hostile_answers import peers
from tests.hub.test_websub import subscribe
from tests.support import changes, notification, wait_for
from tests.watchdog import Watchdog

FAST = {"retry_base_seconds": 0.02, "retry_max_seconds": 0.1}


@dataclass
class Picky(CallbackServer):
    """Answers ``script`` first (status, ``Retry-After``), then refuses (``refuse``) every
    delivery naming a loc in ``poison``; notes each attempt's time and locs."""

    script: list[tuple[int, str | Callable[[], str]]] = field(default_factory=list)
    poison: set[str] = field(default_factory=set)
    refuse: int = 500
    #: Refuse everything with ``refuse``.
    down: bool = False
    attempts: list[tuple[float, list[str]]] = field(default_factory=list)

    async def _deliver(self, request: web.Request) -> web.Response:
        locs = [e.loc for e in parse(await request.read()).entries]
        self.attempts.append((time.monotonic(), locs))
        if self.script:
            status, retry_after = self.script.pop(0)
            self.refused += 1
            value = retry_after if isinstance(retry_after, str) else retry_after()
            return web.Response(status=status, headers={"Retry-After": value})
        if self.down or self.poison & set(locs):
            self.refused += 1
            return web.Response(status=self.refuse)
        return await super()._deliver(request)

    @property
    def denials(self) -> list[dict[str, str]]:
        return [v for v in self.verifications if v.get("hub.mode") == "denied"]


@pytest.fixture
async def picky() -> AsyncIterator[Picky]:
    server = await Picky().start()
    yield server
    await server.stop()


@pytest.fixture
async def other() -> AsyncIterator[Picky]:
    server = await Picky().start(path="/other")
    yield server
    await server.stop()


async def record(hub: Hub, cb: CallbackServer, topic: str = "t") -> Subscription:
    sub = await hub.app[RUNTIME].subscriptions.get(topic, cb.url)
    assert sub is not None
    return sub


async def publish(hub: Hub, n: int, start: int = 0, topic: str = "t") -> list[str]:
    resp = await hub.publish(topic, notification(changes(n, start=start)))
    assert resp.status == 202, await resp.text()
    return list((await resp.json())["ids"])


async def dead_letters(hub: Hub, sub_id: str, query: str = "") -> Any:
    resp = await hub.session.get(f"{hub.url}/admin/subscriptions/{sub_id}/dead-letters{query}")
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def replay(hub: Hub, sub_id: str) -> Any:
    resp = await hub.session.post(f"{hub.url}/admin/subscriptions/{sub_id}/dead-letters/replay")
    assert resp.status == 200, await resp.text()
    return await resp.json()


class TestDeadLetters:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {**FAST, "retry_window_seconds": 0.5, "delivery_batch_max_changes": 1}

    async def test_a_batch_past_its_window_is_dead_lettered_and_the_rest_follow_in_order(
        self, hub: Hub, picky: Picky
    ) -> None:
        picky.poison = {"http://example.org/r1"}
        await subscribe(hub, picky)
        ids = await publish(hub, 4)
        await wait_for(lambda: picky.ids == [ids[0], ids[2], ids[3]], timeout=20)
        tries = [at for at, locs in picky.attempts if locs == ["http://example.org/r1"]]
        assert len(tries) >= 2 and tries[-1] - tries[0] >= 0.5 * 0.9, tries  # the window
        sub_id = subscription_id("t", picky.url)
        listed = await dead_letters(hub, sub_id)
        assert listed["total"] == 1 and listed["state"] == "active"
        (letter,) = listed["dead_letters"]
        assert (letter["id"], letter["loc"], letter["change"]) == (
            ids[1],
            "http://example.org/r1",
            "updated",
        )
        assert letter["error"] == "HTTP 500" and letter["dead_lettered_at"] > 0
        sub = await record(hub, picky)
        assert sub.state is State.ACTIVE and sub.batch_failing_since == 0.0

        async def past_all() -> bool:
            return await hub.app[RUNTIME].subscriptions.cursor("t", picky.url) == ids[3]

        await wait_for(past_all)

        # The CLI lists it, one line; a replay the callback still refuses keeps it.
        listing = await Command("dead-letters", "--hub", hub.url, "--id", sub_id).start()
        assert await listing.wait() == 0, listing.err
        assert listing.lines == [
            f"{ids[1]}\tupdated\thttp://example.org/r1\t"
            + listing.lines[0].split("\t")[3]
            + "\tHTTP 500"
        ]
        failed = await replay(hub, sub_id)
        assert (failed["replayed"], failed["remaining"], failed["error"]) == (0, 1, "HTTP 500")

        picky.poison = set()
        replaying = Command("dead-letters", "--hub", hub.url, "--id", sub_id, "--replay")
        assert await (await replaying.start()).wait() == 0, replaying.err
        assert replaying.lines == ["replayed 1, remaining 0"]
        assert picky.ids == [ids[0], ids[2], ids[3], ids[1]]
        last = picky.deliveries[-1]
        assert last.headers["X-RSHub-Replay"] == "dead-letter"
        assert (await dead_letters(hub, sub_id))["total"] == 0

    async def test_the_dead_letters_are_bounded_and_go_with_their_subscription(
        self, hub: Hub, picky: Picky
    ) -> None:
        hub.app[RUNTIME].delivery.dead_letters.max_events = 2
        picky.down = True
        await subscribe(hub, picky)
        ids = await publish(hub, 3)
        sub_id = subscription_id("t", picky.url)

        async def buried() -> bool:
            cursor = await hub.app[RUNTIME].subscriptions.cursor("t", picky.url)
            return cursor == ids[2]

        await wait_for(buried, timeout=20)
        listed = await dead_letters(hub, sub_id)
        assert listed["total"] == 2 and [d["id"] for d in listed["dead_letters"]] == ids[1:]
        paged = await dead_letters(
            hub, sub_id, f"?limit=1&after={listed['dead_letters'][0]['entry']}"
        )
        assert [d["id"] for d in paged["dead_letters"]] == ids[2:]
        key = hub.app[RUNTIME].delivery.dead_letters.key("t", picky.url)
        assert await hub.redis.exists(key) == 1
        picky.down, picky.script = False, [(410, "")]
        await publish(hub, 1, start=3)
        await wait_for(lambda: ("t", picky.url) not in hub.app[RUNTIME].delivery.workers)
        assert await hub.redis.exists(key) == 0  # 410 ended it, dead letters too


async def test_a_dead_letter_is_fenced_by_the_delivery_lease(hub: Hub, picky: Picky) -> None:
    await subscribe(hub, picky)
    ids = await publish(hub, 1)
    subs = hub.app[RUNTIME].subscriptions

    async def written() -> bool:
        return await subs.cursor("t", picky.url) == ids[0]

    await wait_for(written)
    store = hub.app[RUNTIME].delivery.dead_letters
    later = Event(f"{parse_id(ids[0])[0] + 1000}-0", b'{"loc":"http://example.org/x"}')
    now = time.time()
    assert not await store.bury(
        "t", picky.url, "not-the-owner", 1, [later], since=now, now=now, error="x"
    )
    assert await store.count("t", picky.url) == 0
    assert await subs.cursor("t", picky.url) == ids[0]


class TestDisabled:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {**FAST, "retry_window_seconds": 60.0, "disable_after_seconds": 0.5}

    @pytest.mark.parametrize("back", ["resume", "subscribe"])
    async def test_sustained_failure_disables_denies_and_comes_back(
        self, hub: Hub, picky: Picky, other: Picky, back: str
    ) -> None:
        await subscribe(hub, other)
        await subscribe(hub, picky)
        picky.down = True
        first = await publish(hub, 1)
        await wait_for(lambda: bool(picky.denials), timeout=20)
        (denial,) = picky.denials
        assert denial["hub.topic"] == f"{hub.url}/topics/t"
        assert "subscribe again" in denial["hub.reason"] and "HTTP 500" in denial["hub.reason"]
        assert picky.attempts[-1][0] - picky.attempts[0][0] >= 0.5 * 0.9
        sub = await record(hub, picky)
        assert sub.state is State.DISABLED and sub.disabled_at > 0

        resp = await hub.session.get(f"{hub.url}/admin/subscriptions?state=disabled")
        rows = (await resp.json())["subscriptions"]
        assert [r["callback"] for r in rows] == [picky.url] and rows[0]["state"] == "disabled"
        metrics = await (await hub.session.get(f"{hub.url}/metrics")).text()
        assert 'rshub_subscriptions{state="disabled"} 1.0' in metrics

        # Disabled: a new event reaches the other subscriber, not this one.
        tried = len(picky.attempts)
        second = await publish(hub, 1, start=1)
        await wait_for(lambda: other.ids == first + second)
        assert len(picky.attempts) == tried and (await record(hub, picky)).disabled

        picky.down = False
        if back == "resume":
            form = {"topic": "t", "callback": picky.url}
            resp = await hub.session.post(f"{hub.url}/admin/subscriptions/resume", data=form)
            assert resp.status == 200 and (await resp.json())["state"] == "active"
        else:
            await subscribe(hub, picky)
        await wait_for(lambda: picky.ids == first + second)  # from its cursor, in order
        sub = await record(hub, picky)
        assert sub.state is State.ACTIVE and (sub.strikes, sub.failing_since) == (0, 0.0)
        assert len(picky.denials) == 1

    async def test_a_callback_down_when_disabled_gets_the_denial_once_it_answers(
        self, hub: Hub, picky: Picky
    ) -> None:
        await subscribe(hub, picky)
        port = picky.port
        await picky.stop()  # connections refused from now on
        await publish(hub, 1)

        async def disabled() -> bool:
            return (await record(hub, picky)).disabled

        await wait_for(disabled, timeout=20)
        assert not picky.denials
        await picky.start(port=port)
        await wait_for(lambda: bool(picky.denials))
        assert "subscribe again" in picky.denials[0]["hub.reason"]
        assert not picky.attempts  # nothing delivered while disabled
        verifications = len(picky.verifications)
        await publish(hub, 1, start=1)  # no more denials: it was answered
        await wait_for(lambda: hub.app[RUNTIME].delivery.workers[("t", picky.url)].denied)
        assert len(picky.verifications) == verifications


class TestWaitAnswers:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {
            "retry_base_seconds": 0.02,
            "retry_max_seconds": 2.0,
            "suspend_after_failures": 1,
            "disable_after_seconds": 0.3,
            "retry_window_seconds": 60.0,
        }

    async def test_429_and_503_honour_retry_after_and_never_suspend_nor_disable(
        self, hub: Hub, picky: Picky
    ) -> None:
        picky.script = [(429, "1"), (503, lambda: formatdate(time.time() + 2, usegmt=True))]
        picky.script.append((429, "1"))
        await subscribe(hub, picky)
        ids = await publish(hub, 1)
        await wait_for(lambda: picky.refused == 3, timeout=20)
        sub = await record(hub, picky)
        # One strike would suspend, 0.3 s of failing would disable: 429/503 count for neither.
        assert (sub.state, sub.failures, sub.strikes, sub.failing_since) == (
            State.ACTIVE,
            3,
            0,
            0.0,
        )
        await wait_for(lambda: picky.ids == ids, timeout=20)
        times = [at for at, _ in picky.attempts]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps[0] >= 0.95 and gaps[1] >= 0.9 and gaps[2] >= 0.95, gaps
        assert not picky.denials

        picky.script = [(500, "")]  # with the same settings, one 500 suspends
        await publish(hub, 1, start=1)

        async def suspended() -> bool:
            return (await record(hub, picky)).state is State.SUSPENDED

        await wait_for(suspended)


class TestClientErrors:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"retry_base_seconds": 0.02, "retry_max_seconds": 5.0, "suspend_after_failures": 6}

    async def test_4xx_answers_suspend_sooner_than_5xx(
        self, hub: Hub, picky: Picky, other: Picky
    ) -> None:
        picky.script = [(404, ""), (404, "")]
        other.script = [(500, "")] * 5
        await subscribe(hub, picky, topic="a")
        await subscribe(hub, other, topic="b")
        await publish(hub, 1, topic="a")
        await publish(hub, 1, topic="b")

        async def failed(cb: Picky, topic: str, n: int) -> bool:
            return (await record(hub, cb, topic)).failures == n

        await wait_for(lambda: failed(picky, "a", 2), timeout=20)
        await wait_for(lambda: failed(other, "b", 5), timeout=20)
        assert (await record(hub, picky, "a")).state is State.SUSPENDED  # 2 x 404: 10 strikes
        assert (await record(hub, other, "b")).state is State.ACTIVE  # 5 x 500: 5 strikes


async def test_bad_dead_letter_requests_name_the_problem(hub: Hub, picky: Picky) -> None:
    await subscribe(hub, picky)
    sub_id = subscription_id("t", picky.url)
    cases = {
        "/admin/subscriptions/XYZ/dead-letters": (400, "12 lowercase hex"),
        "/admin/subscriptions/0123456789ab/dead-letters": (404, "no subscription"),
        f"/admin/subscriptions/{sub_id}/dead-letters?limit=0": (400, "limit"),
        f"/admin/subscriptions/{sub_id}/dead-letters?limit=99999999999": (400, "limit"),
        f"/admin/subscriptions/{sub_id}/dead-letters?after=x%00": (400, "event id"),
    }
    for path, (status, words) in cases.items():
        resp = await hub.session.get(hub.url + path)
        assert resp.status == status, (path, await resp.text())
        assert words in (await resp.json())["error"], path
    resp = await hub.session.post(f"{hub.url}/admin/subscriptions/0123456789ab/dead-letters/replay")
    assert resp.status == 404
    missing = await Command("dead-letters", "--hub", hub.url, "--id", "0123456789ab").start()
    assert await missing.wait() == 1 and b"404: no subscription" in missing.err
    assert (await dead_letters(hub, sub_id))["total"] == 0


# -- a hostile callback: a seeded mix of answers ------------------------------------------


def _junk(rng: random.Random) -> bytes:
    return "".join(
        rng.choice(string.printable.strip()) for _ in range(rng.randrange(1, 30))
    ).encode()


def _status(code: int, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\n%sContent-Length: 0\r\n\r\n" % (code, extra)


class TestHostile:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {
            "retry_base_seconds": 0.01,
            "retry_max_seconds": 0.05,
            "retry_window_seconds": 0.15,
            "disable_after_seconds": 300.0,
            "delivery_batch_max_changes": 1,
        }

    async def test_a_seeded_mix_of_answers_keeps_order_and_stalls_nothing(
        self, hub: Hub, redis_url: str
    ) -> None:
        rng = random.Random(21)
        accepted: list[str] = []
        replaying = False

        async def play(answer: Answer) -> None:
            current = hostile.posts[-1]
            if replaying:  # the replay's own connection: closed after each answer
                answer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
                accepted.append(current)
                answer.close()
                return
            kind = rng.choices(range(10), weights=[2, 1, 1, 2, 1, 1, 1, 1, 1, 1])[0]
            if kind == 0:
                answer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            elif kind == 1:
                answer.write(
                    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                )
            elif kind == 2:
                answer.write(_status(500))
            elif kind == 3:
                answer.write(_status(rng.choice([400, 401, 403, 404, 405, 413, 422])))
            elif kind == 4:
                answer.write(_status(429, b"Retry-After: " + _junk(rng) + b"\r\n"))
            elif kind == 5:
                answer.write(_status(503, b"Retry-After: 0\r\n"))
            elif kind == 6:
                answer.write(rng.randbytes(rng.randrange(1, 200)))
                answer.close()
            elif kind == 7:
                answer.close()
            elif kind == 8:
                answer.write(b"HTTP/1.1 20")
                answer.close()
            else:  # a 2xx head counts, whatever the body does next
                answer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nshort")
                answer.close()
            if kind in (0, 1, 9):
                accepted.append(current)

        hostile = await HostileCallback(play).start()
        try:
            resp = await hub.session.post(
                hub.url + "/",
                data={
                    "hub.mode": "subscribe",
                    "hub.topic": f"{hub.url}/topics/t",
                    "hub.callback": hostile.url,
                },
            )
            assert resp.status == 202
            await wait_for(lambda: ("t", hostile.url) in hub.app[RUNTIME].delivery.workers)
            store = hub.app[RUNTIME].delivery.dead_letters
            async with Watchdog() as dog:
                published: list[str] = []
                for start in range(0, 40, 4):
                    published += await publish(hub, 4, start=start)

                async def settled() -> bool:
                    dead = {d.event.id for d in await store.read("t", hostile.url, 100)}
                    return set(accepted) | dead == set(published)

                await wait_for(settled, timeout=40)
                dead = [d.event.id for d in await store.read("t", hostile.url, 100)]
                # Order holds for everything not dead-lettered; nothing is both, or lost.
                keys = [parse_id(i) for i in accepted]
                assert keys == sorted(keys) and len(set(keys)) == len(keys), accepted
                assert not set(accepted) & set(dead) and dead, (accepted, dead)
                assert set(accepted) | set(dead) == set(published)

                replaying = True
                done = await replay(hub, subscription_id("t", hostile.url))
                assert (done["replayed"], done["remaining"], done["error"]) == (len(dead), 0, None)
                assert accepted[-len(dead) :] == dead
                hostile.finish = True  # the next POST ends the subscription (410)
                await publish(hub, 1, start=40)
                await wait_for(lambda: ("t", hostile.url) not in hub.app[RUNTIME].delivery.workers)
            await dog.sockets_back()
            await wait_for(lambda: not peers(hostile.port), 5)  # its last connection closing
        finally:
            await hostile.stop()


async def test_a_gap_notice_whose_batch_is_dead_lettered_comes_with_the_next(
    redis_url: str,
) -> None:
    """Retention trimmed r0-r1 past the hold; r2's batch carries the notice but is refused
    past its window: r3's delivery carries it instead (signed, in the body)."""
    import aiohttp

    from tests.conftest import start_hub
    from tests.hub.test_retention_hold import GAP_ATTRIBUTE, _down_while_published, _settings

    settings = _settings(retention_hold_max_events=1, delivery_batch_max_changes=1)
    cb = await Picky(down=True, refuse=503).start()
    try:
        async with aiohttp.ClientSession() as session:
            ids = await _down_while_published(redis_url, settings, session, cb)
            cb.down, cb.poison, cb.refuse = False, {"http://example.org/r2"}, 500
            # The window (from the batch's first failure, on the first hub) is spent.
            later = settings.model_copy(update={"retry_window_seconds": 0.3})
            runner, app = await start_hub(later, redis_url)
            try:
                await wait_for(lambda: cb.ids[:1] == [ids[3]], timeout=20)
                first = cb.deliveries[0]
                assert first.headers["X-RSHub-Gap"] == f"trimmed-through={ids[1]}"
                assert parse(first.body).md.extra[GAP_ATTRIBUTE] == ids[1]  # type: ignore[union-attr]
                await wait_for(lambda: cb.ids == ids[3:])
                assert all("X-RSHub-Gap" not in d.headers for d in cb.deliveries[1:])
                letters = await app[RUNTIME].delivery.dead_letters.read("short", cb.url, 10)
                assert [d.event.id for d in letters] == [ids[2]]
                sub = await app[RUNTIME].subscriptions.get("short", cb.url)
                assert sub is not None and sub.untold_gap is None and sub.last_gap == ids[1]
            finally:
                await runner.cleanup()
    finally:
        await cb.stop()


class TestReplaySignatures:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {**FAST, "retry_window_seconds": 0.3}

    async def test_a_replay_is_signed_with_the_subscriptions_scheme(
        self, hub: Hub, picky: Picky
    ) -> None:
        """A Standard Webhooks subscriber drops (but acknowledges) a delivery signed
        otherwise: a replay signed with ``X-Hub-Signature`` would be lost for it."""
        import base64

        from subscriber.signatures import verify

        secret = "whsec_" + base64.b64encode(b"r" * 32).decode()
        await subscribe(hub, picky, **{"hub.signature": "standard-webhooks", "hub.secret": secret})
        picky.down = True
        ids = await publish(hub, 2)
        sub_id = subscription_id("t", picky.url)

        async def lettered() -> bool:
            return bool((await dead_letters(hub, sub_id))["total"] == 2)

        await wait_for(lettered, timeout=20)
        picky.down = False
        done = await replay(hub, sub_id)
        assert (done["replayed"], done["remaining"]) == (2, 0), done
        (replayed,) = picky.deliveries
        assert replayed.ids == ids and replayed.headers["X-RSHub-Replay"] == "dead-letter"
        assert "X-Hub-Signature" not in replayed.headers
        assert verify("standard-webhooks", (secret,), replayed.headers, replayed.body)

    async def test_one_replay_at_a_time_over_every_process(self, hub: Hub, picky: Picky) -> None:
        """A replay's POSTs go beside the worker's: a second replay, from any process, would
        send the same dead letters twice. Another process's replay holds a lock in Redis."""
        await subscribe(hub, picky)
        picky.down = True
        await publish(hub, 1)
        sub_id = subscription_id("t", picky.url)

        async def lettered() -> bool:
            return bool((await dead_letters(hub, sub_id))["total"] == 1)

        await wait_for(lettered, timeout=20)
        picky.down = False
        lock = keys.dead_letter_replay("t", sub_id)
        await hub.redis.set(lock, "another-node", ex=60)  # as a replay on another process
        url = f"{hub.url}/admin/subscriptions/{sub_id}/dead-letters/replay"
        async with hub.session.post(url) as resp:
            assert resp.status == 409, await resp.text()
            assert "under way" in (await resp.json())["error"]
        assert picky.deliveries == [] and (await dead_letters(hub, sub_id))["total"] == 1
        await hub.redis.delete(lock)
        done = await replay(hub, sub_id)
        assert (done["replayed"], done["remaining"]) == (1, 0), done
        (replayed,) = picky.deliveries
        assert replayed.headers["X-RSHub-Subscription"] == sub_id
        assert not await hub.redis.exists(lock)  # released once done


@pytest.mark.parametrize(
    "hub_settings", [{**FAST, "retry_window_seconds": 0.3, "delivery_batch_max_changes": 1}]
)
async def test_a_replay_that_succeeded_is_the_records_last_success(hub: Hub, picky: Picky) -> None:
    """``rshub inspect`` said "last success never" after a replay that delivered."""
    picky.down = True
    await subscribe(hub, picky)
    ids = await publish(hub, 2)
    sub_id = subscription_id("t", picky.url)

    async def buried() -> bool:
        return (await dead_letters(hub, sub_id))["total"] == 2

    await wait_for(buried, timeout=20)
    picky.down = False
    done = await replay(hub, sub_id)
    assert (done["replayed"], done["remaining"], done["error"]) == (2, 0, None), done

    async def current() -> bool:
        resp = await hub.session.get(f"{hub.url}/admin/subscriptions/{sub_id}")
        success = (await resp.json())["last_success"]
        return success is not None and success["event_id"] == ids[1]

    await wait_for(current, timeout=10)  # the attempt log is written in the background
    inspect = Command("inspect", "--hub", hub.url, "--id", sub_id)
    assert await (await inspect.start()).wait() == 0, inspect.err
    text = "\n".join(inspect.lines)
    assert "last success  never" not in text and f"through {ids[1]}" in text, text
    newest = text.split("newest first:\n", 1)[1].splitlines()[0]
    assert re.search(r"Z  2\d\d ", newest) and ids[1] in newest, text  # the replay's POST
    error = text.split("last error", 1)[1].splitlines()[0]
    assert error.endswith("failures in a row before the last success)"), text
