"""The admin API of a subscription's dead letters.

==================================================  ========================================
``GET /admin/subscriptions/{id}/dead-letters``       the oldest dead letters (``?limit=``,
                                                     1 to 1000, default 100; ``?after=``
                                                     an ``entry``, to page) and how many
``POST /admin/subscriptions/{id}/dead-letters/replay``  re-deliver them now (marked
                                                     ``X-RSHub-Replay``), removing each
                                                     once delivered
==================================================  ========================================

``{id}`` is the subscription's id (``GET /admin/subscriptions``). Both need the admin token,
as every ``/admin`` route (:func:`hub.web.access.check_operator`).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from hub.core.api_bodies import DeadLetterReplay, DeadLetters, dump
from hub.core.events import parse_id
from hub.core.exceptions import BadRequest
from hub.core.placement import subscription_id
from hub.live.dead_letter_replay import Replays
from hub.store.dead_letters import DeadLetterStore
from hub.store.subscriptions import Subscription
from hub.web.access import check_operator
from hub.web.operator import subscription_by_id


@dataclass(frozen=True, slots=True)
class DeadLettering:
    dead_letters: DeadLetterStore
    replays: Replays


DEAD_LETTERING = web.AppKey("dead_lettering", DeadLettering)

_LIMIT_DEFAULT, _LIMIT_MAX = 100, 1000


def _limit(request: web.Request) -> int:
    text = request.query.get("limit", "")
    if not text:
        return _LIMIT_DEFAULT
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text[:5]) <= _LIMIT_MAX:
        raise BadRequest(f"limit must be a whole number from 1 to {_LIMIT_MAX}, got {text[:40]!r}")
    return int(text)


def _after(request: web.Request) -> str | None:
    text = request.query.get("after", "")
    if not text:
        return None
    parse_id(text)  # 400 naming the rule if it is not an id
    return text


def _head(sub: Subscription) -> dict[str, object]:
    return {
        "id": subscription_id(sub.topic, sub.callback),
        "topic": sub.topic,
        "callback": sub.callback,
        "state": sub.state.value,
    }


async def list_dead_letters(request: web.Request) -> web.Response:
    check_operator(request)
    limit, after = _limit(request), _after(request)
    sub = await subscription_by_id(request)
    store = request.app[DEAD_LETTERING].dead_letters
    letters = await store.read(sub.topic, sub.callback, limit, after)
    total = await store.count(sub.topic, sub.callback)
    answer = DeadLetters.model_validate(
        {**_head(sub), "total": total, "dead_letters": [d.public() for d in letters]}
    )
    return web.json_response(dump(answer))


async def replay_dead_letters(request: web.Request) -> web.Response:
    check_operator(request)
    sub = await subscription_by_id(request)
    done = await request.app[DEAD_LETTERING].replays.replay(sub)
    answer = DeadLetterReplay.model_validate(
        {**_head(sub), "replayed": done.replayed, "remaining": done.remaining, "error": done.error}
    )
    return web.json_response(dump(answer))
