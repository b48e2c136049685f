"""The dumps a Source declares in its ``changedump-notification``: which of its documents a
topic's Capability List links.

A Source that publishes packages of Change Dumps may name its Resource Dump and Change Dump
with root links of the notification, ``<rs:ln rel="resourcedump" href="..."/>`` and
``<rs:ln rel="changedump" href="..."/>`` (the Capability List's own capability names, as
link relations). The hub keeps the latest of each per topic (:mod:`hub.store.dump_links`)
and its Capability List for the topic lists them, so that a Destination discovering the
topic through the hub finds the Source's dumps (``rshub sync`` baselines from the Resource
Dump). An ``href`` that is not an absolute http(s) URL is not kept.

The body was parsed whole before it was stored; here only its head is read again, up to
the first ``<url>`` (root links come before the entries), and at most :data:`MAX_HEAD`
bytes of it, by a pull parser that resolves no entity and reads no DTD: a notification of
50,000 packages costs no second parse. No I/O.
"""

from __future__ import annotations

from lxml import etree

from hub.core.events import LOC
from hub.core.packed import Packed
from resourcesync.namespaces import RS_LN, URL

__all__ = ["DUMP_RELS", "MAX_HEAD", "declared_dumps", "holds_packages"]

#: The link relations a Source declares its dumps with, in the order they are listed.
DUMP_RELS = ("resourcedump", "changedump")
#: Bytes of a body's head read for its root links: far more than a few links take.
MAX_HEAD = 64 * 1024
#: The packed form of a package's change type (``loc NUL change NUL json NUL``): no loc or
#: JSON holds a NUL, so this matches the change field and nothing else.
_PACKAGE_FIELD = b"\0changedump\0"


def holds_packages(changes: Packed) -> bool:
    """Whether a publish's packed changes are packages of a ``changedump-notification``."""
    return changes.data.find(_PACKAGE_FIELD) >= 0


def declared_dumps(body: bytes) -> dict[str, str]:
    """The ``rel -> href`` of the root ``rs:ln`` elements of ``body`` (a notification the
    parser accepted) whose ``rel`` is one of :data:`DUMP_RELS`; the first of each rel wins."""
    parser = etree.XMLPullParser(
        events=("start", "end"), resolve_entities=False, no_network=True, load_dtd=False
    )
    found: dict[str, str] = {}
    depth = 0
    try:
        for offset in range(0, min(len(body), MAX_HEAD), 4096):
            parser.feed(body[offset : offset + 4096])
            for event, element in parser.read_events():
                if event == "end":
                    depth -= 1
                    continue
                depth += 1
                if depth != 2 or not isinstance(element, etree._Element):
                    continue
                if element.tag == URL:
                    return found
                if element.tag == RS_LN:
                    rel, href = element.get("rel"), element.get("href")
                    if rel in DUMP_RELS and rel not in found and _usable(href):
                        found[rel] = href.strip()  # type: ignore[union-attr]  # _usable
    except etree.XMLSyntaxError:  # cut at MAX_HEAD mid-element, say: what was read stands
        pass
    return found


def _usable(href: str | None) -> bool:
    return href is not None and len(href) <= 2048 and LOC.fullmatch(href.strip()) is not None
