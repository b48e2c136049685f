"""Materialized ResourceSync documents: routes, and the task that keeps page boundaries current.

=============================================  =============================================
``GET /.well-known/resourcesync``              Source Description (:mod:`hub.discovery`)
``GET /topics/{name}``                         the open Change List page, WebSub ``Link``\\ s
``GET /topics/{name}/capabilitylist.xml``      Capability List
``GET /topics/{name}/changelist.xml``          Change List Index (:mod:`hub.changelists`)
``GET /topics/{name}/changelist/{n}.xml``      one Change List page
``GET /topics/{name}/resourcelist.xml``        Resource List or its index (:mod:`hub.resourcelists`)
``GET /topics/{name}/resourcelist/{p}.xml``    one page of a Resource List snapshot
=============================================  =============================================

Every route also answers ``HEAD``. User documentation: ``docs/polling.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from redis.exceptions import RedisError

from . import changelists, discovery, resourcelists
from .http_cache import ByteCache
from .pages import PageChain
from .state import REDIS, SETTINGS, STORE

log = logging.getLogger(__name__)


async def _scan_forever(app: web.Application, interval: float, stop: asyncio.Event) -> None:
    """Advance every topic's page chain, so boundaries are recorded before retention trims."""
    chain, store = app[changelists.PAGES], app[STORE]
    while not stop.is_set():
        try:
            for topic in await store.topics():
                await chain.advance(topic)
        except RedisError as exc:  # Redis away for a moment: try again next round
            log.warning("Change List page scan failed: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def _documents_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    app[changelists.PAGES] = PageChain(
        app[REDIS],
        window_seconds=settings.changelist_page_seconds,
        max_entries=settings.changelist_page_entries,
    )
    app[changelists.DOC_CACHE] = ByteCache(settings.document_cache_bytes)
    stop = asyncio.Event()
    task = None
    if settings.changelist_scan_seconds:
        task = asyncio.create_task(
            _scan_forever(app, settings.changelist_scan_seconds, stop), name="page-scan"
        )
    yield
    if task is not None:
        # Stop by event rather than cancel(): a cancellation landing inside a Redis call
        # can be swallowed by the client, which would leave this wait hanging.
        stop.set()
        try:
            await asyncio.wait_for(task, 5.0)
        except TimeoutError:
            log.warning("Change List page scan did not stop in time")


def setup(app: web.Application) -> None:
    """Add the document routes; their resources live for the app's lifetime (after Redis)."""
    app.cleanup_ctx.append(_documents_ctx)
    resourcelists.setup(app)
    add = app.router.add_get
    add(discovery.WELL_KNOWN, discovery.source_description)
    add("/topics/{name}", changelists.topic_uri)
    add("/topics/{name}/capabilitylist.xml", discovery.capability_list)
    add("/topics/{name}/changelist.xml", changelists.changelist_index)
    add(r"/topics/{name}/changelist/{page:[^/]+}.xml", changelists.changelist_page)
    add("/topics/{name}/resourcelist.xml", resourcelists.resource_list)
    add(r"/topics/{name}/resourcelist/{page:[^/]+}.xml", resourcelists.resource_list_page)
