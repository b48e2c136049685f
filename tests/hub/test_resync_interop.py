"""Interop with the reference client: ``resync-sync`` baselines from the hub's Resource List
and updates from its Change List, copying from a local Source, until the copy equals it.

Quirks of resync handled here: it keeps its state file (``.resync-client-status.cfg``) in
the working directory, so each run uses a temporary one; the Source's resources live on
another host:port than the hub's documents, so ``--noauth`` lifts its same-server check; its
incremental mode starts from the latest ``lastmod`` of the baseline (then keeps changes at
or after it, by ``rs:md/@datetime`` in 1.1 and by ``lastmod`` in 1.0), and reads an index's
pages in sorted URI order, which is why page URLs are zero-padded. Its ``--incremental``
reads one Change List per run (an index's entries have no ``change``, which it rejects), so
the test follows the index page by page. ``--spec-version 1.0`` is not usable against the
hub: resync then records the newest ``rs:md/@datetime`` as its position but filters the next
run by ``lastmod``, which here is the publisher's (possibly earlier) time, so it would skip
changes; see docs/polling.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from resourcesync import parse
from tests.conftest import Hub
from tests.support import free_port, notification

# Run through the interpreter: resync installs a plain script whose ``#!`` line pip copies
# verbatim, which the kernel cannot follow when the venv's path holds a space.
RESYNC = (sys.executable, str(Path(sys.executable).with_name("resync-sync")))


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"changelist_page_entries": 2}  # several pages, read through the index


@pytest.fixture
async def source(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """A plain static web server on 127.0.0.1 serving the Source's files."""
    root = tmp_path / "source"
    root.mkdir()
    app = web.Application()
    app.router.add_static("/", root)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}", root
    await runner.cleanup()


def _change(base: str, root: Path, name: str, change: str) -> dict[str, Any]:
    path = root / name
    item: dict[str, Any] = {"loc": f"{base}/{name}", "change": change}
    if change == "deleted":
        item["lastmod"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    else:
        data = path.read_bytes()
        mtime = datetime.fromtimestamp(int(path.stat().st_mtime), UTC)
        item.update(
            lastmod=mtime.strftime("%Y-%m-%dT%H:%M:%SZ"),
            length=len(data),
            hash="md5:" + hashlib.md5(data).hexdigest(),
        )
    return item


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


async def _resync(work: Path, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *RESYNC,
        *args,
        cwd=work,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=40)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    return text


async def test_resync_baseline_then_incremental(
    hub: Hub, source: tuple[str, Path], tmp_path: Path
) -> None:
    base, root = source
    dest, work = tmp_path / "dest", tmp_path / "work"
    dest.mkdir()
    work.mkdir()
    (root / "sub").mkdir()
    files = {"a.txt": b"alpha\n", "b.bin": bytes(range(256)) * 40, "sub/c.html": b"<p>c</p>"}
    for name, data in files.items():
        (root / name).write_bytes(data)
    created = [_change(base, root, n, "created") for n in files]
    assert (await hub.publish("site", notification(created))).status == 202

    rl = f"{hub.url}/topics/site/resourcelist.xml"
    async with hub.session.get(rl) as resp:
        snapshot_at = parse(await resp.read()).md.at
    mapping = f"{base}={dest}"
    common = ["--noauth", "--spec-version", "1.1", "--sitemap", rl]
    await _resync(work, "--baseline", *common, mapping)
    assert _tree(dest) == _tree(root)

    (root / "a.txt").write_bytes(b"alpha, edited\n")
    (root / "d.txt").write_bytes(b"delta\n")
    (root / "b.bin").unlink()
    later = [
        _change(base, root, "a.txt", "updated"),
        _change(base, root, "d.txt", "created"),
        _change(base, root, "b.bin", "deleted"),
    ]
    for item in later:  # one notification each
        assert (await hub.publish("site", notification([item]))).status == 202
    # resync reads one Change List per run (it rejects an index: its entries have no
    # `change`), so follow the index: every page not closed before the baseline's `at`.
    async with hub.session.get(f"{hub.url}/topics/site/changelist.xml") as resp:
        index = parse(await resp.read())
    pages = [e.loc for e in index.entries if e.md.until is None or e.md.until > snapshot_at]
    assert len(pages) >= 2
    for page in pages:
        await _resync(work, "--incremental", "--delete", *common, "--changelist-uri", page, mapping)
    assert _tree(dest) == _tree(root)
    assert "d.txt" in _tree(dest) and "b.bin" not in _tree(dest)


async def test_resync_incremental_from_the_topic_uri(
    hub: Hub, source: tuple[str, Path], tmp_path: Path
) -> None:
    """The topic URI (the open page) is a Change List resync can follow directly."""
    base, root = source
    dest, work = tmp_path / "dest", tmp_path / "work"
    dest.mkdir()
    work.mkdir()
    (root / "x.txt").write_bytes(b"x1")
    (root / "y.txt").write_bytes(b"y1")
    first = [_change(base, root, n, "created") for n in ("x.txt", "y.txt")]
    assert (await hub.publish("one", notification(first))).status == 202  # fills page 1
    await _resync(work, "--parse", "--sitemap", f"{hub.url}/topics/one/changelist.xml", base)
    await _resync(work, "--parse", "--sitemap", f"{hub.url}/.well-known/resourcesync", base)
    common = ["--noauth", "--capabilitylist", f"{hub.url}/topics/one/capabilitylist.xml"]
    await _resync(work, "--baseline", *common, f"{base}={dest}")
    assert _tree(dest) == _tree(root)
    await hub.publish(
        "one",
        notification(
            [{"loc": f"{base}/x.txt", "change": "deleted", "lastmod": "2030-01-01T00:00:00Z"}]
        ),
    )
    (root / "x.txt").unlink()
    topic_uri = f"{hub.url}/topics/one"
    out = await _resync(
        work, "--incremental", "--delete", *common, "--changelist-uri", topic_uri, f"{base}={dest}"
    )
    assert _tree(dest) == _tree(root) == {"y.txt": b"y1"}, out
