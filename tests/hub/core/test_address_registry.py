"""SSRF by classification: every IANA special-purpose prefix, plain and wrapped, and a fuzz.

The tables below are the IANA IPv4 and IPv6 Special-Purpose Address Registries
(iana-ipv4-special-registry, iana-ipv6-special-registry), with their "Globally Reachable"
column (True, False, or None for N/A). A sample of every prefix that is not globally
reachable must be refused, and so must every IPv6 form that carries an IPv4 sample; the
refusal must name the carried IPv4 address (proof that it was unwrapped, not just matched).
A seeded hypothesis fuzz then checks :func:`hub.core.addresses.refusal` against a reference rule
written here independently, with integer arithmetic instead of :mod:`ipaddress` networks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from hub.core.addresses import refusal

Net4 = ipaddress.IPv4Network
Net6 = ipaddress.IPv6Network

IPV4_SPECIAL: list[tuple[str, str, bool | None]] = [
    ("0.0.0.0/8", "This network", False),
    ("0.0.0.0/32", "This host on this network", False),
    ("10.0.0.0/8", "Private-Use", False),
    ("100.64.0.0/10", "Shared Address Space", False),
    ("127.0.0.0/8", "Loopback", False),
    ("169.254.0.0/16", "Link Local", False),
    ("172.16.0.0/12", "Private-Use", False),
    ("192.0.0.0/24", "IETF Protocol Assignments", False),
    ("192.0.0.0/29", "IPv4 Service Continuity Prefix", False),
    ("192.0.0.8/32", "IPv4 dummy address", False),
    ("192.0.0.9/32", "Port Control Protocol Anycast", True),
    ("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", True),
    ("192.0.0.170/32", "NAT64/DNS64 Discovery", False),
    ("192.0.0.171/32", "NAT64/DNS64 Discovery", False),
    ("192.0.2.0/24", "Documentation (TEST-NET-1)", False),
    ("192.31.196.0/24", "AS112-v4", True),
    ("192.52.193.0/24", "AMT", True),
    ("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", None),
    ("192.88.99.2/32", "6a44-relay anycast address", None),
    ("192.168.0.0/16", "Private-Use", False),
    ("192.175.48.0/24", "Direct Delegation AS112 Service", True),
    ("198.18.0.0/15", "Benchmarking", False),
    ("198.51.100.0/24", "Documentation (TEST-NET-2)", False),
    ("203.0.113.0/24", "Documentation (TEST-NET-3)", False),
    ("240.0.0.0/4", "Reserved", False),
    ("255.255.255.255/32", "Limited Broadcast", False),
]

IPV6_SPECIAL: list[tuple[str, str, bool | None]] = [
    ("::1/128", "Loopback Address", False),
    ("::/128", "Unspecified Address", False),
    ("::ffff:0:0/96", "IPv4-mapped Address", False),
    ("64:ff9b::/96", "IPv4-IPv6 Translat.", True),
    ("64:ff9b:1::/48", "IPv4-IPv6 Translat.", False),
    ("100::/64", "Discard-Only Address Block", False),
    ("100:0:0:1::/64", "Dummy IPv6 Prefix", False),
    ("2001::/23", "IETF Protocol Assignments", False),
    ("2001::/32", "TEREDO", None),
    ("2001:1::1/128", "Port Control Protocol Anycast", True),
    ("2001:1::2/128", "Traversal Using Relays around NAT Anycast", True),
    ("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", True),
    ("2001:2::/48", "Benchmarking", False),
    ("2001:3::/32", "AMT", True),
    ("2001:4:112::/48", "AS112-v6", True),
    ("2001:10::/28", "Deprecated (previously ORCHID)", False),
    ("2001:20::/28", "ORCHIDv2", True),
    ("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", True),
    ("2001:db8::/32", "Documentation", False),
    ("2002::/16", "6to4", None),
    ("2620:4f:8000::/48", "Direct Delegation AS112 Service", True),
    ("3fff::/20", "Documentation", False),
    ("5f00::/16", "Segment Routing (SRv6) SIDs", False),
    ("fc00::/7", "Unique-Local", False),
    ("fe80::/10", "Link-Local Unicast", False),
]

V4 = [(Net4(p), name, reach) for p, name, reach in IPV4_SPECIAL]
V6 = [(Net6(p), name, reach) for p, name, reach in IPV6_SPECIAL]
#: A Teredo server and client that are themselves globally reachable.
TEREDO_SERVER = ipaddress.IPv4Address("65.54.227.120")
PUBLIC_V4 = ipaddress.IPv4Address("8.8.8.8")


def samples(net: Net4 | Net6, table: list[tuple[Net4 | Net6, str, bool | None]]) -> list[str]:
    """First, second, middle and last address of ``net``, but none inside a more specific
    entry of the registry (its own row says something else there)."""
    first = int(net.network_address)
    size = net.num_addresses
    picks = {first, first + min(1, size - 1), first + size // 2, first + size - 1}
    nested = [n for n, _, _ in table if n != net and n.subnet_of(net)]
    out = []
    for value in sorted(picks):
        address = ipaddress.ip_address(value) if net.version == 4 else ipaddress.IPv6Address(value)
        if not any(address in n for n in nested):
            out.append(str(address))
    return out


def wrapped(v4: ipaddress.IPv4Address) -> Iterator[tuple[str, str]]:
    """Every IPv6 form that carries ``v4``: (form, address)."""
    n = int(v4)
    yield "IPv4-mapped", str(ipaddress.IPv6Address((0xFFFF << 32) | n))
    yield "IPv4-translated", str(ipaddress.IPv6Address((0xFFFF << 48) | n))
    if n > 1:
        yield "IPv4-compatible", str(ipaddress.IPv6Address(n))
    yield "NAT64", str(ipaddress.IPv6Address((0x64FF9B << 96) | n))
    yield "local-use NAT64", str(ipaddress.IPv6Address((0x64FF9B0001 << 80) | n))
    yield "6to4", str(ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | 1))
    server = int(TEREDO_SERVER)
    yield "Teredo client", str(teredo(server, n))
    yield "Teredo server", str(teredo(n, int(PUBLIC_V4)))


def teredo(server: int, client: int, port: int = 40000) -> ipaddress.IPv6Address:
    """RFC 4380: 2001:0000:<server>:<flags>:<port XOR ffff>:<client XOR ffffffff>."""
    return ipaddress.IPv6Address(
        (0x20010000 << 96)
        | (server << 64)
        | (0x8000 << 48)
        | ((port ^ 0xFFFF) << 32)
        | (client ^ 0xFFFFFFFF)
    )


def not_reachable(table: list[tuple[Net4 | Net6, str, bool | None]]) -> list[tuple[str, str]]:
    return [(str(net), a) for net, _, reach in table if reach is False for a in samples(net, table)]


NOT_REACHABLE_V4 = not_reachable(V4)
NOT_REACHABLE_V6 = not_reachable(V6)


@pytest.mark.parametrize("prefix,address", NOT_REACHABLE_V4 + NOT_REACHABLE_V6)
def test_every_not_globally_reachable_prefix_is_refused(prefix: str, address: str) -> None:
    assert refusal(address) is not None, f"{address} ({prefix}) was allowed"


@pytest.mark.parametrize("prefix,address", NOT_REACHABLE_V4)
def test_every_wrapped_form_of_it_is_refused_naming_the_ipv4(prefix: str, address: str) -> None:
    v4 = ipaddress.IPv4Address(address)
    for form, v6 in wrapped(v4):
        why = refusal(v6)
        assert why is not None, f"{form} {v6} of {address} ({prefix}) was allowed"
        assert str(v4) in why, f"{form} {v6}: {why!r} does not name {v4}"
        # (and the same with a zone index, as a resolver may hand it over)
        assert refusal(v6 + "%eth0") is not None


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "93.184.216.34",
        "192.31.196.1",  # AS112-v4: globally reachable
        "192.52.193.1",  # AMT
        "192.175.48.1",  # Direct Delegation AS112
        "2606:4700::1111",
        "2a00:1450::1",
        "2620:4f:8000::1",  # Direct Delegation AS112 (IPv6)
    ],
)
def test_globally_reachable_addresses_are_allowed(address: str) -> None:
    assert refusal(address) is None


def test_the_wrappers_of_a_public_address_are_refused_too() -> None:
    """The hub reaches an IPv4 host by its IPv4 address only (hub.core.addresses, rule 1)."""
    for form, v6 in wrapped(PUBLIC_V4):
        why = refusal(v6)
        assert why is not None and "8.8.8.8" in why, (form, v6, why)


# -- the fuzz: refusal agrees with a reference rule written independently -------------------

_IANA_FALSE_V4 = [(int(n.network_address), n.prefixlen) for n, _, r in V4 if r is False]
_IANA_FALSE_V6 = [(int(n.network_address), n.prefixlen) for n, _, r in V6 if r is False]


def _within(value: int, prefixes: list[tuple[int, int]], bits: int) -> bool:
    return any(value >> (bits - length) == base >> (bits - length) for base, length in prefixes)


def reference_v4_refused(n: int) -> bool:
    """Not globally reachable per IANA (any containing row), multicast, or not is_global."""
    if _within(n, _IANA_FALSE_V4, 32) or n >> 28 == 0xE:
        return True
    return not ipaddress.IPv4Address(n).is_global


def reference_v6_refused(n: int) -> bool:
    top96 = n >> 32
    carries_ipv4 = (
        top96 == 0xFFFF  # ::ffff:a.b.c.d
        or top96 == 0xFFFF0000  # ::ffff:0:a.b.c.d
        or (top96 == 0 and n > 1)  # ::a.b.c.d
        or top96 == 0x64FF9B << 64  # 64:ff9b::/96
        or n >> 80 == 0x64FF9B0001  # 64:ff9b:1::/48
        or n >> 112 == 0x2002  # 6to4
        or n >> 96 == 0x20010000  # Teredo
    )
    if carries_ipv4:
        return True
    if n >> 125 != 0b001:  # outside 2000::/3 (so also ULA, link-local, multicast, ::, ::1)
        return True
    if _within(n, _IANA_FALSE_V6, 128):
        return True
    return not ipaddress.IPv6Address(n).is_global


_V6_PREFIXES = [n for n, _, _ in V6] + [
    Net6("2000::/3"),
    Net6("::ffff:0:0:0/96"),
    Net6("::/96"),
    Net6("ff00::/8"),
    Net6("fec0::/10"),
    Net6("::/0"),
]


def _in_prefix(net: Net6, bits: int) -> int:
    return int(net.network_address) | (bits & int(net.hostmask))


_V4_VALUES = st.one_of(
    st.integers(0, 2**32 - 1),
    st.builds(
        lambda net, bits: int(net.network_address) | (bits & int(net.hostmask)),
        st.sampled_from([n for n, _, _ in V4]),
        st.integers(0, 2**32 - 1),
    ),
)
_WRAP: list[Callable[[int, int], int]] = [
    lambda v4, _: (0xFFFF << 32) | v4,
    lambda v4, _: (0xFFFF << 48) | v4,
    lambda v4, _: v4,
    lambda v4, _: (0x64FF9B << 96) | v4,
    lambda v4, rest: (0x64FF9B0001 << 80) | (rest & ((1 << 80) - 1)) | v4,
    lambda v4, rest: (0x2002 << 112) | (v4 << 80) | (rest & ((1 << 80) - 1)),
    lambda v4, rest: int(teredo(rest & 0xFFFFFFFF, v4)),
]
IPV6_VALUES = st.one_of(
    st.integers(0, 2**128 - 1),
    st.builds(_in_prefix, st.sampled_from(_V6_PREFIXES), st.integers(0, 2**128 - 1)),
    st.builds(
        lambda wrap, v4, rest: wrap(v4, rest),
        st.sampled_from(_WRAP),
        _V4_VALUES,
        st.integers(0, 2**128 - 1),
    ),
)


@seed(20261124)
@settings(max_examples=3000, deadline=None, database=None)
@given(IPV6_VALUES)
def test_fuzz_ipv6_refusal_agrees_with_the_reference(n: int) -> None:
    address = str(ipaddress.IPv6Address(n))
    assert (refusal(address) is not None) == reference_v6_refused(n), address


@seed(20261124)
@settings(max_examples=2000, deadline=None, database=None)
@given(_V4_VALUES)
def test_fuzz_ipv4_refusal_agrees_with_the_reference(n: int) -> None:
    address = str(ipaddress.IPv4Address(n))
    assert (refusal(address) is not None) == reference_v4_refused(n), address
