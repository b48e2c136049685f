"""hub.web.cache.Builds: one build per version however many ask, kept until a newer one;
a reader that bounds its wait gets the earlier version meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from hub.core.exceptions import NotFound
from hub.core.rendering import Rendered
from hub.core.tasks import Tasks
from hub.web.cache import Builds
from tests.support import wait_for


def doc(text: str) -> Rendered:
    return Rendered(text.encode(), b"gz", 0, text)


async def test_concurrent_requests_share_one_build_and_a_gone_reader_does_not_cancel_it() -> None:
    builds = Builds(1 << 20, Tasks("builds"))
    release = asyncio.Event()
    calls = 0

    async def build() -> Rendered:
        nonlocal calls
        calls += 1
        await release.wait()
        return doc("v1")

    first = asyncio.create_task(builds.get("k", "v1", build))
    others = [asyncio.create_task(builds.get("k", "v1", build)) for _ in range(9)]
    await asyncio.sleep(0)
    first.cancel()  # the first reader goes away: the build goes on for the others
    release.set()
    results = await asyncio.gather(*others)
    assert calls == 1 and builds.built == 1
    assert {r.raw for r in results if r is not None} == {b"v1"}
    with pytest.raises(asyncio.CancelledError):
        await first
    # kept: the same version again costs nothing; a new version is built anew
    assert await builds.get("k", "v1", build) is results[0]
    assert builds.cached("k", "v2") is None

    async def build2() -> Rendered:
        return doc("v2")

    assert (await builds.get("k", "v2", build2)) is not None
    assert builds.cached("k", "v1") is None and builds.built == 2


async def test_a_failed_build_fails_every_waiter_and_is_not_kept() -> None:
    builds = Builds(1 << 20, Tasks("builds"))
    gate = asyncio.Event()

    async def build() -> Rendered:
        await gate.wait()
        raise NotFound("withdrawn")

    waiters = [asyncio.create_task(builds.get("k", "v", build)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(o, NotFound) for o in outcomes)
    assert builds.cached("k", "v") is None

    async def good() -> Rendered:
        return doc("ok")

    assert (await builds.get("k", "v", good)) is not None


async def test_the_cache_is_bounded() -> None:
    builds = Builds(10, Tasks("builds"))

    async def build() -> Rendered:
        return doc("12345678")  # 8 + 2 bytes

    for key in ("a", "b"):
        await builds.get(key, "v", build)
    assert builds.cached("a", "v") is None and builds.cached("b", "v") is not None
    shared = Builds(0, Tasks("builds"))
    assert (await shared.get("a", "v", build)) is not None  # shared, never kept
    assert shared.cached("a", "v") is None


async def test_a_bounded_wait_gets_the_earlier_version_while_the_build_goes_on() -> None:
    tasks = Tasks("builds")
    builds = Builds(1 << 20, tasks)
    release = asyncio.Event()

    def slow(text: str) -> Callable[[], Awaitable[Rendered]]:
        async def build() -> Rendered:
            await release.wait()
            return doc(text)

        return build

    with pytest.raises(TimeoutError):  # nothing built before: the caller says "not yet"
        await builds.get("k", "v1", slow("v1"), wait=0.01)
    assert tasks.names() == ["builds/build k"]  # in the owner's group, not a bare task
    release.set()
    first = await builds.get("k", "v1", slow("v1"))
    assert first is not None and first.raw == b"v1"
    release.clear()
    earlier = await builds.get("k", "v2", slow("v2"), wait=0.01)
    assert earlier is first  # v2 is still being built
    release.set()
    assert (await builds.get("k", "v2", slow("v2"))).raw == b"v2"  # type: ignore[union-attr]
    release.clear()
    await builds.get("k", "v3", slow("v3"), wait=0.01)
    await tasks.stop()  # the owner's stop ends the build still waiting
    assert tasks.names() == []


async def test_a_document_too_big_to_keep_is_waited_for_whole() -> None:
    """Nothing earlier can ever be served: after one 'not yet', a reader waits for its
    build rather than being told to come back forever."""
    tasks = Tasks("builds")
    builds = Builds(0, tasks)
    gate = asyncio.Event()

    async def build() -> Rendered:
        await gate.wait()
        return doc("big")

    with pytest.raises(TimeoutError):
        await builds.get("k", "v1", build, wait=0)
    gate.set()
    await wait_for(lambda: not tasks.names())
    gate.clear()
    reader = asyncio.create_task(builds.get("k", "v2", build, wait=0))
    await wait_for(lambda: bool(tasks.names()))
    assert not reader.done()  # waiting for the build, not told to come back
    gate.set()
    assert (await reader).raw == b"big"  # type: ignore[union-attr]
    await tasks.stop()
