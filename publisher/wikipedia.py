"""Wikimedia ``recentchange`` events as ResourceSync changes: a pure mapping. No I/O.

One EventStreams ``mediawiki.recentchange`` event (schema ``/mediawiki/recentchange/1.0.0``)
becomes zero, one or two Change List entries (Z39.99 Section 12.1):

====================  ============================  ===========================================
event ``type``        ``log_type`` / ``log_action``  changes
====================  ============================  ===========================================
``new``               –                             ``created`` page
``edit``              –                             ``updated`` page
``log``               ``delete/delete``,            ``deleted`` page
                      ``delete/delete_redir``
``log``               ``delete/restore``            ``created`` page (it exists again)
``log``               ``move/move``,                ``created`` new title, and the old title:
                      ``move/move_redir``           ``deleted`` if no redirect was left
                                                    (``noredir``), else ``updated`` (it is
                                                    now a redirect to the new title)
``log``               ``upload/upload``             ``created`` ``File:`` page
``log``               ``upload/overwrite|revert``   ``updated`` ``File:`` page
``categorize``        –                             nothing (no page revision changed; the
                                                    edit that caused it is its own event),
                                                    or ``updated`` category page with
                                                    ``categorize=True``
anything else         (block, protect, patrol, …)   nothing: no page content changed
====================  ============================  ===========================================

Every change has ``loc`` = the page URL (``{server_url}/wiki/{title}``, encoded as
MediaWiki's ``wfUrlencode`` does), ``lastmod`` = the event time (``meta.dt``, else
``timestamp``) and, while the page exists, ``type="text/html"``. The HTML length is not
in the event, so no ``length`` is claimed for the page itself. Edits and new pages carry
revision links (``rs:ln``, Z39.99 Section 14, relation types from RFC 5829):

- ``rel="latest-version"``: the permanent URL of the new revision (``index.php?oldid=NEW``);
- ``rel="predecessor-version"``: the permanent URL of the previous revision (edits);
- ``rel="alternate"``: the new revision's wikitext (``action=raw``), ``type="text/x-wiki"``
  and ``length`` = ``length.new``, which *is* that representation's size in bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from resourcesync import Change, Entry, Link, Metadata, parse_datetime

__all__ = ["EditFilter", "changes_from_event", "page_url", "revision_url"]

#: Characters MediaWiki's ``wfUrlencode`` leaves unescaped in titles.
_TITLE_SAFE = ";@$!*(),/~:"
PAGE_TYPE = "text/html"
WIKITEXT_TYPE = "text/x-wiki"

_DELETE_ACTIONS = frozenset({"delete", "delete_redir", "delete_redir2"})
_MOVE_ACTIONS = frozenset({"move", "move_redir"})


@dataclass(frozen=True)
class EditFilter:
    """Which events to publish. Empty ``wikis``/``namespaces`` mean all."""

    #: Wiki database names (``enwiki``) or domains (``en.wikipedia.org``).
    wikis: frozenset[str] = field(default_factory=frozenset)
    #: Namespace numbers (0 = articles, 14 = categories, ...).
    namespaces: frozenset[int] = field(default_factory=frozenset)
    #: Whether edits flagged ``bot`` are published.
    bots: bool = True

    @classmethod
    def of(
        cls, wikis: Iterable[str] = (), namespaces: Iterable[int] = (), bots: bool = True
    ) -> EditFilter:
        return cls(frozenset(wikis), frozenset(namespaces), bots)

    def accepts(self, event: Mapping[str, Any]) -> bool:
        if self.wikis:
            meta = event.get("meta") or {}
            names = {event.get("wiki"), event.get("server_name"), meta.get("domain")}
            if not self.wikis & {n for n in names if isinstance(n, str)}:
                return False
        if self.namespaces and event.get("namespace") not in self.namespaces:
            return False
        return self.bots or not event.get("bot", False)


def page_url(server_url: str, title: str) -> str:
    """The article URL of ``title`` on the wiki at ``server_url``."""
    return f"{server_url.rstrip('/')}/wiki/{quote(title.replace(' ', '_'), safe=_TITLE_SAFE)}"


def revision_url(
    server_url: str, script_path: str, title: str, revision: int, *, raw: bool = False
) -> str:
    """The permanent URL of one revision (``index.php?title=...&oldid=N``)."""
    encoded = quote(title.replace(" ", "_"), safe=_TITLE_SAFE)
    action = "&action=raw" if raw else ""
    return (
        f"{server_url.rstrip('/')}{script_path}/index.php?title={encoded}{action}&oldid={revision}"
    )


def _event_time(event: Mapping[str, Any]) -> datetime:
    dt = (event.get("meta") or {}).get("dt")
    if isinstance(dt, str):
        try:
            return parse_datetime(dt)
        except ValueError:
            pass
    stamp = event.get("timestamp")
    if isinstance(stamp, int | float):
        return datetime.fromtimestamp(stamp, tz=UTC)
    raise ValueError("event has neither meta.dt nor timestamp")


def _truthy(value: Any) -> bool:
    return value in (True, 1, "1", "true", "yes")


def _revision_links(event: Mapping[str, Any], server: str, title: str) -> tuple[Link, ...]:
    revision = event.get("revision") or {}
    new, old = revision.get("new"), revision.get("old")
    script = str(event.get("server_script_path") or "/w")
    links: list[Link] = []
    if isinstance(new, int):
        links.append(Link(rel="latest-version", href=revision_url(server, script, title, new)))
    if isinstance(old, int):
        links.append(Link(rel="predecessor-version", href=revision_url(server, script, title, old)))
    if isinstance(new, int):
        length = (event.get("length") or {}).get("new")
        links.append(
            Link(
                rel="alternate",
                href=revision_url(server, script, title, new, raw=True),
                type=WIKITEXT_TYPE,
                length=length if isinstance(length, int) else None,
            )
        )
    return tuple(links)


def _entry(loc: str, change: Change, when: datetime, links: tuple[Link, ...] = ()) -> Entry:
    kind = None if change is Change.DELETED else PAGE_TYPE
    return Entry(loc=loc, lastmod=when, md=Metadata(change=change, type=kind), links=links)


def changes_from_event(event: Mapping[str, Any], *, categorize: bool = False) -> list[Entry]:
    """The ResourceSync changes one ``recentchange`` event stands for (see module doc).

    Raises:
        ValueError: the event lacks what a change needs (server URL, title, time).
    """
    kind = event.get("type")
    server, title = event.get("server_url"), event.get("title")
    if not isinstance(server, str) or not isinstance(title, str) or not server or not title:
        raise ValueError("event has no server_url or title")
    when = _event_time(event)
    loc = page_url(server, title)
    if kind == "new":
        return [_entry(loc, Change.CREATED, when, _revision_links(event, server, title))]
    if kind == "edit":
        return [_entry(loc, Change.UPDATED, when, _revision_links(event, server, title))]
    if kind == "categorize":
        return [_entry(loc, Change.UPDATED, when)] if categorize else []
    if kind != "log":
        return []
    log_type, action = event.get("log_type"), event.get("log_action")
    params = event.get("log_params")
    params = params if isinstance(params, Mapping) else {}
    if log_type == "delete" and action in _DELETE_ACTIONS:
        return [_entry(loc, Change.DELETED, when)]
    if log_type == "delete" and action == "restore":
        return [_entry(loc, Change.CREATED, when)]
    if log_type == "move" and action in _MOVE_ACTIONS:
        target = params.get("target")
        if not isinstance(target, str) or not target:
            raise ValueError("move event without log_params.target")
        old = Change.DELETED if _truthy(params.get("noredir")) else Change.UPDATED
        return [_entry(loc, old, when), _entry(page_url(server, target), Change.CREATED, when)]
    if log_type == "upload" and action == "upload":
        return [_entry(loc, Change.CREATED, when)]
    if log_type == "upload" and action in ("overwrite", "revert"):
        return [_entry(loc, Change.UPDATED, when)]
    return []
