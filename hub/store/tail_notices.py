"""Tail notices: how a process hears of the other processes' appends to the topics it follows.

Redis answers a blocked ``XREAD`` on every append, the reader's own included, so a process
that followed a topic that way paid, for each of its own publishes, a reply to read and a
new ``XREAD`` to send, and Redis a wake-up that took the hub's core mid-burst (measured: 10%
of the hub's CPU per delivery in ``bench/peer_nchan.py``'s WebSocket phase). Instead, a
process subscribes to a channel of its own (:data:`hub.store.keys.TAIL_CHANNEL` and its node
id) and joins the tails set of each topic it follows (:meth:`EventStore.follow`); the append
script, the one writer of every stream, publishes what it appended, and after which id, to
every follower but its caller, whose events come back in the script's own reply.

A notice names the id it follows on, so a follower sees any gap (a notice lost with its
connection, its own append answered before another's notice) and reads the stream to close
it (:mod:`hub.live.feed`). A follower nobody listens for is dropped from the set by the
next append, so a process whose connection ended follows every topic again once it has a
new one, then reads each up to date.

The notices connection is named ``rshub:tail:<node>`` (``CLIENT LIST`` shows one per
process). Only where the script pipe makes connections of its own (TCP, TLS or a unix
socket: not on a Cluster, :meth:`ScriptPipe.open_link`); there the feeds keep the blocked
``XREAD``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import hiredis

from hub.store import keys
from hub.store.redis_connection import StoreError
from hub.store.script_pipe import ScriptPipe, _Link

log = logging.getLogger(__name__)


class Notice(NamedTuple):
    """Another process appended ``rows`` (id, stored event) to ``topic`` after ``previous_id``
    (``""``: the stream was empty)."""

    topic: str
    previous_id: str
    rows: list[tuple[str, bytes]]


def parse_notice(payload: bytes) -> Notice:
    """The notice ``append.lua`` publishes: topic, previous id and the ids (space-separated),
    each on a line, then the events, NUL-separated (neither JSON nor XML text holds NUL)."""
    topic, previous, joined, blob = payload.split(b"\n", 3)
    ids = joined.decode("ascii").split(" ")
    events = blob.split(b"\0")
    if not joined or len(ids) != len(events):
        raise ValueError(f"a tail notice of {len(ids)} ids and {len(events)} events")
    return Notice(topic.decode(), previous.decode("ascii"), list(zip(ids, events, strict=True)))


class TailNotices:
    """This process's subscription to its tail notices (see the module docstring)."""

    def __init__(self, pipe: ScriptPipe, node: str) -> None:
        self._pipe = pipe
        self.node = node
        self._channel = (keys.TAIL_CHANNEL + node).encode()
        self._link: _Link | None = None

    async def open(
        self,
        on_notice: Callable[[Notice], None],
        on_lost: Callable[[Exception], None],
        timeout: float,
    ) -> bool:
        """Subscribe on a new connection; False where the pipe has none to give (then
        nothing was opened). ``on_notice`` gets every notice where it arrives; ``on_lost``
        is called once when the connection ends (not after :meth:`close`)."""
        self.close()
        try:
            link = await self._pipe.open_link(timeout)
        except (OSError, EOFError, TimeoutError) as exc:
            raise StoreError(f"tail notices: cannot connect to Redis: {exc!r}") from exc
        if link is None:
            return False
        channel = self._channel

        def pushed(reply: Any) -> None:
            if not (isinstance(reply, list) and len(reply) == 3 and reply[0] == b"message"):
                return  # a subscription's confirmation
            if reply[1] != channel:
                return
            try:
                notice = parse_notice(reply[2])
            except ValueError as exc:  # not from this hub's script: nothing to follow on
                log.warning("tail notice ignored: %s", exc)
                return
            try:
                on_notice(notice)
            except Exception:  # one feed's failure must not end the others' notices
                log.exception("handling a tail notice for %r failed", notice.topic)

        link.on_push = pushed
        commands: list[tuple[Any, ...]] = [("CLIENT", "SETNAME", channel), ("SUBSCRIBE", channel)]
        try:
            replies = await link.run([hiredis.pack_command(c) for c in commands], timeout)
        except BaseException as exc:
            link.close()
            if isinstance(exc, (OSError, EOFError, TimeoutError)):
                raise StoreError(f"tail notices: SUBSCRIBE failed: {exc!r}") from exc
            raise
        refused = next((r for r in replies if isinstance(r, Exception)), None)
        if refused is not None:
            link.close()
            raise StoreError(f"tail notices: SUBSCRIBE refused: {refused}")
        link.on_lost = on_lost
        if not link.alive():  # it ended before on_lost was there to hear it
            link.on_lost = None
            link.close()
            raise StoreError("tail notices: the connection ended as it was subscribed")
        self._link = link
        return True

    def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.on_lost = None
            link.on_push = None
            link.close()
