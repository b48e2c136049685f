"""The POST of a WebSub delivery, built one way for the delivery worker and the replay.

A delivery is ``POST`` to the subscription's callback (WebSub §7, content distribution),
its header lines in this order:

1. ``Content-Type``: what the hub serves at the topic URI (§7 asks the two to match); a
   plain WebSub topic's content's own type (:mod:`hub.core.topic_content`).
2. ``Link``: ``rel="hub"`` and ``rel="self"`` (§7); with a gap notice, ``rel="resourcelist"``
   too, where the subscriber re-baselines.
3. ``X-RSHub-Node`` and ``X-RSHub-Subscription``, for operators.
4. ``X-RSHub-First-Event-Id``, ``-Last-Event-Id``, ``-Event-Count``: the batch's events.
5. ``X-RSHub-Gap``, on a batch after events that retention trimmed before it got them.
6. ``X-RSHub-Replay``, on a dead-letter replay.
7. The signature headers of the subscription's scheme, with its secrets in force
   (:func:`hub.live.subscription_terms.signature_headers`).

The body is the batch's ``changelist-notification`` (:func:`notification_body`, cut to the
byte budget by :func:`fitting`), or a plain topic's content as it is now
(:func:`current_content`), which stands for every change of the batch.

A dead-letter replay (:mod:`hub.live.dead_letter_replay`) sends what a delivery of its
batch sends, with these differences, each for a reason:

- ``X-RSHub-Replay: dead-letter``: its events come after events with later ids, so a
  subscriber must apply them by their own times.
- no gap notice: a batch dead-lettered with one hands it to the next batch, so a dead
  letter never carries one.
- its own signing time, as every retry has (Standard Webhooks signs the time of sending,
  so that a receiver can refuse an old request sent again by someone else).

A publish's fan-out (:meth:`hub.live.delivery.DeliveryWorker.offer`) writes the same bytes
from parts encoded once: :attr:`DeliveryPosts.fixed` in the callback's
:class:`~hub.live.callback_connections.Prefix`, :func:`event_id_headers` once per batch,
then :meth:`DeliveryPosts.signature`. The order above is what keeps the two the same;
``tests/hub/test_replayed_posts.py`` compares a delivery and its replay on the wire.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from hub.core import rendering, signing
from hub.core.damage import DamageLog
from hub.core.events import Event
from hub.core.exceptions import DamagedData
from hub.core.placement import subscription_id
from hub.core.topic_content import TopicContent
from hub.core.topics import HubUrls
from hub.live.subscription_terms import signature_headers
from hub.store.subscriptions import Subscription
from hub.store.topic_contents import ContentStore

log = logging.getLogger(__name__)

#: Headers naming the first and last event ids of a delivery body and their count (each
#: entry's own id is its ``rs:md/@rshub:id``, see :mod:`hub.core.rendering`).
FIRST_EVENT_ID_HEADER = "X-RSHub-First-Event-Id"
LAST_EVENT_ID_HEADER = "X-RSHub-Last-Event-Id"
EVENT_COUNT_HEADER = "X-RSHub-Event-Count"
#: On a delivery whose events do not follow on from the previous one because retention
#: trimmed events the subscription had not received: ``trimmed-through=<last trimmed id>``.
#: The body says the same (signed), see :func:`hub.core.rendering.notification`.
GAP_HEADER = "X-RSHub-Gap"
#: The hub process that sent a delivery (its ``node`` in ``/healthz``), for operators.
NODE_HEADER = "X-RSHub-Node"
#: The subscription's stable id (``GET /admin/subscriptions/{id}``, ``rshub inspect``).
SUBSCRIPTION_HEADER = "X-RSHub-Subscription"
#: Marks a replayed delivery: ``dead-letter``. Its events were dead-lettered earlier and
#: come after events with later ids; a subscriber applies them by their own times.
REPLAY_HEADER = "X-RSHub-Replay"

#: Bytes counted for each entry beside its own XML: a margin, so that the root element and
#: its links around the entries rarely take a body past the budget.
_ENTRY_OVERHEAD = 16

#: Plain topics' contents that could not be read, said once.
_damage = DamageLog(log)


class DeliveryPost(NamedTuple):
    """One delivery request: ``POST`` to :attr:`url`, as :meth:`HttpClient.post` sends it."""

    url: str
    headers: dict[str, str]
    body: bytes


class DeliveryPosts:
    """How every delivery POST of one subscription is made (the module says what it holds)."""

    def __init__(self, sub: Subscription, urls: HubUrls, node: str) -> None:
        self.sub = sub
        self.urls = urls
        self.id = subscription_id(sub.topic, sub.callback)
        self.scheme = signing.Scheme(sub.signature)
        #: The headers that start every POST of this subscription (a plain topic's own
        #: ``Content-Type`` replaces the first in place).
        self.fixed = {
            "Content-Type": rendering.CONTENT_TYPE,
            "Link": urls.links(sub.topic_url),
            NODE_HEADER: node,
            SUBSCRIPTION_HEADER: self.id,
        }

    def post(
        self,
        batch: list[Event],
        body: bytes | TopicContent,
        now: float,
        *,
        gap: str | None = None,
        replay: bool = False,
    ) -> DeliveryPost:
        """The POST of ``batch`` as ``body`` (its notification, or a plain topic's content),
        signed at ``now``; ``gap``: the last trimmed id it tells of; ``replay``: a
        dead-letter replay's."""
        headers = dict(self.fixed)
        if isinstance(body, TopicContent):
            headers["Content-Type"] = body.content_type
            body = body.body
        headers.update(event_id_headers(batch))
        if gap is not None:
            headers[GAP_HEADER] = f"trimmed-through={gap}"
            resourcelist = self.urls.resourcelist(self.sub.topic)
            headers["Link"] = f'{headers["Link"]}, <{resourcelist}>; rel="resourcelist"'
        if replay:
            headers[REPLAY_HEADER] = "dead-letter"
        headers.update(self.signature(body, batch, now))
        return DeliveryPost(self.sub.callback, headers, body)

    def signature(self, body: bytes, batch: list[Event], now: float) -> dict[str, str]:
        """The signature headers of one attempt to send ``batch`` as ``body`` at ``now``
        (none without a secret)."""
        return signature_headers(self.sub, body, batch, now, sub_id=self.id, scheme=self.scheme)


def event_id_headers(batch: list[Event]) -> dict[str, str]:
    """The headers naming ``batch``'s events, the same for every subscription sent it."""
    return {
        FIRST_EVENT_ID_HEADER: batch[0].id,
        LAST_EVENT_ID_HEADER: batch[-1].id,
        EVENT_COUNT_HEADER: str(len(batch)),
    }


def fitting(events: list[Event], max_bytes: int) -> int:
    """How many of ``events``, from the first, one delivery body holds within ``max_bytes``
    (always at least one: a single larger event still goes, alone), all of one kind: a
    notification carries changes or packages of a Change Dump, never both."""
    kind = rendering.same_kind(events) if events else 0
    size = 0
    for i in range(kind):
        size += len(events[i].xml(rendering.event_entry)) + _ENTRY_OVERHEAD
        if size > max_bytes and i > 0:
            return i
    return kind


def notification_body(
    urls: HubUrls, topic: str, batch: list[Event], gap: str | None = None
) -> bytes:
    """A ResourceSync topic's delivery body: ``batch`` as a ``changelist-notification`` (or
    ``changedump-notification``),
    with a gap notice when ``gap`` names the last trimmed id the subscriber missed."""
    return rendering.notification(
        batch,
        up=urls.capabilitylist(topic),
        gap=None if gap is None else (gap, urls.resourcelist(topic)),
    )


async def current_content(contents: ContentStore | None, topic: str) -> TopicContent | None:
    """A plain topic's content as it is now, which its deliveries send (WebSub delivers a
    topic's current content: it stands for every change of a batch); None without
    ``contents`` (a ResourceSync topic), for a plain one that has none (changes stored
    before it was declared plain go as notifications) or whose content is damaged (said
    once; its changes go as notifications)."""
    if contents is None:
        return None
    try:
        return await contents.get(topic)
    except DamagedData as exc:
        _damage.damaged(f"content of topic {topic!r}", exc)
        return None
