"""Discovery (Z39.99 §6.3, §8, §9): the Source Description and each topic's Capability List.

``/.well-known/resourcesync`` lists every topic's Capability List. A topic's Capability List
names its Resource List, its Change List (the index) and its ``changelist-notification``
channel: ``loc`` = the topic URI, ``rs:ln rel="hub"`` = the hub URL (push spec §5). URLs use
``Settings.public_url`` so a hub behind a proxy advertises the address clients see.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from aiohttp import web

from . import keys, rendering
from .exceptions import NotFound
from .http_cache import Validators, stream
from .state import REDIS, SETTINGS, STORE
from .topics import check_name

WELL_KNOWN = "/.well-known/resourcesync"


@dataclass(frozen=True, slots=True)
class DocumentUrls:
    """Where each document of the hub lives, as clients see it."""

    base: str

    @property
    def hub(self) -> str:
        return self.base + "/"

    @property
    def source_description(self) -> str:
        return self.base + WELL_KNOWN

    def topic(self, name: str) -> str:
        return f"{self.base}/topics/{name}"

    def capabilitylist(self, name: str) -> str:
        return self.topic(name) + "/capabilitylist.xml"

    def changelist_index(self, name: str) -> str:
        return self.topic(name) + "/changelist.xml"

    def changelist_page(self, name: str, n: int) -> str:
        # Zero-padded so that lexical order is page order (resync reads an index's
        # sitemaps in sorted URI order).
        return f"{self.topic(name)}/changelist/{n:08d}.xml"

    def resourcelist(self, name: str) -> str:
        return self.topic(name) + "/resourcelist.xml"

    def resourcelist_page(self, name: str, snapshot: str, k: int) -> str:
        return f"{self.topic(name)}/resourcelist/{snapshot}-{k:05d}.xml"

    @property
    def tag(self) -> str:
        """A short digest of the base URL, part of every ETag (the URLs are in the bodies)."""
        return hashlib.blake2b(self.base.encode(), digest_size=4).hexdigest()


def urls(request: web.Request) -> DocumentUrls:
    return DocumentUrls(request.app[SETTINGS].public_url)


async def known_topic(request: web.Request) -> str:
    """The path's topic name, or 404 when nothing was ever published to it."""
    raw = request.match_info["name"]
    name = check_name(raw)
    if not await request.app[STORE].exists(name):
        raise NotFound(f"unknown topic {name!r}: nothing was ever published to it", topic=name)
    return name


async def _created_ms(request: web.Request, topic: str) -> int:
    value = await request.app[REDIS].hget(keys.topic_meta(topic), "created_ms")
    return int(value) if value else 0


async def capability_list(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    u = urls(request)
    body = (
        rendering.URLSET_OPEN
        + rendering.root("capabilitylist", [("up", u.source_description)])
        + rendering.capability_entry(u.resourcelist(topic), "resourcelist")
        + rendering.capability_entry(u.changelist_index(topic), "changelist")
        + rendering.capability_entry(u.topic(topic), "changelist-notification", [("hub", u.hub)])
        + rendering.URLSET_CLOSE
    )
    validators = Validators(f"{u.tag}-cap-{topic}", await _created_ms(request, topic))
    return await stream(request, validators, [body.encode()])


async def source_description(request: web.Request) -> web.StreamResponse:
    u = urls(request)
    names = await request.app[STORE].topics()
    pipe = request.app[REDIS].pipeline(transaction=False)
    for name in names:
        pipe.hget(keys.topic_meta(name), "created_ms")
    created = [int(v) for v in await pipe.execute() if v]
    digest = hashlib.blake2b("\n".join(names).encode(), digest_size=8).hexdigest()
    validators = Validators(f"{u.tag}-sd-{len(names)}-{digest}", max(created, default=0))
    parts = [rendering.URLSET_OPEN, rendering.root("description", [])]
    parts.extend(rendering.capability_entry(u.capabilitylist(n), "capabilitylist") for n in names)
    parts.append(rendering.URLSET_CLOSE)
    return await stream(request, validators, rendering.chunked(parts))
