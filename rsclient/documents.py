"""Fetching ResourceSync documents with conditional GET (ETag / Last-Modified).

:class:`DocumentClient` remembers each URL's validators and sends them back
(``If-None-Match``, ``If-Modified-Since``), so that an unchanged document costs a
``304 Not Modified`` and no parsing. It keeps the parsed document too when asked
(``keep=True``), which is what a 304 then returns; otherwise a 304 only says "unchanged".

When the validators are remembered is the caller's choice: at once (``remember=True``), or
later with :meth:`DocumentClient.remember`, e.g. only once every change a Change List
lists has been acted on, so that a crash in between re-reads it instead of skipping it.

With a :class:`~rsclient.hub_token.HubToken`, every GET of a document on the hub carries it
(a private topic's documents need it); documents elsewhere are read without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import aiohttp

from resourcesync import Document, DocumentError, parse
from resourcesync.namespaces import MAX_BYTES

from .exceptions import NotResourceSync, SourceError
from .host_names import url_host_problem
from .hub_token import HubToken

__all__ = ["DocumentClient", "Fetched", "Validators"]

_ACCEPT = "application/xml, text/xml;q=0.9, */*;q=0.1"


@dataclass(frozen=True, slots=True)
class Validators:
    """A response's cache validators, to send back on the next GET of the same URL."""

    etag: str | None = None
    last_modified: str | None = None

    def __bool__(self) -> bool:
        return bool(self.etag or self.last_modified)

    def conditions(self) -> dict[str, str]:
        """The conditional request headers these validators make."""
        headers = {}
        if self.etag:
            headers["If-None-Match"] = self.etag
        if self.last_modified:
            headers["If-Modified-Since"] = self.last_modified
        return headers


@dataclass(frozen=True, slots=True)
class Fetched:
    """One GET's outcome."""

    #: The document; ``None`` when unchanged (304) and not kept.
    doc: Document | None
    #: False when the server answered 304 Not Modified.
    changed: bool
    #: The validators the server sent with the document (those sent, on a 304).
    validators: Validators


@dataclass(frozen=True, slots=True)
class _Cached:
    validators: Validators
    doc: Document | None


class DocumentClient:
    """GET and parse ResourceSync documents, conditionally once fetched before.

    ``max_bytes`` bounds a document (more is a :class:`SourceError`); ``timeout`` bounds
    each request, in seconds; ``token`` goes with the requests to the hub. ``session`` may
    be replaced between requests (a caller that opens one per poll): what is remembered
    stays.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        timeout: float = 30.0,
        max_bytes: int = MAX_BYTES,
        token: HubToken | None = None,
    ) -> None:
        self.session = session
        self.token = token
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.max_bytes = max_bytes
        self._cache: dict[str, _Cached] = {}

    def forget(self, url: str) -> None:
        """Drop ``url``'s validators and document: the next GET is unconditional."""
        self._cache.pop(url, None)

    def remember(self, url: str, fetched: Fetched, *, keep: bool = True) -> None:
        """Send ``fetched``'s validators on the next GET of ``url``; with ``keep``, a 304
        then returns ``fetched``'s document. (Nothing to do without validators.)"""
        if fetched.changed and fetched.validators:
            self._cache[url] = _Cached(fetched.validators, fetched.doc if keep else None)

    async def get(self, url: str, *, keep: bool = False, remember: bool = True) -> Fetched:
        """GET and parse ``url``, conditionally if its validators are remembered.

        ``keep`` keeps the parsed document, for a later 304 to return; ``remember=False``
        leaves the validators to a later :meth:`remember`.

        Raises:
            SourceError: an HTTP error, no answer, or not a ResourceSync document.
        """
        problem = url_host_problem(url)
        if problem is not None:  # a link in a Source's document, say: no lookup can take it
            raise SourceError(f"GET {url[:300]}: {problem}")
        cached = self._cache.get(url)
        headers = {"Accept": _ACCEPT, "Accept-Encoding": "gzip"}
        if self.token is not None:
            headers.update(self.token.headers(url))
        if cached is not None:
            headers.update(cached.validators.conditions())
        try:
            async with self.session.get(url, headers=headers, timeout=self.timeout) as resp:
                if resp.status == 304 and cached is not None:
                    return Fetched(cached.doc, False, cached.validators)
                if resp.status != 200:
                    detail = await _error_text(resp)
                    if resp.status in (401, 403) and self.token is not None:
                        detail += self.token.not_sent(url)
                    raise SourceError(f"GET {url}: HTTP {resp.status}{detail}", status=resp.status)
                body = await _read_bounded(resp.content, self.max_bytes + 1)
                validators = Validators(resp.headers.get("ETag"), resp.headers.get("Last-Modified"))
        # UnicodeError: a redirect to a host no lookup can take (the resolver's IDNA step).
        except (TimeoutError, aiohttp.ClientError, OSError, UnicodeError) as exc:
            raise SourceError(f"GET {url}: {type(exc).__name__}: {exc}") from exc
        try:
            # Real Sources are not all strictly valid (a Change List without `from`, say):
            # read leniently; what a change needs is checked by the caller.
            doc = parse(body, max_bytes=self.max_bytes, validate=False)
        except DocumentError as exc:
            raise NotResourceSync(f"{url} is not a ResourceSync document: {exc}") from exc
        fetched = Fetched(doc, True, validators)
        if remember:
            self.remember(url, fetched, keep=keep)
        return fetched

    async def fetch(self, url: str) -> Document:
        """GET ``url`` and return the document, from the cache if unchanged.

        Raises:
            SourceError: as :meth:`get`.
        """
        result = await self.get(url, keep=True)
        if result.doc is None:  # unchanged, yet not kept: ask again, unconditionally
            self.forget(url)
            result = await self.get(url, keep=True)
        if result.doc is None:
            raise SourceError(f"GET {url}: HTTP 304 to an unconditional request")
        return result.doc


async def _read_bounded(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The body up to ``limit`` bytes: enough for the parser to see it is too large.

    (``StreamReader.read(n)`` returns what is buffered, which may be less than the body.)
    """
    body = bytearray()
    async for chunk in content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) >= limit:
            break
    return bytes(body[:limit])


async def _error_text(resp: aiohttp.ClientResponse) -> str:
    """``": <message>"`` from a JSON error body (``{"error": ...}``, as the hub sends)."""
    if resp.content_type != "application/json":
        return ""
    try:
        data = json.loads(await resp.content.read(16 * 1024))
    except (ValueError, aiohttp.ClientError, OSError):
        return ""
    return f": {data['error']}" if isinstance(data, dict) and "error" in data else ""
