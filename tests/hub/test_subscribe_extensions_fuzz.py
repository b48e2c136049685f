"""Hostile: seeded fuzz of ``hub.signature``, ``hub.secret``, ``hub.filter.*``,
``hub.rate_limit`` and the admin rate-limit body, under the watchdog, on a real hub.

Every request is answered 202 or a 4xx naming the faulty parameter; a refused one stores
nothing; an accepted one is verified and stored; the loop never stalls, nothing is logged
at ERROR, no socket leaks.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest

from hub.core.placement import subscription_id
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.support import wait_for
from tests.watchdog import Watchdog

SEED = 2126
CASES = 160
PARAMETERS = (
    "hub.signature",
    "hub.secret",
    "hub.filter.change",
    "hub.filter.prefix",
    "hub.rate_limit",
)

SIGNATURES = [
    "websub",
    "standard-webhooks",
    "Standard-Webhooks",
    "",
    "hmac",
    "\x00",
    "é" * 50,
    "v1",
]
SECRETS = [
    "s",
    "whsec_",
    "whsec_" + base64.b64encode(b"k" * 32).decode(),
    "whsec_not base64",
    "whsec_====",
    "whsec_" + "A" * 190,
    "whsec_\x00",
]
CHANGES = [
    "created",
    "created,updated,deleted",
    "",
    ",",
    "moved",
    "CREATED",
    "created," * 200,
    "é",
    " updated ",
]
RATES = [
    "1",
    "0.5,3",
    "nan",
    "-0",
    "1e309",
    "1_0",
    "٣",
    "1,",
    ",1",
    "0x10",
    " 2 ",
    "2,99999",
    "0",
    "1e-9",
    "3,1.5",
]


def text(rng: random.Random, size: int) -> str:
    alphabet = "abc/:.é\x00\x7f%&=+,; \t\n" + "\u202e\ud7ff"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, size)))


def case(rng: random.Random, hub: Hub, callback: str) -> list[tuple[str, str]]:
    form = [
        ("hub.mode", "subscribe"),
        ("hub.topic", f"{hub.url}/topics/t"),
        ("hub.callback", callback),
    ]
    if rng.random() < 0.5:
        form.append(("hub.signature", rng.choice([*SIGNATURES, text(rng, 20)])))
    if rng.random() < 0.6:
        form.append(("hub.secret", rng.choice(SECRETS)))
    if rng.random() < 0.5:
        form.append(("hub.filter.change", rng.choice([*CHANGES, text(rng, 30)])))
    for _ in range(rng.choice([0, 0, 1, 2, 31, 32, 33, 40])):
        form.append(("hub.filter.prefix", rng.choice(["http://example.org/a/", "", text(rng, 60)])))
    if rng.random() < 0.5:
        form.append(("hub.rate_limit", rng.choice([*RATES, text(rng, 12)])))
    return form


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def test_fuzzed_subscription_extensions_are_202_or_a_400_naming_them(
    hub: Hub, callback: CallbackServer, redis_url: str
) -> None:
    store = hub.app[RUNTIME].subscriptions
    workers = hub.app[RUNTIME].delivery.workers
    # Kept-alive connections (to the hub, to the callback) are open before the watchdog.
    await subscribe(hub, callback)
    rng = random.Random(SEED)
    accepted: set[str] = set()
    refused: set[str] = set()
    async with Watchdog() as dog:
        for i in range(CASES):
            url = f"{callback.url}?case={i}"
            body = urlencode(case(rng, hub, url)).encode()
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            async with hub.session.post(hub.url + "/", data=body, headers=headers) as resp:
                answer = await resp.read()
                assert resp.status in (202, 400), (resp.status, answer[:300])
            if resp.status == 400:
                error = orjson.loads(answer)["error"]
                assert any(p in error for p in PARAMETERS), error
                refused.add(url)
            else:
                accepted.add(url)

        async def stored() -> set[str]:
            return {cb for _t, cb in await store.all_keys()}

        async def all_verified() -> bool:
            return await stored() >= accepted

        await wait_for(all_verified, 20)
        assert not (await stored()) & refused  # a refused request stored nothing
        assert len(accepted) > 20 and len(refused) > 20, (len(accepted), len(refused))
        # The subscriptions' workers end; the hub's Redis pool may have grown under the load.
        for cb in accepted:
            await store.delete("t", cb)
        await wait_for(lambda: set(workers) == {("t", callback.url)}, 10)
        await dog.sockets_back()


def admin_body(rng: random.Random) -> bytes:
    values: list[Any] = [1, 0, -1, 0.5, 1e308, 2**70, True, None, "1", [], {}, 10_000, 10_001]
    choice = rng.random()
    if choice < 0.2:
        return rng.choice(
            [b"", b"{", b"null", b"[]", b"\xff\xfe", b'{"per_second": NaN}', b"1e999"]
        )
    obj: dict[str, Any] = {}
    for key in ("per_second", "burst", rng.choice(["x", "per_second"])):
        if rng.random() < 0.7:
            obj[key] = rng.choice(values)
    return json.dumps(obj).encode() if choice < 0.9 else json.dumps(obj).encode()[:-1]


@pytest.mark.parametrize("hub_settings", [{"admin_token": "adm"}])
async def test_fuzzed_admin_rate_limits_are_200_or_a_4xx(
    hub: Hub, callback: CallbackServer
) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/t",
        "hub.callback": callback.url,
    }
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 202
    store = hub.app[RUNTIME].subscriptions
    await wait_for(lambda: store.get("t", callback.url))
    path = f"{hub.url}/admin/subscriptions/{subscription_id('t', callback.url)}/rate-limit"
    rng = random.Random(SEED)
    headers = {"Authorization": "Bearer adm", "Content-Type": "application/json"}
    seen: set[int] = set()
    last: list[float] | None = None
    async with Watchdog() as dog:
        for _ in range(80):
            body = admin_body(rng)
            async with hub.session.put(path, data=body, headers=headers) as resp:
                answer = await resp.read()
                assert resp.status in (200, 400), (body, resp.status, answer[:300])
                seen.add(resp.status)
            sub = await store.get("t", callback.url)
            assert sub is not None
            if resp.status == 200:
                shown = orjson.loads(answer)
                assert sub.admin_rate_limit == [shown["per_second"], shown["burst"]]
            else:  # a refusal changed nothing
                assert sub.admin_rate_limit == last
            last = sub.admin_rate_limit
        assert seen == {200, 400}
    await dog.sockets_back(slack=2)
