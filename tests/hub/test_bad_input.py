"""Every malformed request is a 4xx with a message, and the hub logs no traceback for it."""

from __future__ import annotations

import gzip
import logging
from typing import Any
from urllib.parse import unquote

import pytest
from yarl import URL

from tests.conftest import Hub
from tests.support import changes, notification

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def form(hub: Hub, **fields: str) -> bytes:
    base = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/t",
        "hub.callback": "http://cb.invalid/cb",
    }
    base.update(fields)
    from urllib.parse import urlencode

    return urlencode(base).encode()


def assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


async def post(hub: Hub, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    resp = await hub.session.post(hub.url + path, data=body, headers=headers)
    text = await resp.text(errors="replace")
    return resp.status, text


@pytest.mark.parametrize(
    "name,fields",
    [
        ("superscript lease", {"hub.lease_seconds": "²"}),
        ("bad IPv6 callback", {"hub.callback": "http://[::1/x"}),
        ("bad port callback", {"hub.callback": "http://cb.invalid:99999/x"}),
        ("CRLF in callback", {"hub.callback": "http://cb.invalid/a\r\nX-Injected: 1"}),
        ("tab in callback", {"hub.callback": "http://cb.invalid/a\tb"}),
        ("bad IPv6 ping", {"hub.mode": "publish", "hub.url": "http://[::1/x"}),
        # A host the resolver's IDNA step refuses: its UnicodeError was a 500.
        ("3000-char label ping", {"hub.mode": "publish", "hub.url": "http://" + "a" * 3000}),
        ("long label ping", {"hub.mode": "publish", "hub.url": f"http://{'a' * 64}.invalid/"}),
        ("empty label ping", {"hub.mode": "publish", "hub.url": "http://a..invalid/"}),
        ("long label callback", {"hub.callback": f"http://{'a' * 64}.invalid/cb"}),
    ],
)
async def test_bad_websub_fields_are_400(
    hub: Hub, caplog: pytest.LogCaptureFixture, name: str, fields: dict[str, str]
) -> None:
    caplog.set_level(logging.DEBUG)
    status, text = await post(hub, "/", form(hub, **fields), FORM)
    assert 400 <= status < 500, (name, status, text)
    assert '"error"' in text or "denied" in text
    assert_no_traceback(caplog)


async def test_a_5000_digit_lease_gets_the_longest_lease(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    from hub.core import websub
    from hub.core.topics import HubUrls

    caplog.set_level(logging.DEBUG)
    status, text = await post(hub, "/", form(hub, **{"hub.lease_seconds": "9" * 5000}), FORM)
    assert status == 202, text
    parsed = websub.parse_request(
        {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/t",
            "hub.callback": "http://cb.invalid/cb",
            "hub.lease_seconds": "9" * 5000,
        },
        urls=HubUrls(hub.url),
        lease_default=100,
        lease_min=60,
        lease_max=1000,
    )
    assert isinstance(parsed, websub.SubscriptionRequest) and parsed.lease_seconds == 1000
    assert_no_traceback(caplog)


async def test_a_malformed_topic_url_is_denied(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    """WebSub §5.2: a well-formed request for a topic the hub will not serve is denied."""
    caplog.set_level(logging.DEBUG)
    status, text = await post(hub, "/", form(hub, **{"hub.topic": "http://[::1/x"}), FORM)
    assert status == 202 and text.startswith("denied: topic is not a valid URL"), text
    assert_no_traceback(caplog)


async def test_invalid_utf8_in_a_websub_form_is_400(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    status, text = await post(hub, "/", form(hub) + b"&hub.secret=\xff\xfe", FORM)
    assert status == 400, text
    assert "UTF-8" in text
    assert_no_traceback(caplog)


async def test_a_body_that_claims_gzip_but_is_not_is_400(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    headers = {"Content-Type": "application/xml", "Content-Encoding": "gzip"}
    status, text = await post(hub, "/topics/t", notification(changes(1)), headers)
    assert status == 400, text
    assert "gzip" in text.lower() or "encoding" in text.lower()
    assert_no_traceback(caplog)


async def test_a_real_gzip_body_is_still_accepted(hub: Hub) -> None:
    headers = {"Content-Type": "application/xml", "Content-Encoding": "gzip"}
    status, text = await post(hub, "/topics/t", gzip.compress(notification(changes(2))), headers)
    assert status == 202, text


# -- request headers and resume points ---------------------------------------------------------


@pytest.mark.parametrize(
    "accept,gzipped",
    [
        ("gzip;q=abc", False),  # a malformed weight: the member is ignored
        ("gzip;q=1.5", False),
        ("gzip;q=", False),
        ("gzip;q=NaN", False),
        ("gzip;q=-0", False),
        ("gzip;q=0.0001", False),
        ("gzip;q=abc, *;q=1", True),  # ...and another member may still allow gzip
        ("gzip;q=0.5", True),
        ("GZIP ; Q = 0.5", True),
        ("gzip;q=0", False),
        ("*;q=0, gzip", True),  # gzip by name wins over *
        ("gzip;q=0, *", False),
        ("*", True),
        ("br, identity", False),
    ],
)
async def test_accept_encoding_never_500(
    hub: Hub, caplog: pytest.LogCaptureFixture, accept: str, gzipped: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    assert (await hub.publish("t", notification(changes(3)))).status == 202
    for path in ("/topics/t", "/topics/t/changelist.xml", "/topics/t/resourcelist.xml"):
        async with hub.session.get(
            hub.url + path, headers={"Accept-Encoding": accept}, auto_decompress=False
        ) as resp:
            body = await resp.read()
            assert resp.status == 200, (path, resp.status, body[:200])
            assert (resp.headers.get("Content-Encoding") == "gzip") is gzipped, path
            assert (gzip.decompress(body) if gzipped else body).startswith(b"<?xml")
    assert_no_traceback(caplog)


BAD_SINCES = [
    "+5",  # in a query, "+" is a space: " 5"
    "%205",
    "5%20",
    "1-99999999999999999999",
    "18446744073709551616",
    "1-18446744073709551616",
    "-5",
    "%D9%A3",  # ARABIC-INDIC DIGIT THREE: a digit to \d, not to the grammar
    "1-2-3",
    "0x10",
    "1_000",
    "1-",
    "%EF%BC%91",  # FULLWIDTH DIGIT ONE
]


@pytest.mark.parametrize("since", BAD_SINCES)
async def test_since_must_be_a_stream_id(
    hub: Hub, caplog: pytest.LogCaptureFixture, since: str
) -> None:
    """``<ms>-<seq>`` or ``<ms>``, unsigned 64-bit decimals: anything else is 400 naming
    the rule, on every way a resume point comes in."""
    caplog.set_level(logging.DEBUG)
    assert (await hub.publish("t", notification(changes(1)))).status == 202
    raw = URL(f"{hub.url}/topics/t/events?since={since}", encoded=True)
    header = unquote(since.replace("+", " "))
    requests = [
        hub.session.get(raw),
        hub.session.get(URL(f"{hub.url}/topics/t/ws?since={since}", encoded=True)),
        hub.session.post(hub.url + "/", data=form(hub, **{"hub.since": header}), headers=FORM),
    ]
    rule = "unsigned 64-bit decimal integers"
    expected = [rule] * len(requests)
    if header == header.strip():  # (HTTP itself strips a header value's outer spaces)
        headers = {"Last-Event-ID": header}
        requests.append(hub.session.get(f"{hub.url}/topics/t/events", headers=headers))
        # A header that is not ASCII is refused before it is read as an id.
        expected.append(rule if header.isascii() else "the Last-Event-ID header cannot be read")
    for request, phrase in zip(requests, expected, strict=True):
        async with request as resp:
            assert resp.status == 400, (since, resp.url, resp.status)
            error = (await resp.json())["error"]
            assert phrase in error, error
    assert_no_traceback(caplog)


async def test_the_largest_stream_id_is_well_formed(hub: Hub) -> None:
    """The grammar's edge: 2**64-1 parses (then is refused as beyond the stream)."""
    assert (await hub.publish("t", notification(changes(1)))).status == 202
    top = "18446744073709551615-18446744073709551615"
    async with hub.session.get(f"{hub.url}/topics/t/events?since={top}") as resp:
        assert resp.status == 400
        assert "beyond the last event id" in (await resp.json())["error"]
