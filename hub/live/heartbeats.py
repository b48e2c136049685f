"""The heartbeats of every open WebSocket of the process, on one timer.

A WebSocket is pinged every ``heartbeat_seconds`` (so that a proxy on the way does not close a
quiet connection, and a peer that is gone, or stopped reading, is found); one that has sent
nothing since its last ping when its next is due is cut off.

aiohttp's own heartbeat (``WebSocketResponse(heartbeat=...)``) does this per connection: a
timer each, and per ping a task and a second timer for the pong. With 10,000 idle clients
that is some 670 tasks and 2,000 timer operations a second, each connection's at the moment
it happened to connect, so clients that connected in a burst are pinged in a burst, in the
middle of the active clients' fan-out. Here one timer serves them all: the connections wait
in one queue in the order their next beat is due (every beat is an interval after the
previous one, so appending keeps it in order), and each tick takes those due, at most a few
times the steady rate (:func:`_batch`): a burst of connections spreads over the following
rounds instead of pinging together every interval. A connection that closed leaves the
queue at its turn. No timer runs while no connection is open.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable

from hub.core.frames import PING_FRAME

#: How often the queue is looked at, at most: pings due within a tick go out together.
TICK_SECONDS = 0.05
#: A tick takes up to this many times its share of the queue (its length times the tick over
#: the interval), and at least :data:`_MIN_BATCH`: enough to catch up after a burst of
#: connections, few enough that one tick stays short beside a fan-out.
_CATCH_UP = 2.0
_MIN_BATCH = 32


class Heartbeat:
    """One connection's place in :class:`Heartbeats`: its ``beat`` is called each interval
    until :meth:`cancel`."""

    __slots__ = ("beat",)

    def __init__(self, beat: Callable[[], None]) -> None:
        self.beat: Callable[[], None] | None = beat

    def cancel(self) -> None:
        """No more beats; what the beat holds (its connection) is let go at once."""
        self.beat = None


class Heartbeats:
    """Calls each registered beat every ``interval`` seconds, from one timer."""

    def __init__(self, interval: float, tick: float = TICK_SECONDS) -> None:
        self.interval = interval
        # A short interval (tests use 0.2 s) is kept to within a quarter of itself.
        self.tick = min(tick, interval / 4)
        self._queue: deque[tuple[float, Heartbeat]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        """Connections in the queue (a cancelled one until its turn comes)."""
        return len(self._queue)

    def add(self, beat: Callable[[], None]) -> Heartbeat:
        """Call ``beat`` an interval from now, and every interval after, until the returned
        :class:`Heartbeat` is cancelled."""
        entry = Heartbeat(beat)
        loop = asyncio.get_running_loop()
        due = loop.time() + self.interval
        self._queue.append((due, entry))
        if self._timer is None:
            self._timer = loop.call_at(due, self._run)
        return entry

    def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        now = loop.time()
        horizon = now + self.tick
        left = _batch(len(queue), self.tick, self.interval)
        next_due = now + self.interval
        while queue and left > 0:
            due, entry = queue[0]
            if due > horizon:
                break
            queue.popleft()
            beat = entry.beat
            if beat is None:  # its connection closed: it just leaves
                continue
            left -= 1
            queue.append((next_due, entry))
            beat()
        if not queue:
            self._timer = None
            return
        # Behind (a burst left more due than a tick takes): the next tick at once.
        self._timer = loop.call_at(max(queue[0][0], horizon), self._run)

    def close(self) -> None:
        """Stop the timer and forget every connection (the process is shutting down)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()


def _batch(queued: int, tick: float, interval: float) -> int:
    """The most beats one tick takes out of ``queued``."""
    return max(_MIN_BATCH, math.ceil(queued * tick / interval * _CATCH_UP))


class PingedSocket:
    """A WebSocket's heartbeat: a ping frame written straight to its transport each beat
    (the hub's frames go out whole, so it never splits another frame); cut off by ``stop``
    when it has been silent since its last ping. Its reader calls :meth:`heard` for every
    frame that comes in, a pong or anything else."""

    __slots__ = ("_entry", "_silent", "_stop", "_transport")

    def __init__(
        self, heartbeats: Heartbeats, transport: asyncio.Transport, stop: Callable[[], None]
    ) -> None:
        self._transport = transport
        self._stop = stop
        self._silent = False
        self._entry = heartbeats.add(self._beat)

    def heard(self) -> None:
        self._silent = False

    def cancel(self) -> None:
        self._entry.cancel()

    def _beat(self) -> None:
        if self._transport.is_closing():
            self._entry.cancel()
            return
        if self._silent:  # no pong since the last ping, an interval ago
            self._entry.cancel()
            self._stop()
            return
        self._silent = True
        self._transport.write(PING_FRAME)
