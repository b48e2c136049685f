"""One publish's policy, whichever HTTP path carries it: who may publish, which bodies are
accepted, the one way into the store, the answer and its metrics.

aiohttp's handler (:mod:`hub.web.publish`) and the lean path (:mod:`hub.web.lean_publish`)
both call :meth:`Publishing.admit` before reading the body and :meth:`Publishing.store`
after parsing it, so a rule changes in one place.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Any

from hub.core import metrics
from hub.core.api_bodies import PublishAccepted
from hub.core.auth import PublisherAuth
from hub.core.dump_links import declared_dumps, holds_packages
from hub.core.exceptions import BadRequest, UnsupportedMediaType
from hub.core.packed import Packed
from hub.core.settings import Settings
from hub.live.content_publication import ContentPublishing
from hub.live.ingest import Ingest
from hub.live.parsing import DocumentParser
from hub.store import dump_links
from hub.store.event_store import Appended

#: Media types of a change notification ("" = no Content-Type); also any ``+xml``.
XML_TYPES = frozenset({"application/xml", "text/xml", "application/octet-stream", ""})
_MAX_IDEMPOTENCY_KEY = 200


def check_content_type(ctype: str) -> None:
    """``ctype``: the request's media type, lower case, without parameters ("" if none)."""
    if ctype in XML_TYPES or ctype.endswith("+xml"):
        return
    raise UnsupportedMediaType(
        f"a change notification must be XML (application/xml), got Content-Type {ctype!r}"
    )


def idempotency_key(given: str | None) -> str | None:
    """The request's ``Idempotency-Key`` header, checked; None without one."""
    if given is None:
        return None
    key = given.strip()
    if not key or len(key) > _MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise BadRequest(f"Idempotency-Key must be 1-{_MAX_IDEMPOTENCY_KEY} printable characters")
    return key


@dataclass(frozen=True, slots=True)
class Publishing:
    """What a publish needs: who may publish, the parser, and the one way into the store
    and the live feeds."""

    settings: Settings
    auth: PublisherAuth
    parser: DocumentParser
    ingest: Ingest
    #: Plain WebSub topics' publishes (their content, any type), when any are declared.
    contents: ContentPublishing | None = None

    def plain(self, topic: str, topic_url: str) -> bool:
        """Whether ``topic`` (at ``topic_url``) is a plain WebSub topic, whose publishes
        are its content (:mod:`hub.live.content_publication`), not change notifications."""
        return self.contents is not None and self.contents.covers(topic, topic_url)

    def admit(
        self, topic: str, authorization: str | None, ctype: str, given_key: str | None
    ) -> str | None:
        """Everything decided from the request head, before its body is read: raises the
        request's 4xx, else returns its checked Idempotency-Key (or None)."""
        self.auth.check(topic, authorization)
        check_content_type(ctype)
        return idempotency_key(given_key)

    async def store(
        self, topic: str, body: bytes, changes: Packed, key: str | None
    ) -> PublishAccepted:
        """Store the parsed ``changes`` of ``body``; the 202's JSON answer. The packages of a
        ``changedump-notification`` keep the dumps its Source declares (the lean publish
        leaves such a publish to this path: :func:`hub.core.dump_links.holds_packages`)."""
        stored = await self.ingest.append(
            topic, changes, digest=_digest(body, key), idempotency_key=key
        )
        if holds_packages(changes) and not stored.replayed:
            links = declared_dumps(body)
            if links:
                await dump_links.declare(self.ingest.store.redis, topic, links)
        return _answer(topic, body, stored)

    def store_now(
        self, topic: str, body: bytes, changes: Packed, key: str | None
    ) -> asyncio.Future[Any] | None:
        """:meth:`store` begun without a coroutine (the lean publish): the store's call
        under way, which :meth:`stored` reads once done; None when only :meth:`store` can
        (the topic's first publish in this process)."""
        ingest = self.ingest
        return ingest.store.append_now(
            topic, changes, _digest(body, key), key, ingest.feeds.own_node
        )

    def stored(
        self,
        pending: asyncio.Future[Any],
        topic: str,
        body: bytes,
        changes: Packed,
        key: str | None,
    ) -> tuple[PublishAccepted, Appended] | None:
        """The 202's JSON answer once :meth:`store_now`'s call is done (raising its error
        as :meth:`store` does), and what was stored, which the caller hands to the live
        feed (:meth:`Ingest.appended`) once it has answered; None when nothing ran (Redis
        had not loaded the script): :meth:`store` stores it then."""
        stored = self.ingest.store.appended(pending, changes, _digest(body, key), key)
        if stored is None:
            return None
        return _answer(topic, body, stored), stored


def _digest(body: bytes, key: str | None) -> str:
    # The digest only matters to tell a retry from a reuse of its Idempotency-Key.
    return hashlib.sha256(body).hexdigest() if key is not None else ""


def _answer(topic: str, body: bytes, stored: Appended) -> PublishAccepted:
    metrics.published(len(body), len(stored.ids), stored.replayed)
    return {
        "topic": topic,
        "accepted": len(stored.ids),
        "ids": stored.ids,
        "replayed": stored.replayed,
    }
