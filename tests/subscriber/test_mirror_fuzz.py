"""The mirror under hostile changes: named cases and a seeded fuzz, under the watchdog.

A ``loc``, its announced ``length``/``hash`` and the answers of the hosts it names all come
from other parties (the publisher, the Source). Whatever they send, :meth:`Mirror.apply`
returns; nothing is written outside the mirror directory; every problem is said and
counted (``rejected`` or ``failed``); what is written is what the Source served; and the
loop never stalls and no socket is left open. One ``loc`` whose host no lookup can take
once crashed every ``rshub sync`` following the topic.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import aiohttp
import pytest
from aiohttp import web

from subscriber.events import ChangeEvent
from subscriber.mirror import Mirror
from subscriber.paths import RESERVED_PREFIX
from tests.publisher.helpers import serve
from tests.support import free_port
from tests.watchdog import Watchdog

#: Hosts a loc may name besides the Source's own: a closed port, names no lookup can take,
#: names that cannot be a directory, loopback spellings. Only loopback and ``.invalid``.
BAD_HOSTS = [
    "a" * 64 + ".invalid",
    "r..invalid",
    ".invalid",
    "a." * 127 + "invalid",
    "ünï.invalid",
    "exa_mple.invalid",
    "[::1",
    "127.0.0.1:99999",
    "",
]
SEGMENTS = [
    "a", "b.txt", "..", ".", "%2e%2E", "%2F", "", "x" * 300, "ü", RESERVED_PREFIX,
    "q?x=1&y=/z", "f#frag", "a%00b", "%", "a b", "CON", "~", "%ZZ", "\u2028",
]  # fmt: skip
#: The Source's behaviour, by a loc's first path segment.
KINDS = ["ok", "ok", "ok", "gone", "err", "redirect", "redirect-bad", "empty"]


def body_of(path: str) -> bytes:
    return f"resource at {path}".encode()


def source_app() -> web.Application:
    async def answer(request: web.Request) -> web.StreamResponse:
        kind = request.match_info["kind"]
        if kind == "ok":
            return web.Response(body=body_of(request.path))
        if kind == "empty":
            return web.Response(body=b"")
        if kind == "gone":
            return web.Response(status=404)
        if kind == "redirect":
            raise web.HTTPFound(f"/ok{request.path[len('/redirect') :]}")
        if kind == "redirect-bad":
            raise web.HTTPFound(f"http://{'a' * 64}.invalid/x")
        return web.Response(status=500, headers={"Retry-After": "soon"})

    app = web.Application()
    app.router.add_get("/{kind}{rest:.*}", answer)
    return app


@pytest.fixture
async def source() -> AsyncIterator[str]:
    async with serve(source_app()) as base:
        yield base


def random_loc(rng: random.Random, base: str) -> str:
    host = base.split("//", 1)[1] if rng.random() < 0.7 else rng.choice(BAD_HOSTS)
    if rng.random() < 0.05:
        host = f"127.0.0.1:{free_port()}"  # nothing listens
    scheme = rng.choice(["http", "http", "http", "https", "ftp", "HTTP"])
    path = "/".join(rng.choice(SEGMENTS) for _ in range(rng.randint(0, 3)))
    return f"{scheme}://{host}/{rng.choice(KINDS)}/{path}"


def random_event(rng: random.Random, base: str, n: int) -> ChangeEvent:
    loc = random_loc(rng, base)
    try:  # the bytes the Source serves at the loc's path, for a hash and length that match
        data = body_of(unquote(urlsplit(loc).path))
    except ValueError:  # an unbalanced bracket: no path to serve
        data = b""
    return ChangeEvent(
        loc=loc,
        lastmod=f"2026-01-01T00:00:{n % 60:02d}Z",
        change=rng.choice(["created", "updated", "updated", "deleted"]),
        id=f"{n}-0",
        hash=rng.choice([None, f"md5:{hashlib.md5(data).hexdigest()}", "md5:" + "0" * 32]),
        length=rng.choice([None, len(data), 0, -1, 10**12]),
        replayed=rng.random() < 0.1,
    )


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


async def check_mirror(tmp_path: Path, events: list[list[ChangeEvent]], base: str) -> Mirror:
    """Apply ``events`` batch by batch and check what holds whatever they are."""
    root = tmp_path / "mirror"
    said: list[str] = []
    async with aiohttp.ClientSession() as session, Watchdog() as dog:
        mirror = Mirror(root, session, retries=1, timeout=5.0, report=said.append)
        for batch in events:
            await mirror.apply(batch)  # never raises
    await dog.sockets_back()
    stats = mirror.stats
    assert len(stats.problems) == stats.rejected + stats.failed, stats
    assert_contained(tmp_path, root)
    return mirror


def assert_contained(tmp_path: Path, root: Path) -> None:
    """Nothing outside ``root``; inside it, only what the Source served."""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mirror"]
    resolved = root.resolve()
    for path in files_under(root):
        assert resolved in path.resolve().parents
        if RESERVED_PREFIX not in path.relative_to(root).parts:
            data = path.read_bytes()
            assert data.startswith(b"resource at /") or data == b"", path


@pytest.mark.parametrize(
    "loc,says",
    [
        ("http://" + "a" * 64 + ".invalid/ok/x", "not a valid host name"),
        ("http://r..invalid/ok/x", "not a valid host name"),
        ("http://{host}/../../etc/passwd", "rejected"),
        ("http://{host}/ok/%2e%2e/%2e%2e/x", "rejected"),
        ("http://{host}/ok/" + RESERVED_PREFIX + "/state.json", "rejected"),
        ("http://{host}/redirect-bad/x", "failed"),
        ("http://{host}/err/x", "HTTP 500"),
        ("ftp://{host}/ok/x", "rejected"),
    ],
)
async def test_a_hostile_loc_is_one_problem_said(
    source: str, tmp_path: Path, loc: str, says: str
) -> None:
    loc = loc.format(host=source.split("//", 1)[1])
    event = ChangeEvent(loc=loc, lastmod="2026-01-01T00:00:00Z", change="created", id="1-0")
    mirror = await check_mirror(tmp_path, [[event]], source)
    assert mirror.stats.rejected + mirror.stats.failed == 1, mirror.stats
    [problem] = mirror.stats.problems
    assert says in problem and loc[:60] in problem, problem
    assert files_under(tmp_path / "mirror") == []


async def test_fuzz_the_mirror_holds_whatever_the_changes_say(source: str, tmp_path: Path) -> None:
    rng = random.Random(4711)
    events = [random_event(rng, source, n) for n in range(400)]
    batches = [events[i : i + rng.randint(1, 40)] for i in range(0, len(events), 40)]
    mirror = await check_mirror(tmp_path, batches, source)
    stats = mirror.stats
    # The seed reaches every outcome, so none of the checks above holds vacuously.
    assert stats.fetched and stats.rejected and stats.failed and stats.gone, stats
