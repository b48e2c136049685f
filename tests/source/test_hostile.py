"""Hostile requests and a hostile directory: nothing outside DIR is ever served, whatever
the path's spelling, and nothing the directory does (links, a directory swapped for a link,
a file deleted while it is hashed or served) breaks the Source: no stall of its event loop,
no leaked socket, no error logged (all under :class:`tests.watchdog.Watchdog`)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import threading
from pathlib import Path

import aiohttp
import pytest

from source.tree import scan
from tests.source.support import in_process_source, tree
from tests.support import wait_for
from tests.watchdog import Watchdog

pytestmark = pytest.mark.timeout(180)

SECRET = Path("/etc/passwd").read_bytes()

#: Request targets that must never reach a file outside DIR, a link, or the state.
NAMED = [
    "/files/../../../../etc/passwd",
    "/files/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/files/%2E%2E%2F%2E%2E%2F%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
    "/files/sub/..%2f..%2f..%2f..%2fetc/passwd",
    "/files/..%5c..%5c..%5cetc%5cpasswd",
    "/files/..\\..\\..\\etc\\passwd",
    "/files//etc/passwd",
    "/files/%2fetc%2fpasswd",
    "/files/passwd",  # a link to /etc/passwd
    "/files/etc/passwd",  # a link to /etc, then a name in it
    "/files/etc%2fpasswd",
    "/files/fifo",
    "/files/.rshub/source.json",
    "/files/%2ershub/source.json",
    "/files/a.txt%00.png",
    "/files/%00",
    "/files/%",
    "/files/%zz",
    "/files/.",
    "/files/sub/.",
    "/files/sub/..",
    "/../etc/passwd",
    "/files/../resourcelist.xml/../../etc/passwd",
]


async def raw_get(port: int, target: str) -> tuple[int, bytes]:
    """``GET target`` written byte for byte (no client normalizes it); status and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode("latin-1")
        )
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def hostile_tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (root / "sub" / "b.txt").write_text("b\n")
    os.symlink("/etc/passwd", root / "passwd")
    os.symlink("/etc", root / "etc")
    os.mkfifo(root / "fifo")


async def test_no_spelling_of_a_path_reaches_outside_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    hostile_tree(root)
    (root / ".rshub").mkdir()
    async with in_process_source(root, root / ".rshub" / "source.json") as source:
        assert sorted(source.runtime.inventory.files) == ["a.txt", "sub/b.txt"]
        listed = set(tree(root).values())
        async with Watchdog() as dog:
            for target in NAMED:
                status, body = await raw_get(source.port, target)
                assert status in (400, 404), (target, status, body[:200])
                assert SECRET not in body and b"root:" not in body, target
            # Spellings of listed files are the files.
            for target, data in [
                ("/files/a.txt", b"a\n"),
                ("/files/%61.txt", b"a\n"),
                ("/files/sub%2Fb.txt", b"b\n"),
            ]:
                assert await raw_get(source.port, target) == (200, data), target
            # A seeded fuzz of fragments: each answer is a 4xx, or a listed file's bytes.
            rng = random.Random(1729)
            fragments = [
                "..", "%2e%2e", "%2E.", ".%2e", "/", "%2f", "%2F", "\\", "%5c", "etc",
                "passwd", "fifo", "sub", "a.txt", "b.txt", ".rshub", "%00", "%", "%zz",
                "~", ";", "?x=..", "#", "%252e", "source.json", "//",
            ]  # fmt: skip
            for _ in range(400):
                target = "/files/" + "".join(rng.choices(fragments, k=rng.randint(1, 8)))
                status, body = await raw_get(source.port, target.replace("#", "%23"))
                assert status in (200, 400, 404), (target, status)
                assert SECRET not in body and b"root:" not in body, target
                if status == 200:
                    assert body in listed, target
        await dog.sockets_back()


async def test_a_directory_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "passwd").write_text("mine\n")
    async with in_process_source(root, tmp_path / "state.json") as source:
        assert "conf/passwd" in source.runtime.inventory.files
        async with Watchdog() as dog:
            # Swapped before the watcher's event is handled: the listed key now leads
            # through a link to /etc.
            os.rename(root / "conf", root / "conf.old")
            os.symlink("/etc", root / "conf")
            status, body = await raw_get(source.port, "/files/conf/passwd")
            assert status == 404 and b"root:" not in body
            await wait_for(lambda: "conf/passwd" not in source.runtime.inventory.files, 20)
            assert "conf.old/passwd" in source.runtime.inventory.files
        await dog.sockets_back()


async def test_a_file_deleted_while_it_is_served_is_served_whole(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    root.mkdir()
    data = os.urandom(1 << 20) * 24  # 24 MiB: many sends
    (root / "big.bin").write_bytes(data)
    async with in_process_source(root, tmp_path / "state.json") as source:
        async with Watchdog() as dog, aiohttp.ClientSession() as session:
            async with session.get(f"{source.url}/files/big.bin") as resp:
                assert resp.status == 200
                assert resp.content_length == len(data)
                first = await resp.content.readexactly(1 << 16)
                (root / "big.bin").unlink()
                rest = await resp.read()
            assert hashlib.sha256(first + rest).digest() == hashlib.sha256(data).digest()
            await wait_for(lambda: not source.runtime.inventory.files, 20)
            async with session.get(f"{source.url}/files/big.bin") as resp:
                assert resp.status == 404
        await dog.sockets_back()


async def test_files_deleted_or_rewritten_while_hashed_are_left_out_or_hashed_whole(
    tmp_path: Path,
) -> None:
    """``scan`` in a thread while another thread deletes and rewrites the files it reads:
    each file is either missing from the result or listed with the digest of bytes it
    really held whole; never an error."""
    root = tmp_path / "dir"
    root.mkdir()
    versions: dict[str, set[str]] = {}
    for i in range(12):
        data = bytes([i]) * (3 << 20)
        (root / f"f{i}").write_bytes(data)
        versions[f"f{i}"] = {hashlib.sha256(data).hexdigest()}
    rewritten = bytes([255]) * (2 << 20)
    for name in versions:
        # Rewriting truncates first: the empty file is a state it held whole, too.
        versions[name] |= {hashlib.sha256(rewritten).hexdigest(), hashlib.sha256().hexdigest()}
    stop = threading.Event()

    def meddle() -> None:
        for i in range(12):
            if stop.is_set():
                return
            path = root / f"f{i}"
            if i % 2:
                path.unlink()
            else:
                path.write_bytes(rewritten)

    async with Watchdog():
        meddler = threading.Thread(target=meddle)
        meddler.start()
        try:
            found = await asyncio.to_thread(scan, str(root), "", {})
        finally:
            stop.set()
            meddler.join(10)
    for key, facts in found.items():
        assert facts.sha256 in versions[key], key
        assert facts.length in (3 << 20, 2 << 20, 0)


async def test_a_large_directory_is_taken_in_without_stalling_the_loop(tmp_path: Path) -> None:
    """5,000 files hashed, compared, recorded and saved at start, then 1,000 changed at
    once: the Source's event loop never stalls (the watchdog's 100 ms), its documents
    answer meanwhile, and the lists end complete."""
    root = tmp_path / "dir"
    for i in range(5000):
        path = root / f"d{i % 50:02d}" / f"f{i:04d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"{i}\n".encode() * 200)
    async with Watchdog() as dog:
        async with in_process_source(root, tmp_path / "state.json") as source:
            inventory = source.runtime.inventory
            assert len(inventory.files) == 5000
            async with aiohttp.ClientSession() as session:

                def rewrite() -> None:  # in a thread: the test's own writes are no stall
                    for i in range(0, 5000, 5):
                        (root / f"d{i % 50:02d}" / f"f{i:04d}.txt").write_text("changed\n")

                await asyncio.to_thread(rewrite)

                async def recorded() -> bool:
                    async with session.get(f"{source.url}/capabilitylist.xml") as resp:
                        assert resp.status == 200
                    return len(inventory.history) == 6000

                await wait_for(recorded, timeout=30, interval=0.05)
                async with session.get(f"{source.url}/resourcelist.xml") as resp:
                    assert (await resp.read()).count(b"<url>") == 5000
        await dog.sockets_back()
