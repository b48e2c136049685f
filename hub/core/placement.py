"""Which hub process delivers which WebSub subscription: rendezvous hashing, plain data.

Every process computes the same answer from the same list of live processes, with no
coordination: the owner of a subscription is the node with the highest hash of
``(node, subscription)``. When a node joins or leaves, only the subscriptions it gains or
loses move (about 1/N of them), and the load stays even. Agreement is not what makes
delivery single-owner: the lease in Redis is (:mod:`hub.store.leases`); placement only says which
node should try to hold it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

#: A subscription's identity: (topic, callback).
SubscriptionKey = tuple[str, str]


def subscription_id(topic: str, callback: str) -> str:
    """A short, stable name for a subscription that does not reveal its callback URL.

    For series labels and listings read by people who must not see the callback (its
    query string often carries a key): the first 12 hex digits of SHA-256 of
    ``topic``, NUL, ``callback``. Operators match it to a callback in the admin API.
    """
    return hashlib.sha256(f"{topic}\0{callback}".encode()).hexdigest()[:12]


def _weight(node: str, key: SubscriptionKey) -> bytes:
    text = f"{node}\0{key[0]}\0{key[1]}".encode()
    return hashlib.blake2b(text, digest_size=8).digest()


def owner(key: SubscriptionKey, nodes: Sequence[str]) -> str | None:
    """The node that should deliver ``key``, or ``None`` when no node is live."""
    if not nodes:
        return None
    return max(nodes, key=lambda node: _weight(node, key))


def assigned(
    node: str, keys: Iterable[SubscriptionKey], nodes: Sequence[str]
) -> set[SubscriptionKey]:
    """The subscriptions among ``keys`` that ``node`` should deliver."""
    if node not in nodes:
        return set()
    if len(nodes) == 1:
        return set(keys)
    return {key for key in keys if owner(key, nodes) == node}
