"""A TCP proxy the test controls, to partition one hub from its Redis.

:meth:`BlackholeProxy.cut` stops forwarding in both directions but closes nothing: the
hub's connections stay open and what it sends waits in the proxy (and, once the proxy stops
reading, in the kernel's buffers), as across a network partition where packets are dropped
and TCP keeps retransmitting. New connections are accepted too, and wait the same way.
:meth:`BlackholeProxy.heal` forwards everything held back, late, as TCP would once the
network is back: a partitioned hub's writes do reach Redis after the partition, which is
what fencing is for.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit


class BlackholeProxy:
    def __init__(self, target_url: str) -> None:
        """``target_url``: the ``redis://`` URL of the real Redis (its password is kept)."""
        self.target_url = target_url
        parts = urlsplit(target_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        """``target_url`` with the proxy's address instead of Redis's."""
        parts = urlsplit(self.target_url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    @property
    def cut_off(self) -> bool:
        return not self._open.is_set()

    def cut(self) -> None:
        """Blackhole: forward nothing either way, keep every socket open."""
        self._open.clear()

    def heal(self) -> None:
        """Forward again, starting with what was held back."""
        self._open.set()

    async def start(self) -> BlackholeProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, up_writer}
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._pumps.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._pumps.discard(task)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                await self._open.wait()  # held while cut: not read on, not forwarded
                writer.write(data)
                await writer.drain()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
