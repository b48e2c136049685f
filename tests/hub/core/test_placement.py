"""hub.core.placement: rendezvous hashing spreads subscriptions evenly and moves few."""

from __future__ import annotations

from collections import Counter

from hub.core.placement import assigned, owner

SUBS = [(f"topic{t}", f"http://cb.example/{i}") for t in range(20) for i in range(100)]


def test_no_live_node_owns_nothing() -> None:
    assert owner(SUBS[0], []) is None
    assert assigned("a", SUBS, []) == set()
    assert assigned("z", SUBS, ["a", "b"]) == set()


def test_one_node_owns_everything() -> None:
    assert assigned("a", SUBS, ["a"]) == set(SUBS)


def test_every_node_agrees_and_each_subscription_has_one_owner() -> None:
    nodes = ["n1", "n2", "n3"]
    parts = [assigned(n, SUBS, nodes) for n in nodes]
    assert set().union(*parts) == set(SUBS)
    assert sum(len(p) for p in parts) == len(SUBS)
    assert all(owner(s, list(reversed(nodes))) == owner(s, nodes) for s in SUBS[:200])


def test_the_load_is_even() -> None:
    nodes = [f"node{i}" for i in range(4)]
    counts = Counter(owner(s, nodes) for s in SUBS)
    expected = len(SUBS) / len(nodes)
    assert all(abs(c - expected) < 0.1 * expected for c in counts.values()), counts


def test_a_node_leaving_moves_only_its_own_subscriptions() -> None:
    before = {s: owner(s, ["a", "b", "c", "d"]) for s in SUBS}
    after = {s: owner(s, ["a", "b", "c"]) for s in SUBS}
    moved = [s for s in SUBS if before[s] != after[s]]
    assert moved and all(before[s] == "d" for s in moved)


def test_a_node_joining_takes_about_its_share() -> None:
    before = {s: owner(s, ["a", "b", "c"]) for s in SUBS}
    after = {s: owner(s, ["a", "b", "c", "d"]) for s in SUBS}
    moved = [s for s in SUBS if before[s] != after[s]]
    assert all(after[s] == "d" for s in moved)
    assert 0.2 * len(SUBS) < len(moved) < 0.3 * len(SUBS)
