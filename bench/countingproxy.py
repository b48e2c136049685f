"""TCP forwarders on 127.0.0.1 that count the bytes each client process transfers.

Usage: ``python bench/countingproxy.py NAME:LISTEN_PORT:TARGET_PORT ...``. Each forwarder
accepts on ``LISTEN_PORT`` and relays to ``TARGET_PORT``. The client of each accepted
connection is identified by process id: the kernel's socket table (``/proc/net/tcp``)
gives the inode of the client's end, and ``/proc/PID/fd`` the process holding it.
Bytes are TCP payload (HTTP headers and bodies, WebSocket frames), both directions.

Finding the pid means reading every process's ``/proc/PID/fd`` (17-30 ms on a busy
machine), so it runs in a thread, never on the event loop: a connection is forwarded from
its first byte while its pid is looked up, and every connection's bytes keep flowing.

Every line read on stdin is answered on stdout with one JSON object:
``{"NAME PID": [bytes from client, bytes to client], ...}`` (PID -1: not found), once
the lookups of the connections accepted so far have finished; the line ``requests`` is
answered with ``{"NAME PID": HTTP requests, ...}`` instead: the header blocks (ended by a
blank line) the client sent, exact for requests without a body (GETs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

#: Bytes [from client, to client, HTTP header blocks from client] per connection, and the
#: key ("NAME PID") it counts for once its pid is known.
_connections: list[tuple[str, asyncio.Future[str], list[int]]] = []
#: One thread: lookups queue behind each other instead of competing for the GIL.
_lookups = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pid-lookup")


def _socket_inode(client_port: int, server_port: int) -> str | None:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, remote = fields[1], fields[2]
                if (
                    int(local.rsplit(":", 1)[1], 16) == client_port
                    and int(remote.rsplit(":", 1)[1], 16) == server_port
                ):
                    return fields[9]
    return None


#: Socket inode -> pid of every process's sockets seen by the last scans. Inodes of
#: sockets only grow, so an entry never names another socket; only the lookup thread uses it.
_owners: dict[str, int] = {}


def _socket_owners() -> dict[str, int]:
    """Socket inode -> pid, for every socket of every process: one pass over ``/proc``."""
    owners: dict[str, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(fd.path)
                    if link.startswith("socket:["):
                        owners[link[8:-1]] = int(entry.name)
    return owners


def client_pid(client_port: int, server_port: int) -> int:
    """The process holding the client end of a connection on 127.0.0.1, or -1.

    Slow when the socket is new (a scan of every process's descriptors, which then serves
    every connection opened before it): call it off the event loop."""
    inode = _socket_inode(client_port, server_port)
    if inode is None:
        return -1
    if inode not in _owners:
        _owners.update(_socket_owners())
    return _owners.get(inode, -1)


def _lookup(client_port: int, server_port: int) -> int:
    return client_pid(client_port, server_port)  # the module's, looked up at call time


async def _tallies(timeout: float) -> defaultdict[str, list[int]]:
    pending = [key for _, key, _ in _connections if not key.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout)
    counts: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for name, key, tally in _connections:
        total = counts[key.result() if key.done() else f"{name} ?"]
        for i, n in enumerate(tally):
            total[i] += n
    return counts


async def snapshot(timeout: float = 30.0) -> dict[str, list[int]]:
    """Bytes per ``"NAME PID"``, after the pending pid lookups (bounded by ``timeout``;
    a connection still unresolved then counts as ``"NAME ?"``)."""
    return {key: total[:2] for key, total in (await _tallies(timeout)).items()}


async def requests(timeout: float = 30.0) -> dict[str, int]:
    """HTTP requests per ``"NAME PID"`` (header blocks the clients sent), as :func:`snapshot`."""
    return {key: total[2] for key, total in (await _tallies(timeout)).items()}


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tally: list[int], i: int
) -> None:
    tail = b""  # a header block's blank line may be split across two reads
    try:
        while data := await reader.read(65536):
            tally[i] += len(data)
            if i == 0:
                tally[2] += (tail + data).count(b"\r\n\r\n")
                tail = data[-3:]
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def forwarder(name: str, listen: int, target: int) -> asyncio.Future[asyncio.Server]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        peer = writer.get_extra_info("peername")
        tally = [0, 0, 0]
        key: asyncio.Future[str] = loop.create_future()
        _connections.append((name, key, tally))

        def named(lookup: asyncio.Future[int]) -> None:
            if not key.done():
                pid = -1 if lookup.cancelled() or lookup.exception() else lookup.result()
                key.set_result(f"{name} {pid}")

        # Started at once, while the client is surely connected; forwarding does not wait.
        lookup = asyncio.wrap_future(_lookups.submit(_lookup, int(peer[1]), listen), loop=loop)
        lookup.add_done_callback(named)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer, tally, 0), _pump(up_reader, writer, tally, 1))

    return asyncio.ensure_future(asyncio.start_server(handle, "127.0.0.1", listen, backlog=1024))


async def main(specs: list[str]) -> None:
    servers = []
    for spec in specs:
        name, listen, target = spec.split(":")
        servers.append(await forwarder(name, int(listen), int(target)))
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("ready", flush=True)
    while line := await reader.readline():
        counts = await requests() if line.strip() == b"requests" else await snapshot()
        print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
