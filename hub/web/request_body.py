"""Request bodies: received within the body deadline, decoded within the route's limit.

Every handler that reads a body reads it here, and nowhere else. The server takes bodies as
they were sent (``auto_decompress=False``, :func:`hub.web.app.start`): a body with a
``Content-Encoding`` is decoded by :func:`hub.core.content_coding.decode` in a worker thread,
which stops one byte past the route's limit. So an encoded body costs the event loop nothing,
however far it would inflate, and a route that never reads its body never decodes it.

One thread decodes, for the whole process (:data:`DECODER`): bodies wait their turn rather
than take every core. With four decoding at once on two cores, the loop thread waited for a
core and other clients' ``/healthz`` p99 went from ~25 to 40-110 ms; decoding one at a time
leaves the loop a core.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qsl

from aiohttp import web

from hub.core import content_coding
from hub.core.exceptions import BadRequest, RequestTimeout
from hub.core.settings import Settings

__all__ = ["DECODER", "REQUEST_BEGAN", "decoder", "read_body", "read_form"]

#: The app's one body-decoding thread (made and shut down by the app's lifecycle).
DECODER = web.AppKey("body_decoder", ThreadPoolExecutor)
#: When the request's first byte came (the loop's clock), where the hub saw it before
#: aiohttp did: a request the lean paths read first and handed over
#: (hub.web.listener.ConnectionGuard.dispatched). Without it, the request's head is
#: complete when its handler runs: aiohttp tells of a request no earlier.
REQUEST_BEGAN = web.RequestKey("rshub_request_began", float)


def decoder() -> ThreadPoolExecutor:
    """A decoding thread for :data:`DECODER`."""
    return ThreadPoolExecutor(1, thread_name_prefix="rshub-body-decoder")


_FORM = "application/x-www-form-urlencoded"


async def read_body(request: web.Request, settings: Settings, *, limit: int | None = None) -> bytes:
    """The request body, decoded; 408 when it takes longer than ``body_timeout_seconds``,
    413 when it is (or decodes to) more than ``limit`` bytes (``max_body_bytes`` unless
    given), 415 or 400 for a ``Content-Encoding`` that the hub does not decode or the body
    does not match."""
    limit = settings.max_body_bytes if limit is None else min(limit, settings.max_body_bytes)
    raw = await _received(request, settings)
    coding = request.headers.get("Content-Encoding", "")
    if not content_coding.codings(coding):  # none, or identity: only the limit to check
        return content_coding.decode(raw, "", limit)
    loop = asyncio.get_running_loop()
    decoding = request.app[DECODER]
    return await loop.run_in_executor(decoding, content_coding.decode, raw, coding, limit)


async def read_form(
    request: web.Request, settings: Settings, *, limit: int | None = None
) -> list[tuple[str, str]]:
    """A urlencoded form's fields in order (a name may repeat), read as :func:`read_body`
    reads a body; 400 when its bytes are not text in its charset (UTF-8 unless said)."""
    body = await read_body(request, settings, limit=limit)
    charset = request.charset or "utf-8"
    try:
        text = body.rstrip().decode(charset)
    except (UnicodeDecodeError, LookupError):
        raise BadRequest(f"the form is not valid {ascii(charset.upper())[1:-1]}") from None
    return parse_qsl(text, keep_blank_values=True, encoding=charset)


async def _received(request: web.Request, settings: Settings) -> bytes:
    """The body, received within the one body deadline: ``body_timeout_seconds`` from the
    request's start (:data:`REQUEST_BEGAN`), so that a request the lean paths waited on
    before handing it over does not wait the whole time again."""
    if request.content.is_eof():  # all received (a small publish): nothing to wait for
        return await request.read()
    timeout = settings.body_timeout_seconds
    began = request.get(REQUEST_BEGAN)
    left = timeout if began is None else began + timeout - asyncio.get_running_loop().time()
    try:
        if left <= 0:
            raise TimeoutError
        async with asyncio.timeout(left):
            return await request.read()
    except TimeoutError:
        raise RequestTimeout(
            f"the request body was not received within {timeout:g} s (RSHUB_BODY_TIMEOUT_SECONDS)"
        ) from None
