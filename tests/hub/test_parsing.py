"""hub.live.parsing: large documents parse in worker processes, with the same results and errors."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hub.core.events import changes_from_document
from hub.core.exceptions import BadRequest
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
