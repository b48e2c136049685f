"""Presence as the admin API and the overview show it (:mod:`hub.core.presence`)."""

from __future__ import annotations

from dataclasses import asdict

from aiohttp import web

from hub.core.presence import TopicPresence, summed, websub_by_state
from hub.store.presence import PresenceStore
from hub.store.subscriptions import Subscription

PRESENCE = web.AppKey("presence", PresenceStore)


async def of_topics(
    app: web.Application, subscriptions: dict[str, list[Subscription]]
) -> dict[str, TopicPresence]:
    """Every topic with stream clients or ``subscriptions`` (topic -> its subscriptions)."""
    websub = {t: websub_by_state(s.state.value for s in subs) for t, subs in subscriptions.items()}
    return summed(await app[PRESENCE].reports(), websub)


async def of_topic(
    app: web.Application, topic: str, subscriptions: list[Subscription]
) -> dict[str, object]:
    """``topic``'s presence as JSON."""
    found = await of_topics(app, {topic: subscriptions})
    return asdict(found.get(topic) or TopicPresence(websub=websub_by_state(())))
