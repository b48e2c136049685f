"""hub.core.self_service and rsclient.subscription_identity: the one signature both sides
compute, the window either side of the hub's clock, and stream counts summed per topic."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from hub.core import placement, self_service
from hub.core.exceptions import Forbidden, Unauthorized
from hub.core.presence import StreamCounts, TopicPresence, summed
from rsclient import subscription_identity
from rsclient.subscription_identity import record_signature

PATH = "/admin/subscriptions/0123456789ab"
NOW = 1_800_000_000


def check(secret: str | None, timestamp: str | None, signature: str | None) -> str:
    return self_service.check(secret, PATH, timestamp, signature, now=NOW, tolerance=300)


def test_the_signature_is_an_hmac_of_timestamp_and_path() -> None:
    mac = hmac.new(b"k", f"{NOW}\n{PATH}".encode(), hashlib.sha256).hexdigest()
    assert record_signature("k", NOW, PATH) == f"sha256={mac}"
    assert (
        check("k", str(NOW), f"sha256={mac}")
        == hashlib.sha256(f"sha256={mac}".encode()).hexdigest()
    )
    # One id function for the hub and its clients.
    assert placement.subscription_id is subscription_identity.subscription_id


@pytest.mark.parametrize(
    ("timestamp", "accepted"),
    [(NOW - 300, True), (NOW + 300, True), (NOW - 301, False), (NOW + 301, False)],
)
def test_the_window_is_the_tolerance_either_way(timestamp: int, accepted: bool) -> None:
    signature = record_signature("k", timestamp, PATH)
    if accepted:
        check("k", str(timestamp), signature)
    else:
        with pytest.raises(Unauthorized, match=r"expired|future"):
            check("k", str(timestamp), signature)


def test_a_signature_for_another_path_or_secret_is_forbidden() -> None:
    with pytest.raises(Forbidden, match="does not match"):
        check("k", str(NOW), record_signature("k", NOW, PATH + "x"))
    with pytest.raises(Forbidden, match="does not match"):
        check("k", str(NOW), record_signature("other", NOW, PATH))
    with pytest.raises(Forbidden, match=r"no hub\.secret"):
        check(None, str(NOW), record_signature("k", NOW, PATH))


def test_stream_counts_are_summed_over_processes_per_topic() -> None:
    counts = StreamCounts()
    changes: list[int] = []
    counts.on_change = lambda: changes.append(1)
    counts.connected("t", "ws")
    counts.connected("t", "ws")
    counts.connected("t", "sse")
    counts.disconnected("t", "ws")
    counts.disconnected("u", "sse")  # never below zero, never a stale key
    assert counts.snapshot() == {("t", "ws"): 1, ("t", "sse"): 1} and len(changes) == 5
    other = {("t", "ws"): 2, ("v", "sse"): 1, ("t", "bogus"): 9}
    found = summed([counts.snapshot(), other], {"t": {"active": 1, "suspended": 2}})
    assert found["t"] == TopicPresence(3, 1, {"active": 1, "suspended": 2})
    assert found["v"] == TopicPresence(0, 1, {"active": 0, "suspended": 0})
    assert found["t"].total == 7
