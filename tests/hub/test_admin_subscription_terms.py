"""``GET /admin/subscriptions`` shows each subscription's delivery terms (signature scheme,
a rotated-out secret as a boolean and its end, filter, rate limit in force and its source,
strikes, disabled_at, last success), never a secret, in the shape the OpenAPI document
gives (``AdminSubscriptions``). A real hub, real Redis, real callbacks."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import jsonschema_rs
import pytest

from hub.core import openapi
from hub.core.placement import subscription_id
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.support import changes, notification, wait_for

A = "whsec_" + base64.b64encode(b"a" * 32).decode()
B = "whsec_" + base64.b64encode(b"b" * 32).decode()
PLAIN = "a-plain-secret-of-some-length"


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "secret_overlap_seconds": 600,
        "delivery_rate_per_second": 7.0,
        "delivery_rate_burst": 9,
    }


@pytest.fixture
async def callbacks() -> AsyncIterator[tuple[CallbackServer, CallbackServer]]:
    one, two = await CallbackServer().start(), await CallbackServer().start(path="/two")
    yield one, two
    await one.stop()
    await two.stop()


def _validator() -> Any:
    document = openapi.spec()
    schema = {**document["components"]["schemas"]["AdminSubscriptions"]}
    return jsonschema_rs.Draft202012Validator({**schema, "components": document["components"]})


async def _listed(hub: Hub) -> tuple[str, dict[str, dict[str, Any]]]:
    async with hub.session.get(f"{hub.url}/admin/subscriptions") as resp:
        assert resp.status == 200
        text = await resp.text()
    _validator().validate(json.loads(text))
    rows = (await resp.json())["subscriptions"]
    return text, {row["callback"]: row for row in rows}


async def test_the_admin_list_shows_the_terms_and_never_a_secret(
    hub: Hub, callbacks: tuple[CallbackServer, CallbackServer]
) -> None:
    signed, plain = callbacks
    terms = {
        "hub.signature": "standard-webhooks",
        "hub.filter.change": "created,updated",
        "hub.filter.prefix": "http://example.org/r",
        "hub.rate_limit": "2,5",
    }
    await subscribe(hub, signed, **{"hub.secret": A, **terms})
    await subscribe(hub, signed, **{"hub.secret": B, **terms})  # a rotation: A still signs
    await subscribe(hub, plain, **{"hub.secret": PLAIN})
    before = time.time()
    _, rows = await _listed(hub)
    row = rows[signed.url]
    assert row["id"] == subscription_id("t", signed.url)
    assert row["signature"] == "standard-webhooks" and row["secret"] is True
    assert row["previous_secret"] is True
    assert before + 500 < row["previous_secret_until"] < time.time() + 601
    assert row["filter"] == {
        "changes": ["created", "updated"],
        "prefixes": ["http://example.org/r"],
    }
    assert row["rate_limit"] == {"per_second": 2.0, "burst": 5, "source": "subscriber"}
    assert (row["strikes"], row["disabled_at"], row["last_success"]) == (0, None, None)
    other = rows[plain.url]
    assert (other["signature"], other["previous_secret"], other["filter"]) == (
        "websub",
        False,
        None,
    )
    assert other["previous_secret_until"] is None
    assert other["rate_limit"] == {"per_second": 7.0, "burst": 9, "source": "default"}

    # A delivery: its last success; an operator's rate limit: in force, from "admin".
    resp = await hub.publish("t", notification(changes(1)))
    ids = (await resp.json())["ids"]
    await wait_for(lambda: plain.ids == ids)
    put = f"{hub.url}/admin/subscriptions/{other['id']}/rate-limit"
    async with hub.session.put(put, json={"per_second": 3, "burst": 4}) as answer:
        assert answer.status == 200
        assert await answer.json() == {
            "id": other["id"],
            "topic": "t",
            "callback": plain.url,
            "per_second": 3.0,
            "burst": 4,
            "source": "admin",
        }

    async def succeeded() -> bool:
        return (await _listed(hub))[1][plain.url]["last_success"] is not None

    await wait_for(succeeded)
    text, rows = await _listed(hub)
    success = rows[plain.url]["last_success"]
    assert success["event_id"] == ids[-1] and before <= success["at"] <= time.time()
    assert rows[plain.url]["rate_limit"] == {"per_second": 3.0, "burst": 4, "source": "admin"}
    for secret in (A, B, PLAIN, A[6:], B[6:]):
        assert secret not in text
