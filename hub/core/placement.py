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

# One implementation, shared with the clients (``rshub inspect``): re-exported here.
from rsclient.subscription_identity import subscription_id as subscription_id

#: A subscription's identity: (topic, callback).
SubscriptionKey = tuple[str, str]


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
