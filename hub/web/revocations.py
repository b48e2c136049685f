"""The admin API's token revocations: revoke a token (for every topic or one), list, lift.

=========================================  ================================================
``GET /admin/revocations``                 every revocation in force (fingerprint or jti,
                                           topic, when)
``POST /admin/revocations``                revoke a token, for every topic or for
                                           ``topic`` only (that topic grant removed)
``DELETE /admin/revocations``              lift a revocation (the same fields)
=========================================  ================================================

The last two take, as a JSON object or a form, exactly one of ``token`` (fingerprinted at
once: the token is neither stored nor shown nor logged), ``fingerprint`` (its SHA-256, hex)
or ``jti`` (a signed read token's id), and optionally ``topic``
(:func:`hub.core.revocations.requested`), and a revoke ``expires`` (when it ends; default:
a signed token's own end, else never). Every hub process on the same Redis applies a
change within ``revocation_check_seconds``; this one at once (:mod:`hub.live.runtime`).
The admin rules are the other admin routes' (:func:`hub.web.access.check_operator`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from aiohttp import web

from hub.core import api_bodies
from hub.core.exceptions import BadRequest, Conflict, NotFound, UnsupportedMediaType
from hub.core.revocations import Kind, Revocation, fingerprint, requested
from hub.core.settings import Settings
from hub.store.redis_connection import StoreError
from hub.store.revocations import RevocationsFull, RevocationStore
from hub.web.access import check_operator
from hub.web.request_body import read_body, read_form

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Revoking:
    """What the revocation routes need: where revocations are kept, how this process
    applies a change at once, and the settings (the body limits, the admin token)."""

    store: RevocationStore
    refresh: Callable[[], Awaitable[None]]
    settings: Settings


REVOKING = web.AppKey("revoking", Revoking)

#: The largest body: a token is at most 4 KiB.
_MAX_BODY = 16 * 1024
_JSON, _FORM = "application/json", "application/x-www-form-urlencoded"


async def _fields(request: web.Request) -> dict[str, object]:
    """The body's fields: a JSON object, or a form whose fields each come once."""
    settings = request.app[REVOKING].settings
    if request.content_type not in (_JSON, _FORM):
        raise UnsupportedMediaType(
            f"name the token in a JSON object or an {_FORM} form, got Content-Type "
            f"{request.content_type[:80]!r}"
        )
    if request.content_type == _JSON:
        body = await read_body(request, settings, limit=_MAX_BODY)
        try:
            raw = orjson.loads(body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"the body is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise BadRequest("the JSON body must be an object (token, fingerprint or jti; topic)")
        return raw
    fields: dict[str, object] = {}
    for name, value in await read_form(request, settings, limit=_MAX_BODY):
        if name in fields:
            raise BadRequest(f"field {name[:40]!r} is given twice", field=name[:40])
        fields[name] = value
    return fields


async def _requested(request: web.Request) -> Revocation:
    revocation = requested(await _fields(request), time.time())
    admin = request.app[REVOKING].settings.admin_token
    if admin is not None and revocation.kind is Kind.FINGERPRINT:
        if revocation.value == fingerprint(admin):
            raise BadRequest(
                "the admin token is not revocable (no revocation applies to it): restart "
                "the hub with another RSHUB_ADMIN_TOKEN"
            )
    return revocation


async def _applied(request: web.Request) -> None:
    """This process applies the change now; the others within their next check. Redis
    gone meanwhile: the periodic check applies it once it answers."""
    with contextlib.suppress(StoreError):
        await request.app[REVOKING].refresh()


def _named(revocation: Revocation) -> str:
    where = f"topic {revocation.topic!r}" if revocation.topic else "every topic"
    return f"{revocation.kind} {revocation.value} for {where}"


async def list_revocations(request: web.Request) -> web.Response:
    check_operator(request)
    version, records = await request.app[REVOKING].store.load()
    records.sort(key=lambda r: (r.revoked_at, r.field))
    answer = api_bodies.Revocations.model_validate(
        {"revocations": [r.public() for r in records], "version": version}
    )
    return web.json_response(api_bodies.dump(answer), headers={"Cache-Control": "no-store"})


async def revoke(request: web.Request) -> web.Response:
    check_operator(request)
    revocation = await _requested(request)
    store = request.app[REVOKING].store
    try:
        stored = await store.revoke(revocation)
    except RevocationsFull as exc:
        raise Conflict(f"{exc}: lift some first (DELETE /admin/revocations)") from None
    if stored is None:  # in force already: the first time stays
        earlier = await store.get(revocation)
        answer = (earlier or revocation).public()
        return web.json_response(
            api_bodies.dump(api_bodies.Revocation.model_validate({**answer, "new": False}))
        )
    log.info("revoked %s (admin API)", _named(revocation))
    await _applied(request)
    return web.json_response(
        api_bodies.dump(api_bodies.Revocation.model_validate({**revocation.public(), "new": True}))
    )


async def lift(request: web.Request) -> web.Response:
    check_operator(request)
    revocation = await _requested(request)
    if not await request.app[REVOKING].store.lift(revocation):
        raise NotFound(f"no revocation of {_named(revocation)}")
    log.info("lifted the revocation of %s (admin API)", _named(revocation))
    await _applied(request)
    answer = revocation.public()
    for when in ("revoked_at", "revoked", "expires_at", "expires"):
        del answer[when]
    return web.json_response(
        api_bodies.dump(api_bodies.Lifted.model_validate({**answer, "lifted": True}))
    )
