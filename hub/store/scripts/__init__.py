"""The hub's Lua scripts, kept as ``.lua`` files beside this module and loaded one way.

Each script runs atomically inside Redis, which is what makes a publish all-or-none and lets
several hub processes agree on Change List page boundaries. ``$NAME`` placeholders are hash
field names from :data:`hub.store.keys.SCRIPT_NAMES`, so Python and Lua spell each name once.

What several scripts do alike (a delivery lease's entry, moving a delivery cursor and its
hold, the Redis clock in ms, the latest (un)subscription request's check) is written once, as
a snippet: ``snippets/NAME.lua``, taken by a script with a line of its own,
``--#include NAME``. Redis cannot include, so the loader puts the snippet's text in place of
that line before it fills the placeholders: the source ``SCRIPT LOAD`` sends is whole, and
:attr:`Script.sha` is that of the composed text (a line number in an error Redis reports
counts in :attr:`Script.source`). A snippet defines local functions and includes nothing; a
script includes each snippet once (a second copy would define its locals again), at the top
level. A script is loaded when the module naming it is imported (this one names all but
``count_after``, which :mod:`hub.store.topic_admin` names), so an include of an unknown
snippet, a second include of one or a malformed include line fails that import
(:class:`ScriptSourceError`), never a script's first call.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from hub.store import keys

_PLACEHOLDER = re.compile(r"\$([A-Z_]+)")
#: What starts an include line; :data:`_INCLUDE` is the whole line's one form.
INCLUDE_MARKER = "--#include"
_INCLUDE = re.compile(r"--#include ([a-z][a-z0-9_]*)")


class ScriptSourceError(Exception):
    """The hub's own Lua sources do not compose (an unknown snippet, one included twice, a
    malformed include line): a fault in the package itself, raised when it is imported."""


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


def compose(name: str, text: str, snippets: Traversable) -> str:
    """``text`` (the script ``name``) with each ``--#include NAME`` line replaced by the
    snippet ``NAME.lua`` of ``snippets``; :class:`ScriptSourceError` where that cannot be."""
    included: set[str] = set()
    out: list[str] = []
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if not line.lstrip().startswith(INCLUDE_MARKER):
            out.append(line)
            continue
        where = f"{name}.lua line {number}"
        match = _INCLUDE.fullmatch(line.rstrip("\r\n"))
        if match is None:
            raise ScriptSourceError(
                f"{where}: an include is {INCLUDE_MARKER} NAME alone on its line, "
                f"got {line.strip()!r}"
            )
        wanted = match.group(1)
        if wanted in included:
            raise ScriptSourceError(f"{where}: snippet {wanted!r} is included twice")
        included.add(wanted)
        source = snippets.joinpath(f"{wanted}.lua")
        if not source.is_file():
            raise ScriptSourceError(f"{where}: no snippet {wanted!r} (snippets/{wanted}.lua)")
        body = source.read_text(encoding="utf-8")
        if any(s.lstrip().startswith(INCLUDE_MARKER) for s in body.splitlines()):
            raise ScriptSourceError(f"snippet {wanted!r} includes another: snippets include none")
        out.append(body if body.endswith("\n") else body + "\n")
    return "".join(out)


@cache
def load(name: str) -> Script:
    """The script ``name``.lua with its snippets included and its placeholders filled in."""
    here = resources.files(__package__)
    text = here.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    composed = compose(name, text, here.joinpath("snippets"))
    return Script(name, _PLACEHOLDER.sub(_fill, composed))


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
COMMAND = load("command")
EXACT_RESOURCELIST = load("exact_resourcelist")
RESOURCELIST_PROBE = load("resourcelist_probe")
BACKLOG = load("backlog")
RANGE_TRIMMED = load("range_trimmed")
DEAD_LETTER = load("dead_letter")

RECORD_ATTEMPTS = load("record_attempts")
REPORT_PRESENCE = load("report_presence")
REVOCATION = load("revocation")
