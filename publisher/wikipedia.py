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
from resourcesync.validate import HTTP_LOC

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
            names = (event.get("wiki"), event.get("server_name"), meta_of(event).get("domain"))
            if not self.wikis & {n for n in names if isinstance(n, str)}:
                return False
        if self.namespaces:
            namespace = event.get("namespace")
            if type(namespace) is not int or namespace not in self.namespaces:
                return False
        return self.bots or not event.get("bot", False)


def meta_of(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The event's ``meta`` object, or an empty one when the feed sent something else."""
    return _mapping(event.get("meta"))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _integer(value: Any) -> int | None:
    """``value`` when it is an integer (not a bool, which Python counts as one)."""
    return value if type(value) is int else None


def _server(event: Mapping[str, Any]) -> str:
    """The event's ``server_url`` if it is an absolute http(s) URL a ``loc`` can start
    with (the hub's rule); else ValueError: one ``loc`` the hub refuses fails its whole
    notification, other events' changes with it."""
    server = event.get("server_url")
    if not isinstance(server, str) or HTTP_LOC.fullmatch(server) is None:
        raise ValueError(f"event's server_url is no http(s) URL: {server!r:.100}")
    return server


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
    dt = meta_of(event).get("dt")
    if isinstance(dt, str):
        try:
            return parse_datetime(dt)
        except ValueError:
            pass
    stamp = event.get("timestamp")
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        try:
            return datetime.fromtimestamp(stamp, tz=UTC)
        except (OverflowError, OSError, ValueError):  # out of range, NaN
            raise ValueError(f"event's timestamp {stamp!r:.40} is no time") from None
    raise ValueError("event has neither meta.dt nor timestamp")


def _truthy(value: Any) -> bool:
    return value in (True, 1, "1", "true", "yes")


def _revision_links(event: Mapping[str, Any], server: str, title: str) -> tuple[Link, ...]:
    revision = _mapping(event.get("revision"))
    new, old = _integer(revision.get("new")), _integer(revision.get("old"))
    script = event.get("server_script_path") or "/w"
    if not isinstance(script, str) or not script.startswith("/"):
        return ()  # no revision URL can be made: the change goes without its links
    script = quote(script, safe="/")  # whatever else it holds, escaped
    links: list[Link] = []
    if new is not None:
        links.append(Link(rel="latest-version", href=revision_url(server, script, title, new)))
    if old is not None:
        links.append(Link(rel="predecessor-version", href=revision_url(server, script, title, old)))
    if new is not None:
        length = _integer(_mapping(event.get("length")).get("new"))
        links.append(
            Link(
                rel="alternate",
                href=revision_url(server, script, title, new, raw=True),
                type=WIKITEXT_TYPE,
                length=length if length is not None and length >= 0 else None,
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
    title = event.get("title")
    if not isinstance(title, str) or not title:
        raise ValueError("event has no title")
    server = _server(event)
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
    if not isinstance(action, str):  # compared with sets below: hashable text only
        return []
    params = _mapping(event.get("log_params"))
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
