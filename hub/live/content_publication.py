"""Publishing to a plain WebSub topic (:mod:`hub.core.topic_content`): the content itself.

Two ways in, as for a ResourceSync topic: the publisher POSTs the content (a fat ping, to
``B/topics/{name}`` or to ``B/`` with ``Link: <topic>; rel="self"``), any ``Content-Type``;
or it pings (``hub.mode=publish``) and the hub fetches the topic URL through the one
outgoing client (:meth:`hub.live.http_client.HttpClient.fetch_content`: the address
rules, no redirects, ``max_body_bytes``, ``verify_timeout`` for the whole answer). A fetched
answer is another party's bytes: its ``Content-Type`` must be one media type of at most
:data:`~hub.core.topic_content.MAX_CONTENT_TYPE_CHARS` characters, it may not be
content-coded (the hub asks for ``identity``), and it may not be empty; anything else is a
``502`` naming the problem, and nothing is stored. A ping whose content is what the topic's
last change already names (same SHA-256, same type) stores nothing.

Storing is :class:`~hub.store.topic_contents.ContentStore.put` (the content), then
:meth:`hub.live.ingest.Ingest.append` (its change): see :mod:`hub.store.topic_contents` for
why in that order.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hub.core import metrics
from hub.core.api_bodies import PublishAccepted
from hub.core.exceptions import BadGateway, BadRequest, Conflict
from hub.core.topic_content import (
    DEFAULT_CONTENT_TYPE,
    PlainTopics,
    TopicContent,
    content_change,
    content_type_problem,
)
from hub.live.http_client import Answer, HttpClient
from hub.live.ingest import Ingest
from hub.store.topic_contents import ContentStore


class ContentPublishing:
    """Plain topics' publishes: :meth:`post` (a fat ping) and :meth:`ping` (a fetch)."""

    def __init__(
        self, plain: PlainTopics, contents: ContentStore, ingest: Ingest, client: HttpClient
    ) -> None:
        self.plain = plain
        self.contents = contents
        self.ingest = ingest
        self.client = client

    def covers(self, topic: str, topic_url: str) -> bool:
        return self.plain.covers(topic, topic_url)

    async def post(
        self,
        topic: str,
        topic_url: str,
        body: bytes,
        content_type: str | None,
        idempotency_key: str | None = None,
    ) -> PublishAccepted:
        """A fat ping: store ``body`` as the topic's content; the 202's JSON answer.
        400 for an empty body or a ``Content-Type`` that is no media type."""
        if not body:
            raise BadRequest("empty body: a plain WebSub topic's publish carries its content")
        content = TopicContent(body, _posted_type(content_type))
        digest = f"{content.digest} {content.content_type}"
        if idempotency_key is not None:
            earlier = await self.contents.earlier(topic, idempotency_key)
            if earlier is not None:  # a retry: answered as the first time, nothing written
                if earlier[0] != digest:
                    raise Conflict(
                        "Idempotency-Key was already used for a different body",
                        idempotency_key=idempotency_key,
                    )
                metrics.published(len(body), 0, True)
                return _answer(topic, content, earlier[1], replayed=True)
        await self.contents.put(topic, content)
        stored = await self.ingest.append(
            topic,
            [content_change(content, topic_url, datetime.now(UTC))],
            digest=digest if idempotency_key is not None else "",
            idempotency_key=idempotency_key,
        )
        metrics.published(len(body), len(stored.ids), stored.replayed)
        return _answer(topic, content, stored.ids, replayed=stored.replayed)

    async def ping(self, topic: str, url: str) -> PublishAccepted:
        """A ping: fetch ``url`` and store its content unless the topic's last change
        names it already; the 202's JSON answer. 502/413 when the fetch fails."""
        content = fetched_content(url, await self.client.fetch_content(url))
        ids: list[str] = []
        if not content.same_as(await self.contents.last_change(topic)):
            await self.contents.put(topic, content)
            change = content_change(content, url, datetime.now(UTC))
            ids = (await self.ingest.append(topic, [change])).ids
            metrics.CHANGES_ACCEPTED.inc(len(ids))
        answer = _answer(topic, content, ids)
        answer["fetched"] = 1
        return answer


def _posted_type(header: str | None) -> str:
    if header is None:
        return DEFAULT_CONTENT_TYPE
    problem = content_type_problem(header)
    if problem is not None:
        raise BadRequest(f"Content-Type of a plain WebSub topic's content: {problem}")
    return header


def fetched_content(url: str, answer: Answer) -> TopicContent:
    """The content a ping fetched from ``url``; 502 naming what makes it unusable."""
    headers = answer.headers
    coding = headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise BadGateway(
            f"{url} answered with Content-Encoding {coding[:40]!a}, though the hub asked for "
            "none (Accept-Encoding: identity): it delivers content as served"
        )
    if not answer.body:
        raise BadGateway(f"{url} answered with an empty body: there is no content to deliver")
    ctype = headers.get("content-type")
    if ctype is None:
        return TopicContent(answer.body, DEFAULT_CONTENT_TYPE)
    problem = content_type_problem(ctype)
    if problem is not None:
        raise BadGateway(f"{url} answered with an unusable Content-Type: {problem}")
    return TopicContent(answer.body, ctype)


def _answer(
    topic: str, content: TopicContent, ids: list[str], *, replayed: bool = False
) -> PublishAccepted:
    return {
        "topic": topic,
        "accepted": len(ids),
        "ids": ids,
        "replayed": replayed,
        "content_type": content.content_type,
        "length": len(content.body),
    }
