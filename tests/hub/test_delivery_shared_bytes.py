"""A publish's fan-out writes each POST from bytes shared by every callback.

Each worker encodes the start of its POSTs once (:meth:`CallbackConnections.prefix`: request
line, ``Host``, its fixed headers); each batch encodes its body and the header lines naming
its events once (:class:`hub.live.delivery.Rendered`); only a signature is computed per
callback. The request must be byte for byte what :meth:`CallbackConnections.post` writes,
and each callback must still get its own filter's batch signed with its own secret.
"""

from __future__ import annotations

import base64
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from hub.core.events import Event, EventFilter
from hub.core.exceptions import CallbackFailed
from hub.core.settings import Settings
from hub.core.topics import HubUrls
from hub.live import callback_connections as cc
from hub.live.callback_connections import (
    CallbackConnections,
    Prefix,
    header_block,
    length_line,
)
from hub.live.delivery import Bodies
from hub.live.http_client import HttpClient
from subscriber.signatures import verify
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_callback_connections import NO_CONTENT, ScriptedServer, on_both_loops
from tests.hub.test_websub import hub_workers, subscribe
from tests.support import changes, notification, wait_for

FIXED = {
    "Content-Type": "application/xml",
    "Link": '<http://hub.example/>; rel="hub", <http://hub.example/topics/ü>; rel="self"',
    "X-RSHub-Node": "n1",
}
PER_BATCH = {"X-RSHub-First-Event-Id": "1-0", "X-RSHub-Last-Event-Id": "1-2"}
SIGNED = {"X-Hub-Signature": "sha256=" + "ab" * 32}
LASTMOD = "2024-01-01T00:00:00Z"


@on_both_loops
async def test_a_request_built_on_a_prefix_is_byte_for_byte_the_one_post_writes() -> None:
    srv = ScriptedServer([NO_CONTENT] * 3)
    url = await srv.start()
    pool = CallbackConnections(allow_private=True)
    body = b"<urlset>caf\xc3\xa9</urlset>"
    try:
        assert await pool.post(url, body, {**FIXED, **PER_BATCH, **SIGNED}, 5.0)
        prefix = pool.prefix(url, FIXED)
        rest = header_block(PER_BATCH) + header_block(SIGNED) + length_line(body)
        started = pool.begin_built(prefix, prefix.head + rest + body, 5.0)
        assert started is not None and started.connection in pool._busy
        assert (await pool.finish(started))[0] == 204
        assert not pool._busy
        # With no idle connection left (one is in flight) nothing is written.
        again = pool.begin_built(prefix, prefix.head + rest + body, 5.0)
        assert again is not None
        assert pool.begin_built(prefix, prefix.head + rest + body, 5.0) is None
        pool.abandon(again)
    finally:
        await pool.close()
        srv.server.close()
    assert len(srv.requests) >= 2
    assert srv.requests[0] == srv.requests[1]  # head and body, byte for byte
    assert srv.requests[0][0].startswith("POST /cb/1?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")


@on_both_loops
async def test_a_prefix_refuses_what_post_refuses_and_a_built_post_takes_a_slot() -> None:
    srv = ScriptedServer([NO_CONTENT] * 2)
    url = await srv.start()
    client = HttpClient(Settings(delivery_concurrency=1, allow_private_callbacks=True))
    pool = client.connections
    try:
        with pytest.raises(CallbackFailed, match="not an http"):
            pool.prefix("ftp://example.org/cb", FIXED)
        with pytest.raises(CallbackFailed, match="line break"):
            pool.prefix(url, {**FIXED, "X-Odd": "a\r\nInjected: 1"})
        with pytest.raises(CallbackFailed, match="line break"):
            header_block({"X-Hub-Signature": "x\nInjected: 1"})
        prefix = pool.prefix(url, FIXED)
        assert isinstance(prefix, Prefix)
        request = prefix.head + length_line(b"<a/>") + b"<a/>"
        assert client.begin_built(prefix, request) is None  # no idle connection: nothing sent
        assert client._delivery_slots.free == 1
        await client.post(url, b"<w/>", {})
        started = client.begin_built(prefix, request)
        assert started is not None and client._delivery_slots.free == 0
        assert client.begin_built(prefix, request) is None  # the one slot is taken
        assert (await client.finish_post(started)).status == 204
        assert client._delivery_slots.free == 1
    finally:
        await client.close()
        srv.server.close()
    assert [body for _, body in srv.requests] == [b"<w/>", b"<a/>"]


# -- on a real hub --------------------------------------------------------------------------

STANDARD_SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
#: (subscription extras, scheme and secret its deliveries must verify with, filtered?)
CALLBACKS: list[tuple[dict[str, str], tuple[str, str] | None, bool]] = [
    ({}, None, False),
    ({"hub.secret": "secret-one"}, ("websub", "secret-one"), False),
    ({"hub.secret": "secret-two"}, ("websub", "secret-two"), False),
    (
        {"hub.secret": STANDARD_SECRET, "hub.signature": "standard-webhooks"},
        ("standard-webhooks", STANDARD_SECRET),
        False,
    ),
    ({"hub.filter.change": "created"}, None, True),
    (
        {"hub.filter.change": "created", "hub.secret": "secret-three"},
        ("websub", "secret-three"),
        True,
    ),
]


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"retry_base_seconds": 0.05, "retry_max_seconds": 0.2}


@pytest.fixture
async def servers() -> AsyncIterator[list[CallbackServer]]:
    started = [await CallbackServer().start() for _ in CALLBACKS]
    yield started
    for server in started:
        await server.stop()


async def test_one_fan_out_from_shared_bytes_gives_each_callback_its_own_batch_and_signature(
    hub: Hub, servers: list[CallbackServer]
) -> None:
    for server, (extra, _, _) in zip(servers, CALLBACKS, strict=True):
        await subscribe(hub, server, **extra)
    warm = [{"loc": "http://example.org/w", "change": "created"}]
    await hub.publish("t", notification(warm))
    await wait_for(lambda: all(len(s.ids) == 1 for s in servers))
    urls = [s.url for s in servers]
    workers = [hub_workers(hub)[("t", url)] for url in urls]
    await wait_for(lambda: all(w._offered is not None and not w.posting for w in workers))
    sent = [w.offers_sent for w in workers]

    rows = changes(4)
    rows[1]["change"] = rows[3]["change"] = "created"
    ids = (await (await hub.publish("t", notification(rows))).json())["ids"]
    await wait_for(lambda: all(len(s.deliveries) == 2 for s in servers))

    # Every POST of this publish went out in the fan-out, from the shared bytes.
    assert [w.offers_sent for w in workers] == [n + 1 for n in sent]
    assert all(isinstance(w._prefix, Prefix) for w in workers)
    bodies = {}
    for server, (_, signing, filtered) in zip(servers, CALLBACKS, strict=True):
        delivery = server.deliveries[-1]
        want = [ids[1], ids[3]] if filtered else ids
        assert delivery.ids == want  # the callback server checks First/Last/Count against them
        headers = delivery.headers
        assert headers["X-RSHub-Subscription"] != "" and headers["Content-Type"] == (
            "application/xml; charset=utf-8"
        )
        if signing is None:
            assert not {"X-Hub-Signature", "webhook-signature"} & set(headers)
        else:
            scheme, secret = signing
            assert verify(scheme, [secret], headers, delivery.body)  # type: ignore[arg-type]
            others = [g[1] for _, g, _ in CALLBACKS if g is not None and g[1] != secret]
            assert not verify(scheme, others, headers, delivery.body)  # type: ignore[arg-type]
        bodies.setdefault(filtered, set()).add(delivery.body)
    # One body per filter, shared by the signed and unsigned subscriptions alike.
    assert len(bodies[False]) == 1 and len(bodies[True]) == 1
    assert bodies[False] != bodies[True]
    for worker in workers:
        await wait_for(lambda w=worker: w.delivered == 1 + (2 if w.terms.filter else 4))


def test_a_batch_found_again_by_its_list_is_never_another_gaps_or_filters() -> None:
    """Bodies finds the batch a fan-out's previous worker asked for by the identity of its
    list; a gap notice or another filter over the same list must still get its own body."""
    stored = orjson.dumps({"loc": "http://example.org/a", "lastmod": LASTMOD, "change": "created"})
    events = [Event("1795341600120-0", stored), Event("1795341600121-0", stored)]
    bodies = Bodies(HubUrls("http://hub.example"), 1 << 20)
    plain = bodies.rendered("t", events)
    assert bodies.rendered("t", events) is plain  # the same list: found again
    gapped = bodies.rendered("t", events, gap="1795341600100-0")
    assert b"trimmed-through" in gapped.body and b"trimmed-through" not in plain.body
    assert bodies.rendered("t", events) is plain
    only = EventFilter(frozenset({"deleted"}), ())
    assert bodies.rendered("t", events, variant=only) is not plain
    assert bodies.rendered("u", events).body != plain.body  # another topic's "up" link
    assert bodies.get("t", list(events)) == (plain.batch, plain.body)  # an equal list too
    assert plain.ids == (
        b"X-RSHub-First-Event-Id: 1795341600120-0\r\n"
        b"X-RSHub-Last-Event-Id: 1795341600121-0\r\nX-RSHub-Event-Count: 2\r\n"
    )
    assert plain.length == b"Content-Length: %d\r\n\r\n" % len(plain.body)


def test_fuzz_a_built_request_equals_posts_or_both_refuse() -> None:
    """Seeded fuzz over callback URLs and header values a subscriber influences (IRIs, IPv6,
    spaces, quotes, escapes, line breaks): the request built on a prefix is byte for byte
    the one :meth:`CallbackConnections.post` would write, or both refuse it."""
    rng = random.Random(2211)
    pieces = [
        "a",
        "Z",
        "~",
        " ",
        "%",
        "%2F",
        '"',
        "<",
        "é",
        "ü",
        "\u2028",
        "/",
        "?",
        "#",
        "\r",
        "\n",
    ]
    hosts = ["127.0.0.1", "[::1]", "hub.invalid", "bücher.invalid", "xn--bcher-kva.invalid", ""]
    schemes = ["http", "https", "HTTP", "ftp"]

    def text(n: int) -> str:
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, n)))

    pool = CallbackConnections(allow_private=True)
    built = refused = 0
    for _ in range(400):
        port = rng.choice(["", ":80", ":443", ":8080", ":99999"])
        url = f"{rng.choice(schemes)}://{rng.choice(hosts)}{port}/{text(8)}"
        if rng.random() < 0.5:
            url += "?" + text(6)
        names = ["Content-Type", "Link", "X-RSHub-Node", "X-RSHub-Subscription", "X-Extra"]
        headers = {name: text(10) for name in names[: rng.randint(0, len(names))]}
        split = rng.randint(0, len(headers))
        fixed = dict(list(headers.items())[:split])
        rest = dict(list(headers.items())[split:])
        body = text(20).encode()
        try:
            expected = cc._post_request(cc._Target(url), body, headers)
        except CallbackFailed:
            expected = None
        try:
            prefix = pool.prefix(url, fixed)
            got = prefix.head + header_block(rest) + length_line(body) + body
        except CallbackFailed:
            got = None
        assert got == expected, (url, headers)
        built += got is not None
        refused += got is None
    assert built > 50 and refused > 50
