"""TCP forwarders on 127.0.0.1 that count the bytes each client process transfers.

Usage: ``python bench/countingproxy.py NAME:LISTEN_PORT:TARGET_PORT ...``. Each forwarder
accepts on ``LISTEN_PORT`` and relays to ``TARGET_PORT``. The client of each accepted
connection is identified by process id: the kernel's socket table (``/proc/net/tcp``)
gives the inode of the client's end, and ``/proc/PID/fd`` the process holding it.
Bytes are TCP payload (HTTP headers and bodies, WebSocket frames), both directions.

Every line read on stdin is answered on stdout with one JSON object:
``{"NAME PID": [bytes from client, bytes to client], ...}`` (PID -1: not found).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections import defaultdict

counts: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])


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


def client_pid(client_port: int, server_port: int) -> int:
    """The process holding the client end of a connection on 127.0.0.1, or -1."""
    inode = _socket_inode(client_port, server_port)
    if inode is None:
        return -1
    want = f"socket:[{inode}]"
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) == want:
                        return int(entry.name)
    return -1


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tally: list[int], i: int
) -> None:
    try:
        while data := await reader.read(65536):
            tally[i] += len(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def forwarder(name: str, listen: int, target: int) -> asyncio.Future[asyncio.Server]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        pid = client_pid(int(peer[1]), listen)
        tally = counts[f"{name} {pid}"]
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
    while await reader.readline():
        print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
