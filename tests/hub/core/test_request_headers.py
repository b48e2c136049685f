"""The one rule for request headers: printable ASCII, else 400 naming the header."""

from __future__ import annotations

import pytest

from hub.core.exceptions import BadRequest
from hub.core.request_headers import check, decoded, readable


@pytest.mark.parametrize("value", ["Bearer abc", "", "a\tb", " ~!", "100-continue"])
def test_printable_ascii_and_tabs_are_read(value: str) -> None:
    assert readable(value)
    assert decoded("X", value) == value == decoded("X", value.encode())


@pytest.mark.parametrize(
    "value",
    [
        b"\xfe\xff".decode("utf-8", "surrogateescape"),  # aiohttp's text of undecodable bytes
        "é",
        "a\x00b",
        "a\x7fb",
        "a\nb",
        "\x1b[31m",
    ],
)
def test_anything_else_is_400_naming_the_header_never_quoting_it(value: str) -> None:
    assert not readable(value)
    with pytest.raises(BadRequest) as refused:
        decoded("Authorization", value)
    assert "the Authorization header cannot be read" in refused.value.message
    assert value not in refused.value.message
    raw = value.encode("utf-8", "surrogateescape")
    with pytest.raises(BadRequest):
        decoded("Authorization", raw)


def test_check_refuses_only_headers_the_hub_reads() -> None:
    check([("User-Agent", "\udcfe"), ("X-Anything", "é"), ("Host", "hub")])
    with pytest.raises(BadRequest, match="the last-event-id header"):  # as it was sent
        check([("Host", "hub"), ("last-event-id", "\udcfe")])
