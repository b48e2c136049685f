"""aiohttp's side of the header rule (:mod:`hub.core.request_headers`).

:func:`check` runs first in the error mapping (:func:`hub.web.app.error_handling`), before
any handler reads a header. ``Expect`` is the exception: aiohttp answers it before any
middleware runs, and its own answer to an unknown expectation quotes the value (a 500 with a
traceback when that is not text). :func:`expectations` wraps the server's request handler:
a request whose ``Expect`` is anything but ``100-continue`` goes on without it, carrying
its refusal (400 when the value cannot be read, 417 for an expectation the hub does not
know), which :func:`check` raises, so it is answered, observed and logged as every refusal
is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from aiohttp import web
from multidict import CIMultiDict

from hub.core import request_headers
from hub.core.exceptions import BadRequest, ExpectationFailed, RequestError

__all__ = ["check", "expectations"]

RequestHandler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

_REFUSED = web.RequestKey("rshub_expect_refused", RequestError)
_CONTINUE = "100-continue"


def check(request: web.Request) -> None:
    """400 naming the first header the hub reads that it cannot; an ``Expect`` refused."""
    refused = request.get(_REFUSED)
    if refused is not None:
        raise refused
    request_headers.check(request.headers.items())


def expectations(handler: RequestHandler) -> RequestHandler:
    """``handler`` (the server's), with ``Expect`` refused by the hub's rule, not aiohttp."""

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        expect = request.headers.get("Expect")
        if expect is None or expect.lower() == _CONTINUE:
            return await handler(request)
        refused: RequestError
        try:
            value = request_headers.decoded("Expect", expect)
            refused = ExpectationFailed(
                f"the Expect header asks for {value[:100]!r}: the hub knows only {_CONTINUE}"
            )
        except BadRequest as exc:
            refused = exc
        # Refused whatever else it carries, so only what a clone can encode goes along.
        headers = CIMultiDict(
            (name, value)
            for name, value in request.headers.items()
            if name.lower() != "expect" and request_headers.readable(value)
        )
        unexpected = request.clone(headers=headers)
        unexpected[_REFUSED] = refused
        response = await handler(unexpected)
        if not response.prepared:  # its own request's signals (the request id, say)
            with contextlib.suppress(ConnectionError):  # gone: aiohttp's to end quietly
                await response.prepare(unexpected)
        return response

    return handle
