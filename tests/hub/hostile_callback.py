"""A WebSub callback on a raw socket that verifies honestly and answers deliveries badly.

Every answer to a delivery POST is played by a script (:data:`Play`) that writes raw bytes,
sleeps, or closes, so any framing a hostile callback could send reaches the hub. Once
``finish`` is set, the next POST is answered ``410 Gone``, which ends the subscription.
With ``get``, GETs (verifications, publish-ping fetches) are played by a script too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast
from urllib.parse import parse_qs, urlsplit

Play = Callable[["Answer"], Awaitable[None]]


class Answer:
    """What a play may do to the connection of the POST it answers."""

    def __init__(self, transport: asyncio.Transport, target: str = "") -> None:
        self.transport = transport
        #: The request target answered (path and query).
        self.target = target

    @property
    def challenge(self) -> bytes:
        """The ``hub.challenge`` of a verification GET (empty for other requests)."""
        return parse_qs(urlsplit(self.target).query).get("hub.challenge", [""])[0].encode()

    def write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        self.transport.close()

    @property
    def open(self) -> bool:
        return not self.transport.is_closing()


class _Protocol(asyncio.Protocol):
    def __init__(self, server: HostileCallback) -> None:
        self.server = server
        self.buffer = b""
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.lost += 1
        if self.task is not None:
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])
            }
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            method, target, _ = lines[0].split(" ", 2)
            self.server.targets.append(target)
            if method == "GET" and self.server.get is not None:
                self.task = asyncio.create_task(self.server.get(Answer(self.transport, target)))
                return
            if method == "GET":  # verification of intent: echo the challenge, then close
                challenge = parse_qs(urlsplit(target).query)["hub.challenge"][0].encode()
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(challenge), challenge)
                )
                self.transport.close()
                return
            self.server.posts.append(headers.get("x-rshub-first-event-id", ""))
            if self.server.finish:
                self.transport.write(
                    b"HTTP/1.1 410 Gone\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
                )
                self.transport.close()
                return
            self.task = asyncio.create_task(self.server.play(Answer(self.transport)))


class HostileCallback:
    def __init__(self, play: Play, get: Play | None = None) -> None:
        self.play = play
        #: Plays the answer to each GET; None: echo the challenge and close.
        self.get = get
        #: The first event id of each delivery POST received (repeats: retries).
        self.posts: list[str] = []
        #: Request targets as received (GET verifications and POSTs).
        self.targets: list[str] = []
        #: Connections that ended (either side).
        self.lost = 0
        self.finish = False
        self.url = ""

    async def start(self, path: str = "/cb") -> HostileCallback:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _Protocol(self), "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}{path}"
        return self

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self.server.close()
