"""hub.store.leases and the fenced writes of hub.store.subscriptions, against a real Redis."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio

from hub.store import keys
from hub.store.leases import GONE, HELD_ELSEWHERE, Leases
from hub.store.script_pipe import ScriptPipe
from hub.store.subscriptions import Subscription, SubscriptionStore
from tests.support import wait_for

TOPIC = "leases"
CB = "http://cb.example/1"


def subscription() -> Subscription:
    return Subscription(TOPIC, "http://hub/topics/leases", CB, 3600, time.time() + 3600)


async def claim_once_expired(leases: Leases) -> int:
    """The token ``leases`` gets once the current holder's heartbeat has expired."""
    taken: list[int] = []

    async def took_over() -> bool:
        taken.append((await leases.claim(TOPIC, [CB]))[CB])
        return taken[-1] != HELD_ELSEWHERE

    await wait_for(took_over, timeout=5)
    return taken[-1]


async def test_claims_are_exclusive_while_the_holder_is_live(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    pipe = ScriptPipe(client)
    subs = SubscriptionStore(client, scripts=pipe)
    a, b = Leases(pipe, "node-a", 300), Leases(pipe, "node-b", 300)
    try:
        assert await a.claim(TOPIC, [CB]) == {CB: GONE}  # no such subscription yet
        await subs.activate(subscription(), "0-0")
        token = (await a.claim(TOPIC, [CB]))[CB]
        assert token > 0
        assert await b.claim(TOPIC, [CB]) == {CB: HELD_ELSEWHERE}
        assert await a.claim(TOPIC, [CB]) == {CB: token}  # ours: same token
        assert await a.check(TOPIC, {CB: token}) == set()
        # While node-a renews its heartbeat in the topic, b cannot take the lease, though b
        # never heartbeated (its own view of the live nodes plays no part).
        await a.heartbeat([TOPIC])
        assert await b.claim(TOPIC, [CB]) == {CB: HELD_ELSEWHERE}
        # node-a stops renewing: once its heartbeat expired on the Redis clock, b takes over,
        # with a new token.
        newer = await claim_once_expired(b)
        assert newer > token
        assert await a.check(TOPIC, {CB: token}) == {CB}  # a learns it lost it
        await a.release(TOPIC, {CB: token})  # releasing what is not ours changes nothing
        assert await b.check(TOPIC, {CB: newer}) == set()
        await b.release(TOPIC, {CB: newer})
        assert (await a.claim(TOPIC, [CB]))[CB] > newer  # released: free at once
    finally:
        await pipe.close()
        await client.aclose()


async def test_cursor_and_record_writes_are_fenced_and_never_go_back(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    pipe = ScriptPipe(client)
    subs = SubscriptionStore(client, scripts=pipe)
    a, b = Leases(pipe, "node-a", 200), Leases(pipe, "node-b", 60_000)
    try:
        sub = subscription()
        await subs.activate(sub, "5-0")
        old = (await a.claim(TOPIC, [CB]))[CB]
        assert await subs.write_cursors(TOPIC, "node-a", {CB: (old, "7-0")}) == set()
        assert await subs.cursor(TOPIC, CB) == "7-0"
        await subs.write_cursors(TOPIC, "node-a", {CB: (old, "6-3")})  # backwards: ignored
        assert await subs.cursor(TOPIC, CB) == "7-0"
        sub.failures = 3
        assert await subs.save_fenced(sub, "node-a", old)

        new = await claim_once_expired(b)  # node-a's heartbeat expired: presumed dead
        # The former owner wakes up: its writes are refused, nothing moves.
        assert await subs.write_cursors(TOPIC, "node-a", {CB: (old, "9-0")}) == {CB}
        sub.failures = 0
        assert not await subs.save_fenced(sub, "node-a", old)
        stored = await subs.get(TOPIC, CB)
        assert stored is not None and stored.failures == 3
        assert await subs.cursor(TOPIC, CB) == "7-0"
        # The new owner continues from there.
        assert await subs.write_cursors(TOPIC, "node-b", {CB: (new, "9-0")}) == set()
        assert await subs.cursor(TOPIC, CB) == "9-0"
        await subs.delete(TOPIC, CB)
        assert await client.hget(keys.owners(TOPIC), CB) is None  # the lease goes too
    finally:
        await pipe.close()
        await client.aclose()


async def test_heartbeats_list_the_live_nodes_and_one_leader(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    pipe = ScriptPipe(client)
    a, b = Leases(pipe, "node-a", 300), Leases(pipe, "node-b", 300)
    try:
        first = await a.heartbeat()
        second = await b.heartbeat()
        assert first.leader and not second.leader
        assert second.nodes == ("node-a", "node-b")
        await a.heartbeat(leaving=True)
        taken = await b.heartbeat()
        assert taken.leader and taken.nodes == ("node-b",)
        await asyncio.sleep(0.4)
        assert (await a.heartbeat()).nodes == ("node-a",)  # b stopped: it expired
    finally:
        await pipe.close()
        await client.aclose()
