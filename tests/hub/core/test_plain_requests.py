"""The lean paths' rule (hub.core.plain_requests): each clause, on heads as llhttp reads them.

Whole answers are compared with aiohttp's in tests/hub/test_lean_differential.py; here each
clause of the rule is shown to decide on its own, at aiohttp's limits and a byte past them.
"""

from __future__ import annotations

import pytest

from hub.core.plain_requests import HEAD_BYTES, PlainRequests

_RULE = PlainRequests(max_line_size=8190, max_field_size=8190, max_headers=128)
_PLAIN = b"GET /topics/t/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n"


def _plain(head: bytes) -> bool:
    """Whether the rule finds ``head`` plain, with the target and headers read from it as
    llhttp would (for the well-formed heads given here)."""
    lines = head.split(b"\r\n")
    target = lines[0].split(b" ")[1] if lines[0].count(b" ") >= 2 else b""
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(b":")
            headers.append((name, value.strip(b" \t")))
    return _RULE.plain(head, target, headers) is not None


def _with(*extra: bytes) -> bytes:
    return _PLAIN[:-2] + b"".join(extra) + b"\r\n"


def test_a_plain_subscribe_and_publish_are_plain() -> None:
    assert _plain(_PLAIN)
    headers = [(b"Host", b"127.0.0.1"), (b"ACCEPT", b"*/*")]
    named = _RULE.plain(_PLAIN.replace(b"Accept", b"ACCEPT"), b"/topics/t/events", headers)
    assert named == {b"host": b"127.0.0.1", b"accept": b"*/*"}  # what the lean routes read
    # What follows the head (a body, the next request) is not the rule's.
    assert _RULE.plain(_PLAIN + b"\x00\xff\n", b"/topics/t/events", headers) is not None
    assert _plain(
        b"POST /topics/t HTTP/1.1\r\nHost: h\r\nContent-Type: application/xml\r\n"
        b"Content-Length: 12\r\nAuthorization: Bearer a b\r\n\r\n"
    )


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(_PLAIN.replace(b"Host: 127.0.0.1\r\n", b""), id="no Host"),
        pytest.param(_PLAIN.replace(b"HTTP/1.1", b"HTTP/1.0"), id="HTTP/1.0"),
        pytest.param(_PLAIN.replace(b"GET", b"PUT"), id="another method"),
        pytest.param(_PLAIN.replace(b"GET /", b"GET http://h/"), id="absolute form"),
        pytest.param(_PLAIN.replace(b"GET ", b"GET  "), id="two spaces"),
        pytest.param(_PLAIN.replace(b"\r\nAccept", b"\nAccept"), id="a bare LF"),
        pytest.param(_PLAIN.replace(b"\r\nAccept", b"\rAccept"), id="a bare CR"),
        pytest.param(_with(b"User-Agent: a\r\n b\r\n"), id="a folded line"),
        pytest.param(_with(b"User-Agent : a\r\n"), id="a space before the colon"),
        pytest.param(_with(b"User-Agent: a \r\n"), id="a trailing space"),
        pytest.param(_with(b"User-Agent: caf\xc3\xa9\r\n"), id="non-ASCII"),
        pytest.param(_with(b"User-Agent: a\x01b\r\n"), id="a control byte"),
        pytest.param(_with(b"Host: 127.0.0.1\r\n"), id="a header twice"),
        pytest.param(_with(b"HOST: other\r\n"), id="a header twice, in another case"),
        pytest.param(_with(b"Transfer-Encoding: chunked\r\n"), id="chunked"),
        pytest.param(_with(b"Content-Encoding: gzip\r\n"), id="a content coding"),
        pytest.param(_with(b"Expect: 100-continue\r\n"), id="Expect"),
        pytest.param(_with(b"Connection: keep-alive\r\n"), id="Connection"),
        pytest.param(_with(b"Upgrade: websocket\r\n"), id="Upgrade"),
        pytest.param(_with(b"Content-Length: +5\r\n"), id="a signed length"),
        pytest.param(_with(b"Content-Length: \r\n"), id="an empty length"),
    ],
)
def test_what_is_not_plain(head: bytes) -> None:
    assert not _plain(head)


def test_aiohttps_limits_and_the_head_bound() -> None:
    # A header at aiohttp's limit (8190) makes a head past the lean paths' bound (8192):
    # the field clause is shown with a smaller limit.
    narrow = PlainRequests(max_line_size=8190, max_field_size=100, max_headers=128)
    for size, plain in ((100, True), (101, False)):
        value = b"u" * (size - len(b"User-Agent"))
        head = _with(b"User-Agent: " + value + b"\r\n")
        headers = [(b"Host", b"127.0.0.1"), (b"Accept", b"*/*"), (b"User-Agent", value)]
        assert (narrow.plain(head, b"/topics/t/events", headers) is not None) is plain
    # 128 headers in all is aiohttp's most; 129 is its 400.
    fill = b"".join(b"X-%d: v\r\n" % i for i in range(126))
    assert _plain(_with(fill))
    assert not _plain(_with(fill, b"X-last: v\r\n"))
    # Headers each within aiohttp's limits, but a head past the lean paths' bound.
    big = _with(b"X-A: " + b"a" * 4000 + b"\r\n", b"X-B: " + b"b" * 4200 + b"\r\n")
    assert len(big) > HEAD_BYTES and not _plain(big)
    narrow = PlainRequests(max_line_size=20, max_field_size=8190, max_headers=128)  # a target
    target = b"/topics/t/events"
    assert narrow.plain(_PLAIN, target, [(b"Host", b"127.0.0.1"), (b"Accept", b"*/*")]) is not None
    long_target = b"/topics/tttttt/events"
    head = _PLAIN.replace(target, long_target)
    assert len(long_target) == 21
    assert narrow.plain(head, long_target, [(b"Host", b"127.0.0.1"), (b"Accept", b"*/*")]) is None
