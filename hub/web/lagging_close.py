"""The end of a WebSocket stream whose client lags: its close frame reaches it behind all
it has not read yet, and its connection ends with a FIN, never a reset.

A client dropped as too slow has not read what was sent to it: its receive window is shut,
the hub's kernel send queue is full, and more waits in the transport's buffer. Its close
frame queues behind all of that. The hub used to give the close handshake
``stream_close_seconds`` and then abort the connection: the frames still in user space were
thrown away with the close frame (the client read on into a cut stream, and resuming from
the id it was told lost what was thrown away), and a client that answered a heartbeat ping
from its backlog once the hub had closed its socket got a reset, which also threw away what
the hub's kernel had not delivered. Measured: 200 readers 12 s behind under a publish storm
all saw a reset, no 1013, no ``since=``.

Here (:func:`close_lagging`) the close frame goes behind the backlog, aiohttp lets go of the
connection (its transport hands what it holds to the kernel as the client reads, then
closes its descriptor), and the hub keeps the socket through a descriptor of its own: it
shuts the sending side once the close frame is in the kernel (a FIN right behind it), and
reads and drops what the client sends (pongs from the backlog, its own close frame). The
kernel answers a client's bytes with a reset only once no descriptor holds the socket, so
the hub holds it while the client goes on taking bytes: until the client closes, or takes
nothing for ``stream_close_seconds``, or :data:`LINGER_ROUNDS` times that have passed in
all. A client that takes nothing for ``stream_close_seconds`` is let go as before: its
connection is aborted once ``stream_close_seconds`` more have passed if the transport still
holds bytes for it then (``hub.live.client_streams.abort_if_stuck``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import struct
import termios

from aiohttp import web

from hub.core.frames import close_frame
from hub.core.lag_retry import TRY_AGAIN_LATER

__all__ = ["LINGER_ROUNDS", "close_lagging"]

#: A lagging client's connection is held while it goes on reading, at most this many times
#: ``stream_close_seconds`` in all (one that trickles a byte now and then is let go too).
LINGER_ROUNDS = 12

#: Looks in a row without progress, besides ``stream_close_seconds``, before a client is
#: taken to have stopped reading.
_IDLE_LOOKS = 3


def _unacknowledged(sock: socket.socket) -> int:
    """Bytes of ``sock``'s send queue its peer has not acknowledged yet (SIOCOUTQ)."""
    queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    return int(struct.unpack("i", queued)[0])


def _held_socket(transport: asyncio.Transport) -> socket.socket | None:
    """A descriptor of ``transport``'s TCP socket of the hub's own (None: not a plain TCP
    socket; under TLS the bytes the transport reports are not those on the socket)."""
    raw = transport.get_extra_info("socket")
    if raw is None or raw.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    if transport.get_extra_info("sslcontext") is not None:
        return None
    try:
        return socket.socket(fileno=os.dup(raw.fileno()))
    except OSError:
        return None


async def close_lagging(
    ws: web.WebSocketResponse, request: web.Request, reason: str, within: float
) -> bool:
    """Close ``ws``, whose client was dropped as too slow, with :data:`TRY_AGAIN_LATER` and
    ``reason`` (see the module's docstring); return once its connection is let go. False,
    with nothing done, when its connection is no TCP socket the hub can hold: the caller
    then closes it as any other stream."""
    transport = request.transport
    if ws.closed or transport is None or transport.is_closing():
        return False
    held = _held_socket(transport)
    if held is None:
        return False
    try:
        held.setblocking(False)
        transport.write(close_frame(TRY_AGAIN_LATER, reason))  # behind the backlog
        # aiohttp lets go: the transport stops reading, hands its buffer to the kernel as
        # the client reads, then closes its own descriptor (``held`` keeps the socket);
        # closing ``ws`` then writes nothing more (its pings stopped with the stream).
        transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ws.close(), within)
        await _linger(held, transport, within)
    finally:
        held.close()
    return True


async def _linger(held: socket.socket, transport: asyncio.Transport, within: float) -> None:
    """Shut the sending side once the close frame is in the kernel; read and drop what the
    client sends until it closes, takes nothing for ``within`` seconds, or
    :data:`LINGER_ROUNDS` times that have passed. What the transport still holds then is
    the stream's end's to cut off (``client_streams.abort_if_stuck``: ``within`` more)."""
    loop = asyncio.get_running_loop()
    started = active = loop.time()
    look = min(max(within / 4, 0.05), 1.0)  # how often its progress is looked at
    backlog = transport.get_write_buffer_size() + _unacknowledged(held)
    shut = ended = False
    idle_looks = 0  # looks in a row that saw no progress
    try:
        while True:
            in_user_space = transport.get_write_buffer_size()
            if not shut and not in_user_space:
                held.shutdown(socket.SHUT_WR)  # the FIN, right behind the close frame
                shut = True
            data = b""
            if ended:  # the client sends no more, and may still read
                await asyncio.sleep(look)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(look):
                        data = await loop.sock_recv(held, 4096)
                    ended = not data
            if ended and shut:
                return  # both sides done: a clean close
            now = loop.time()
            left = transport.get_write_buffer_size() + _unacknowledged(held)
            if data or left < backlog:
                active, idle_looks = now, 0
            else:
                idle_looks += 1
            backlog = left
            # Idle means both ``within`` seconds and a few looks without progress: a hub
            # whose own loop stalled past ``within`` (a burst of work, a busy machine) gave
            # the client no chance to show any, and must not count that against it.
            if (now - active >= within and idle_looks >= _IDLE_LOOKS) or (
                now - started >= LINGER_ROUNDS * within
            ):
                break
    except OSError:  # reset by the client
        return
