"""hub.live.parsing: large documents parse in worker processes, with the same results and errors."""

from __future__ import annotations

import gc
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import hub
from hub.core.events import changes_from_document
from hub.core.exceptions import BadRequest, ServiceUnavailable
from hub.core.packed import pack
from hub.live.parsing import DocumentParser
from resourcesync import LimitExceededError, Limits, ParseError, ValidationError
from tests.support import changes, notification


@pytest.fixture(params=["process", "thread"])
async def parser(request: pytest.FixtureRequest) -> AsyncIterator[DocumentParser]:
    parser = DocumentParser(
        max_bytes=1 << 20, limits=Limits(), inline_bytes=1024, workers=1, kind=request.param
    )
    yield parser
    await parser.close()


async def test_a_large_document_parses_in_the_pool_like_inline(parser: DocumentParser) -> None:
    body = notification(changes(100))
    assert len(body) > parser.inline_bytes
    expected = changes_from_document(body, 1 << 20)
    assert await parser.changes(body) == expected
    assert await parser.packed(body) == pack(expected)


@pytest.mark.parametrize(
    "body,error,says",
    [
        (b"<not-xml" + b" " * 2000, ParseError, "not well-formed"),
        (
            notification(changes(30)).replace(
                b'change="updated"/>',
                b'change="updated" ' + b" ".join(b'a%d="v"' % i for i in range(100)) + b"/>",
                1,
            ),
            LimitExceededError,
            "max_attributes",
        ),
        (notification(changes(30), capability="resourcelist"), ValidationError, "at-required"),
        (notification([]) + b"<!--" + b"x" * 2000 + b"-->", BadRequest, "no changes"),
    ],
)
async def test_errors_in_a_worker_come_back_as_themselves(
    parser: DocumentParser, body: bytes, error: type[Exception], says: str
) -> None:
    assert len(body) > parser.inline_bytes
    with pytest.raises(error, match=says):
        await parser.packed(body)


async def test_parse_worker_processes_tune_their_collector_as_the_hub_does() -> None:
    """resourcesync no longer pauses the GC per parse; the hub's worker processes get the
    hub's young threshold once, at their start (hub.core.collector)."""
    parser = DocumentParser(
        max_bytes=1 << 20, limits=Limits(), inline_bytes=0, workers=1, gc_young_threshold=12_345
    )
    try:
        threshold = await parser.run(gc.get_threshold)
    finally:
        await parser.close()
    assert threshold[0] == 12_345


def test_only_the_collector_module_touches_the_gc() -> None:
    """The hub tunes the GC in one place (hub.core.collector), and nowhere else."""
    root = Path(hub.__file__).parent
    touching = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(
            r"^\s*import gc\b|\bgc\.(collect|freeze|disable|enable|set_threshold)\(",
            path.read_text(),
            re.M,
        )
    )
    assert touching == ["core/collector.py"]


async def test_a_worker_that_dies_fails_its_request_with_503_and_the_pool_is_rebuilt() -> None:
    # The pool (and its multiprocessing) is made at the first large document; a worker killed
    # under a request fails that request alone, named, and the next one gets a new pool.
    parser = DocumentParser(max_bytes=1 << 20, limits=Limits(), inline_bytes=0, workers=1)
    body = notification(changes(3))
    try:
        pid = await parser.run(os.getpid)
        assert pid != os.getpid()
        with pytest.raises(ServiceUnavailable, match="the document parser failed"):
            await parser.run(os.kill, pid, signal.SIGKILL)
        assert await parser.packed(body) == pack(changes_from_document(body, 1 << 20))
        assert await parser.run(os.getpid) not in (pid, os.getpid())
    finally:
        await parser.close()
