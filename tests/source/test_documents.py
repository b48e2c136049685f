"""``rshub source``'s documents, read as a Destination reads them: each one parses and
validates against Z39.99, lists every file with its true hash, length and type, pages past
its limits (a Resource List Index, Change List pages), and the reference client
(``resync-sync``) baselines, follows the Change Lists and audits its mirror IN SYNC."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from resourcesync import (
    CapabilityList,
    Change,
    ChangeList,
    ChangeListIndex,
    Document,
    ResourceList,
    ResourceListIndex,
    SourceDescription,
    parse,
)
from source.documents import Site
from source.tree import FileFacts
from tests.commands import Command
from tests.source.support import in_process_source, resync_sync, tree
from tests.support import TIME_SCALE, wait_for

pytestmark = pytest.mark.timeout(240)


async def get_doc(session: aiohttp.ClientSession, url: str) -> Document:
    async with session.get(url) as resp:
        assert resp.status == 200, (url, resp.status)
        assert resp.content_type == "application/xml"
        return parse(await resp.read(), validate=True)


def links(doc: Document) -> dict[str, str]:
    return {ln.rel: ln.href for ln in doc.links}


def fill(root: Path, count: int) -> None:
    for i in range(count):
        path = root / f"d{i % 4}" / f"r{i:04d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"resource {i}\n".encode() * (i % 9 + 1))
    (root / "picture.png").write_bytes(bytes(range(256)) * 3)
    (root / "with space.html").write_text("<p>a space</p>")


async def test_every_document_validates_and_lists_every_file_truly(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    root = tmp_path / "dir"
    fill(root, 120)
    os.symlink("/etc/passwd", root / "passwd")  # never listed
    async with in_process_source(
        root, tmp_path / "state.json", resourcelist_entries=50, changelist_entries=40
    ) as source:
        base = source.url
        description = await get_doc(session, f"{base}/.well-known/resourcesync")
        assert isinstance(description, SourceDescription)
        [capabilities_url] = [e.loc for e in description.entries]
        capabilities = await get_doc(session, capabilities_url)
        assert isinstance(capabilities, CapabilityList)
        assert links(capabilities)["up"] == f"{base}/.well-known/resourcesync"
        offered = {str(e.md.capability): e.loc for e in capabilities.entries if e.md}
        assert set(offered) == {"resourcelist", "changelist"}

        index = await get_doc(session, offered["resourcelist"])
        assert isinstance(index, ResourceListIndex)  # 122 resources, 50 a page
        assert index.md.at is not None
        pages = [e.loc for e in index.entries]
        assert len(pages) == 3 and pages == sorted(pages)
        listed: dict[str, tuple[str, int, str]] = {}
        for url in pages:
            page = await get_doc(session, url)
            assert isinstance(page, ResourceList)
            assert links(page) == {"up": capabilities_url, "index": offered["resourcelist"]}
            for entry in page.entries:
                assert entry.md is not None and entry.lastmod is not None
                assert entry.md.hash and entry.md.length is not None and entry.md.type
                listed[entry.loc] = (entry.md.hash, entry.md.length, entry.md.type)
        files = tree(root)
        assert len(listed) == len(files) == 122
        for name, data in files.items():
            loc = f"{base}/files/{name.replace(' ', '%20')}"
            digest, length, kind = listed[loc]
            assert digest == (
                f"md5:{hashlib.md5(data).hexdigest()} sha-256:{hashlib.sha256(data).hexdigest()}"
            )
            assert length == len(data)
            async with session.get(loc) as resp:
                assert resp.status == 200 and await resp.read() == data
                assert resp.content_type == kind
        assert listed[f"{base}/files/picture.png"][2] == "image/png"

        # 122 creations at start, then 10 deletions: 132 changes, 40 a page.
        for i in range(10):
            (root / "d0" / f"r{i * 4:04d}.txt").unlink()
        await wait_for(lambda: len(source.runtime.inventory.history) == 132, timeout=20)
        changelists = await get_doc(session, offered["changelist"])
        assert isinstance(changelists, ChangeListIndex)
        seen: list[tuple[str, Change]] = []
        last_until: datetime | None = None
        for n, entry in enumerate(changelists.entries):
            assert entry.md is not None and entry.md.from_ is not None
            page = await get_doc(session, entry.loc)
            assert isinstance(page, ChangeList)
            assert links(page) == {"up": capabilities_url, "index": offered["changelist"]}
            assert page.md.from_ == entry.md.from_ and page.md.until == entry.md.until
            if last_until is not None:
                assert page.md.from_ == last_until  # contiguous
            closed = n < 3
            assert (page.md.until is not None) == closed
            last_until = page.md.until
            for change in page.entries:
                assert change.lastmod is not None and change.lastmod >= page.md.from_
                assert page.md.until is None or change.lastmod <= page.md.until
                assert change.change is not None
                seen.append((change.loc, change.change))
        assert len(changelists.entries) == 4
        assert [c for _, c in seen].count(Change.CREATED) == 122
        assert [c for _, c in seen].count(Change.DELETED) == 10

        # Conditional GET: the same version answers 304.
        async with session.get(offered["changelist"]) as resp:
            etag = resp.headers["ETag"]
        async with session.get(offered["changelist"], headers={"If-None-Match": etag}) as resp:
            assert resp.status == 304


def test_a_resource_list_index_begins_past_50000_resources() -> None:
    site = Site("http://127.0.0.1:1")
    facts = FileFacts(1, 0, 1, "0" * 32, "0" * 64)
    files = [(f"r{i:06d}", facts) for i in range(50_001)]
    at = datetime.now(UTC)
    whole = parse(site.resource_list(files[:50_000], at))
    assert isinstance(whole, ResourceList) and len(whole.entries) == 50_000
    index = parse(site.resource_list(files, at))
    assert isinstance(index, ResourceListIndex)
    assert [e.loc for e in index.entries] == [
        "http://127.0.0.1:1/resourcelist/00000000.xml",
        "http://127.0.0.1:1/resourcelist/00000001.xml",
    ]
    last = parse(site.resource_list_page(files, 1, at))
    assert [e.loc for e in last.entries] == ["http://127.0.0.1:1/files/r050000"]


def as_mirrored(files: dict[str, bytes]) -> dict[str, bytes]:
    """What a mirror holds: resync keeps a URI's path as it is, percent-encoding included;
    rshub sync re-encodes it canonically, a space as ``%20`` too (docs/subscriber.md)."""
    return {name.replace(" ", "%20"): data for name, data in files.items()}


async def test_resync_baselines_follows_and_audits_in_sync(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    fill(root, 60)
    dest, work = tmp_path / "mirror", tmp_path / "work"
    dest.mkdir()
    work.mkdir()
    async with in_process_source(
        root, tmp_path / "state.json", resourcelist_entries=25, changelist_entries=7
    ) as source:
        base = source.url
        common = ["--noauth", "--sitemap", f"{base}/resourcelist.xml"]
        mapping = f"{base}/files={dest}"
        code, out = await resync_sync(work, "--baseline", *common, mapping)
        assert code == 0 and "FatalError" not in out, out
        assert tree(dest) == as_mirrored(tree(root))

        (root / "d1" / "r0001.txt").write_text("updated\n")
        (root / "d2" / "r0002.txt").unlink()
        (root / "new.txt").write_text("created\n")
        shutil.move(root / "d3", root / "d3-renamed")
        history = source.runtime.inventory.history
        await wait_for(
            lambda: (
                {(c.key, c.change) for c in history}
                >= {
                    ("d1/r0001.txt", Change.UPDATED),
                    ("d2/r0002.txt", Change.DELETED),
                    ("new.txt", Change.CREATED),
                    ("d3/r0003.txt", Change.DELETED),
                    ("d3-renamed/r0003.txt", Change.CREATED),
                }
            ),
            timeout=20,
        )
        code, out = await resync_sync(
            work,
            "--incremental",
            "--delete",
            *common,
            "--changelist-uri",
            f"{base}/changes.xml",
            mapping,
        )
        assert code == 0 and "FatalError" not in out, out
        assert tree(dest) == as_mirrored(tree(root))
        code, out = await resync_sync(work, "--audit", *common, mapping)
        assert code == 0 and "IN SYNC" in out, out


async def test_resync_explorer_walks_the_source_from_its_description(tmp_path: Path) -> None:
    """The reference client's explorer, answered as a person would at its prompts: the
    Source Description, then the Capability List, then the Resource List, each parsed (the
    explorer says what it could not read, and then no "Parsed")."""
    root = tmp_path / "dir"
    fill(root, 5)
    async with in_process_source(root, tmp_path / "state.json") as source:
        explorer = str(Path(sys.executable).with_name("resync-explorer"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            explorer,
            "--sitemap",
            f"{source.url}/.well-known/resourcesync",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        out, _ = await asyncio.wait_for(proc.communicate(b"1\n1\nq\n"), 60 * TIME_SCALE)
    text = out.decode(errors="replace")
    assert proc.returncode == 0 and "Error" not in text, text
    assert "Parsed description document with 1 entries" in text, text
    assert "Parsed capabilitylist document with" in text, text
    assert f"[1] {source.url}/resourcelist.xml" in text, text
    files = sorted(tree(root))
    assert f"Parsed resourcelist document with {len(files)} entries" in text, text
    for path in files:
        assert f"{source.url}/files/{quote(path)}" in text, (path, text)


async def test_rshub_sync_polls_the_source_itself(tmp_path: Path) -> None:
    """No hub: ``rshub sync --source`` finds the Resource List and the Change List Index
    through the Source Description, baselines, then follows the closed and open pages."""
    root = tmp_path / "dir"
    fill(root, 30)
    dest = tmp_path / "mirror"
    async with in_process_source(root, tmp_path / "state.json", changelist_entries=4) as source:
        mirrored = dest / "http" / f"127.0.0.1_{source.port}" / "files"
        args = ["sync", "--source", f"{source.url}/.well-known/resourcesync", "--dest", str(dest)]

        async def once() -> None:
            cmd = await Command(*args, "--via", "poll", "--once").start()
            assert await cmd.wait(60) == 0, cmd.stderr

        await once()
        assert tree(mirrored) == as_mirrored(tree(root))
        (root / "d0" / "r0000.txt").write_text("updated\n")
        (root / "d1" / "r0001.txt").unlink()
        (root / "added.txt").write_text("added\n")
        history = source.runtime.inventory.history
        await wait_for(lambda: len(history) == 32 + 3, timeout=20)
        await once()
        assert tree(mirrored) == as_mirrored(tree(root))
