"""hub.core.forwarding: trusted peers and the base URL their headers name, as plain data."""

from __future__ import annotations

import pytest

from hub.core.exceptions import ConfigurationError
from hub.core.forwarding import TrustedPeers, forwarded_base

BASE = "http://localhost:8080/hub"


def test_peers_by_address_network_or_any() -> None:
    peers = TrustedPeers(["10.0.0.0/8", "::1"])
    assert peers.trusts("10.1.2.3") and peers.trusts("::1")
    assert not peers.trusts("127.0.0.1") and not peers.trusts(None) and not peers.trusts("x")
    assert TrustedPeers(["*"]).trusts("192.0.2.1")
    assert not TrustedPeers([])


def test_a_bad_peer_entry_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="not-an-ip"):
        TrustedPeers(["not-an-ip"])


def test_x_forwarded_host_and_proto() -> None:
    headers = {"X-Forwarded-Host": "a.example, proxy.example:8443", "X-Forwarded-Proto": "https"}
    assert forwarded_base(headers, "http", BASE) == "https://proxy.example:8443/hub"
    assert forwarded_base({"X-Forwarded-Host": "h"}, "http", BASE) == "http://h/hub"


def test_forwarded_header_wins_and_its_last_element_counts() -> None:
    headers = {
        "Forwarded": 'for=1.2.3.4;host=evil.example, for=10.0.0.1;host="hub.example";proto=https',
        "X-Forwarded-Host": "other.example",
    }
    assert forwarded_base(headers, "http", "http://localhost:8080") == "https://hub.example"


@pytest.mark.parametrize(
    "headers",
    [{}, {"X-Forwarded-Host": "bad host/x"}, {"X-Forwarded-Host": "h", "X-Forwarded-Proto": "ftp"}],
)
def test_nothing_usable_names_no_base(headers: dict[str, str]) -> None:
    assert forwarded_base(headers, "http", BASE) is None
