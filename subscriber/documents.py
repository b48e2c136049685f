"""Fetching ResourceSync documents with conditional GET (ETag / If-Modified-Since).

:class:`DocumentClient` remembers each URL's validators and, for documents it is asked to
keep (indexes, Capability Lists), the parsed document, so an unchanged index costs a 304
and no parsing. Change List pages are not kept: a 304 there means "nothing new".
"""

from __future__ import annotations

from typing import NamedTuple

import aiohttp

from resourcesync import Document, DocumentError, parse

from .exceptions import SourceError

__all__ = ["DocumentClient", "Fetched"]

#: Largest document accepted, as in the ``resourcesync`` parser (50,000 entries fit).
MAX_DOCUMENT_BYTES = 256 * 2**20


class Fetched(NamedTuple):
    #: The document; ``None`` when unchanged and not kept.
    doc: Document | None
    #: False when the server answered 304 Not Modified.
    changed: bool


class _Cached(NamedTuple):
    etag: str | None
    last_modified: str | None
    doc: Document | None


class DocumentClient:
    def __init__(self, session: aiohttp.ClientSession, *, timeout: float = 30.0) -> None:
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._cache: dict[str, _Cached] = {}

    def forget(self, url: str) -> None:
        self._cache.pop(url, None)

    async def get(self, url: str, *, keep: bool = False) -> Fetched:
        """GET and parse ``url``, conditionally if it was fetched before.

        Raises:
            SourceError: HTTP error, unreachable, or not a ResourceSync document.
        """
        cached = self._cache.get(url)
        headers = {"Accept-Encoding": "gzip"}
        if cached is not None:
            if cached.etag:
                headers["If-None-Match"] = cached.etag
            if cached.last_modified:
                headers["If-Modified-Since"] = cached.last_modified
        try:
            async with self.session.get(url, headers=headers, timeout=self.timeout) as resp:
                if resp.status == 304 and cached is not None:
                    return Fetched(cached.doc, False)
                if resp.status != 200:
                    raise SourceError(f"GET {url}: HTTP {resp.status}")
                body = await resp.read()
                etag = resp.headers.get("ETag")
                last_modified = resp.headers.get("Last-Modified")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise SourceError(f"GET {url}: {exc or type(exc).__name__}") from exc
        try:
            doc = parse(body, max_bytes=MAX_DOCUMENT_BYTES, validate=False)
        except DocumentError as exc:
            raise SourceError(f"GET {url}: {exc}") from exc
        if etag or last_modified:
            self._cache[url] = _Cached(etag, last_modified, doc if keep else None)
        return Fetched(doc, True)

    async def fetch(self, url: str) -> Document:
        """GET ``url`` and return the document, from the cache if unchanged."""
        result = await self.get(url, keep=True)
        if result.doc is None:
            self.forget(url)
            result = await self.get(url, keep=True)
        assert result.doc is not None
        return result.doc
