"""One topic's blocked ``XREAD``, on a connection of its own.

Redis answers a blocked ``XREAD`` on every append to its stream, so the live feed
(:mod:`hub.live.feed`) makes one read per publish, whichever process published. Through
redis-py each read took a connection from the pool and gave it back, and went through its
command, retry and response-callback layers: about a third of the read's CPU in
``bench/peer_nchan.py``'s stream phases (measured as server CPU per delivery). Here the
connection is held for the feed's life and the command packed and read by hiredis, as
:mod:`hub.store.script_pipe` does for scripts (over TCP, TLS or a unix socket alike).
On a Cluster, where that pipe gives no connection of its own, this read goes through
redis-py.

A connection that fails, times out, or is cancelled mid-read is closed, never reused (its
reply would be out of step); the next read opens a fresh one, which is safe: ``XREAD``
only reads, and the feed asks again from its own last id.

With :attr:`StreamTail.arrived` set, the rows of a read are handed to it where the loop
hands over Redis's reply, before the reading task resumes: a publish's fan-out then starts
without a task hop, ahead of the other callbacks ready in that loop pass (for the WebSub
p50). The read still returns the same rows (converted once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError

from hub.core.exceptions import DamagedData
from hub.store import keys
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe

#: Seconds a new connection may take; a blocked read may take its block time plus this.
_TIMEOUT = 10.0


class StreamTail:
    """The feed's read of one topic's stream: see the module docstring."""

    def __init__(self, pipe: ScriptPipe, blocking: Client, topic: str) -> None:
        self._pipe = pipe
        self._blocking = blocking
        self._key = keys.events(topic)
        self._link: Any = None
        #: False once the pipe said it has no connection of its own to give (redis-py).
        self._raw = True
        #: Called with a read's rows as soon as they arrive (see the module docstring).
        self.arrived: Callable[[list[tuple[str, bytes]]], None] | None = None
        #: The reply :attr:`arrived` was given, and its rows: returned, not converted again.
        self._handed: tuple[Any, list[tuple[str, bytes]]] | None = None

    async def after(self, after: str, count: int, block_ms: int) -> list[tuple[str, bytes]]:
        """Events with id > ``after``, waiting up to ``block_ms`` for the first one."""
        if not self._raw:
            try:
                result = await self._blocking.xread({self._key: after}, count=count, block=block_ms)
            except AttributeError as exc:
                # CPython 3.11's SSL transport, closed under redis-py's write, raises this
                # from writelines (its protocol is gone) where a plain socket raises a
                # connection error; uncaught, it ended the topic's feed for good (seen in
                # a Redis Cluster failover over TLS, tests/hub/test_redis_cluster_failover).
                raise RedisConnectionError(f"connection lost under a write ({exc})") from exc
            return keys.xread_rows(result)
        link = self._link
        # alive(), not sound(): the feed asks again as soon as a read is answered, so there
        # is no idle gap for Redis to close the connection in unseen (a close during the
        # blocked read fails that read); the poll per read, i.e. per publish, bought nothing.
        if link is not None and not link.alive():
            self.close()
            link = None
        try:
            if link is None:
                link = await self._pipe.open_link(_TIMEOUT)
                if link is None:
                    self._raw = False
                    return await self.after(after, count, block_ms)
                self._link = link
                link.on_replies = self._replied
            command: tuple[Any, ...] = (
                "XREAD",
                "COUNT",
                count,
                "BLOCK",
                block_ms,
                "STREAMS",
                self._key,
                after,
            )
            self._handed = None
            [reply] = await link.run([hiredis.pack_command(command)], block_ms / 1000 + _TIMEOUT)
        except (OSError, EOFError, TimeoutError) as exc:
            self.close()
            raise RedisConnectionError(f"XREAD {self._key}: {exc!r}") from exc
        except BaseException:  # cancelled (the feed stopped), or a protocol error
            self.close()
            raise
        if isinstance(reply, Exception):
            raise reply
        handed, self._handed = self._handed, None
        if handed is not None and handed[0] is reply:
            return handed[1]
        return keys.script_event_rows(reply[0][1]) if reply else []

    def _replied(self, replies: list[Any]) -> None:
        reply = replies[0]
        if self.arrived is None or not reply or isinstance(reply, Exception):
            return
        try:
            rows = keys.script_event_rows(reply[0][1])
        except DamagedData:  # raised again by after(), in the feed's task, not the link's
            return
        self._handed = (reply, rows)
        self.arrived(rows)

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
