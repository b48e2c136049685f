"""The heartbeats of every open live stream of the process, on one timer.

A WebSocket is pinged every ``heartbeat_seconds`` (so that a proxy on the way does not close a
quiet connection, and a peer that is gone, or stopped reading, is found); one that has sent
nothing since its last ping when its next is due is cut off. A lean SSE stream
(:mod:`hub.web.lean_sse`) gets its ``: heartbeat`` comment when it has been quiet that long.

aiohttp's own heartbeat (``WebSocketResponse(heartbeat=...)``) does this per connection: a
timer each, and per ping a task and a second timer for the pong. With 10,000 idle clients
that is some 670 tasks and 2,000 timer operations a second, each connection's at the moment
it happened to connect, so clients that connected in a burst are pinged in a burst, in the
middle of the active clients' fan-out. Here one timer serves them all: the streams wait in
one queue in the order their next beat is due (every beat is an interval after the previous
one, so appending keeps it in order), and each tick takes those due, at most a few times
the steady rate (:func:`_batch`): a burst of connections spreads over the following rounds
instead of beating together every interval. A stream leaves the queue at its turn once its
beat says so. No timer runs while no stream is open, and a stream holds nothing in it but
its place (a lean SSE stream's memory is a measured figure).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable
from typing import Protocol

from hub.core.frames import PING_FRAME

log = logging.getLogger(__name__)

#: How often the queue is looked at, at most: pings due within a tick go out together.
TICK_SECONDS = 0.05
#: A tick takes up to this many times its share of the queue (its length times the tick over
#: the interval), and at least :data:`_MIN_BATCH`: enough to catch up after a burst of
#: connections, few enough that one tick stays short beside a fan-out.
_CATCH_UP = 2.0
_MIN_BATCH = 32


class Beating(Protocol):
    """What :class:`Heartbeats` beats."""

    def beat(self) -> bool:
        """Its heartbeat is due: send it (or end the stream); False once it is to leave."""
        ...


class Heartbeats:
    """Calls each registered beat every ``interval`` seconds, from one timer."""

    def __init__(self, interval: float, tick: float = TICK_SECONDS) -> None:
        self.interval = interval
        # A short interval (tests use 0.2 s) is kept to within a quarter of itself.
        self.tick = min(tick, interval / 4)
        self._queue: deque[tuple[float, Beating]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        """Streams in the queue (one that ended, until its turn comes)."""
        return len(self._queue)

    def add(self, stream: Beating) -> None:
        """Call ``stream.beat()`` an interval from now, and every interval after, until it
        returns False."""
        loop = asyncio.get_running_loop()
        due = loop.time() + self.interval
        self._queue.append((due, stream))
        if self._timer is None:
            self._timer = loop.call_at(due, self._run)

    def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        now = loop.time()
        horizon = now + self.tick
        left = _batch(len(queue), self.tick, self.interval)
        next_due = now + self.interval
        while queue and left > 0:
            due, stream = queue[0]
            if due > horizon:
                break
            queue.popleft()
            left -= 1
            try:
                stays = stream.beat()
            except Exception:  # one stream's fault must not stop every other's heartbeat
                log.exception("a stream's heartbeat failed; it gets no more")
                continue
            if stays:
                queue.append((next_due, stream))
        if not queue:
            self._timer = None
            return
        # Behind (a burst left more due than a tick takes): the next tick at once.
        self._timer = loop.call_at(max(queue[0][0], horizon), self._run)


def _batch(queued: int, tick: float, interval: float) -> int:
    """The most beats one tick takes out of ``queued``."""
    return max(_MIN_BATCH, math.ceil(queued * tick / interval * _CATCH_UP))


class PingedSocket:
    """A WebSocket's heartbeat: a ping frame written straight to its transport each beat
    (the hub's frames go out whole, so it never splits another frame); cut off by ``stop``
    when it has been silent since its last ping. Its reader calls :meth:`heard` for every
    frame that comes in, a pong or anything else."""

    __slots__ = ("_silent", "_stop", "_transport")

    def __init__(
        self, heartbeats: Heartbeats, transport: asyncio.Transport, stop: Callable[[], None]
    ) -> None:
        self._transport: asyncio.Transport | None = transport
        self._stop: Callable[[], None] | None = stop
        self._silent = False
        heartbeats.add(self)

    def heard(self) -> None:
        self._silent = False

    def cancel(self) -> None:
        """No more beats; the connection is let go at once (not at its turn)."""
        self._transport = self._stop = None

    def beat(self) -> bool:
        transport, stop = self._transport, self._stop
        if transport is None or stop is None or transport.is_closing():
            return False
        if self._silent:  # no pong since the last ping, an interval ago
            self.cancel()
            stop()
            return False
        self._silent = True
        transport.write(PING_FRAME)
        return True
