"""The hub's Lua scripts, kept as ``.lua`` files beside this module and loaded one way.

Each script runs atomically inside Redis, which is what makes a publish all-or-none and lets
several hub processes agree on Change List page boundaries. ``$NAME`` placeholders are hash
field names from :data:`hub.store.keys.SCRIPT_NAMES`, so Python and Lua spell each name once.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from hub.store import keys

_PLACEHOLDER = re.compile(r"\$([A-Z_]+)")


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    #: What ``EVALSHA`` names it by; computed once (it was hashed per call, on every publish).
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()
        object.__setattr__(self, "sha", digest)


def _fill(match: re.Match[str]) -> str:
    return keys.SCRIPT_NAMES[match.group(1)]


@cache
def load(name: str) -> Script:
    """The script ``name``.lua with its placeholders filled in."""
    text = resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return Script(name, _PLACEHOLDER.sub(_fill, text))


APPEND = load("append")
FOLLOW = load("follow")
ADVANCE_PAGES = load("advance_pages")
CLAIM = load("claim")
RENEW = load("renew")
FENCED_CURSORS = load("fenced_cursors")
FENCED_SAVE = load("fenced_save")
HEARTBEAT = load("heartbeat")
ALIVE = load("alive")
ACTIVATE = load("activate")
DELETE_SUBSCRIPTION = load("delete_subscription")
REQUEST_ARRIVED = load("request_arrived")
EXACT_RESOURCELIST = load("exact_resourcelist")
RESOURCELIST_PROBE = load("resourcelist_probe")
BACKLOG = load("backlog")
RANGE_TRIMMED = load("range_trimmed")
DEAD_LETTER = load("dead_letter")

RECORD_ATTEMPTS = load("record_attempts")
REPORT_PRESENCE = load("report_presence")
REVOCATION = load("revocation")
