"""Plain WebSub topics: a topic whose content is anything, sans I/O.

A ResourceSync topic carries change notifications, which the hub parses, stores change by
change and renders into each delivery. A **plain WebSub topic** (W3C WebSub, not its
ResourceSync profile) carries whatever its publisher serves: an HTML page, a feed, plain
text, JSON. The operator declares which topics are plain (``RSHUB_WEBSUB_TOPICS``,
:class:`PlainTopics`); the hub then keeps each one's latest content with the
``Content-Type`` it came with, byte for byte (:class:`TopicContent`), and delivers it whole:
WebSub §7 asks the delivery's ``Content-Type`` to match the topic's, and websub.rocks
compares the two header values as strings.

Each new content is also stored as one change of the topic's stream (:func:`content_change`:
the topic URL ``updated``, with the content's type, length and SHA-256), so the topic keeps
every guarantee of the stream (ordering, cursors, retries, Change Lists, WebSocket/SSE
events); a delivery sends the content current when it is made, so a subscriber that fell
behind gets the newest content once, not every version it missed (WebSub distributes a
topic's content, not its history).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from hub.core.events import Change, w3c

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "MAX_CONTENT_TYPE_CHARS",
    "PlainTopics",
    "TopicContent",
    "content_change",
    "content_type_problem",
]

#: What a topic served without a ``Content-Type`` is delivered as: what RFC 9110 §8.3 lets
#: a recipient assume of content that does not say.
DEFAULT_CONTENT_TYPE = "application/octet-stream"

#: The longest ``Content-Type`` a plain topic may have. Every delivery repeats it; RFC 6838
#: §4.2 bounds a type and a subtype at 127 characters each, and parameters rarely add
#: more than a charset or a boundary (at most 70 characters, RFC 2046 §5.1.1).
MAX_CONTENT_TYPE_CHARS = 512

# RFC 9110 §8.3.1 and §5.6: media-type = type "/" subtype *( OWS ";" OWS [ parameter ] ),
# parameter = token "=" ( token / quoted-string ). ASCII only (no obs-text): the value is
# written back into every delivery's head. Written so that no two parts can match the same
# spaces (a ";" starts each parameter, its spaces follow it), so a failing match costs a
# linear scan, not a backtracking search over ways to split the whitespace.
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[\t !#-\[\]-~]|\\[\t -~])*"'
_MEDIA_TYPE = re.compile(
    rf"{_TOKEN}/{_TOKEN}[ \t]*(?:;[ \t]*(?:{_TOKEN}=(?:{_TOKEN}|{_QUOTED})[ \t]*)?)*"
)


def content_type_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a topic's ``Content-Type`` header; None if nothing.

    Kept exactly as given (no case folding, no spaces added or removed): the deliveries
    must repeat the topic's value byte for byte.
    """
    if len(value) > MAX_CONTENT_TYPE_CHARS:
        return f"it is longer than {MAX_CONTENT_TYPE_CHARS} characters ({len(value)})"
    if _MEDIA_TYPE.fullmatch(value) is None:
        shown = value[:100]
        return (
            f"{shown!a} is not one media type (RFC 9110 §8.3.1: type/subtype, then "
            "optional ;name=value parameters, in ASCII)"
        )
    return None


@dataclass(frozen=True, slots=True)
class TopicContent:
    """A plain topic's content: its bytes and the ``Content-Type`` they came with."""

    body: bytes
    content_type: str

    @property
    def digest(self) -> str:
        """The body's SHA-256 as ResourceSync writes a hash (``sha-256:<hex>``)."""
        return "sha-256:" + hashlib.sha256(self.body).hexdigest()

    def same_as(self, stored: tuple[str, str] | None) -> bool:
        """Whether ``stored`` (a stored change's ``(hash, type)``) names this content."""
        return stored == (self.digest, self.content_type)


def content_change(content: TopicContent, topic_url: str, received: datetime) -> Change:
    """The change a new content is stored as: its topic URL ``updated``, with the content's
    type, length and hash (what a ResourceSync Destination polling the topic sees)."""
    event = {
        "loc": topic_url,
        "lastmod": w3c(received.astimezone(UTC)),
        "change": "updated",
        "hash": content.digest,
        "length": len(content.body),
        "type": content.content_type,
    }
    return Change(topic_url, "updated", orjson.dumps(event))


class PlainTopics:
    """Which topics are plain WebSub topics (``RSHUB_WEBSUB_TOPICS``).

    An entry is one of this hub's topic names (``blog``: the topic ``B/topics/blog``), or
    an ``http://``/``https://`` prefix of other sites' topic URLs (every topic URL that
    starts with it, as given in ``hub.topic``/``hub.url`` or a ``rel="self"`` link). A
    topic is plain when its name is listed, or when it is another site's and its URL
    starts with a listed prefix.

    A topic is this hub's own when its URL ends with ``/topics/{its name}``, under whichever
    of the hub's names the client used: another site's topic has a name derived from a
    digest of its URL (:meth:`hub.core.topics.HubUrls.name_from_url`), which its URL cannot
    end with. So a prefix never makes one of the hub's own topics plain, whatever host it
    names (``http://127.0.0.1:`` would otherwise cover a hub on loopback too).
    """

    __slots__ = ("names", "prefixes")

    def __init__(self, entries: Iterable[str]) -> None:
        listed = list(entries)
        self.prefixes = tuple(e for e in listed if "://" in e)
        self.names = frozenset(e for e in listed if "://" not in e)

    def __bool__(self) -> bool:
        return bool(self.names or self.prefixes)

    def covers(self, topic: str, topic_url: str) -> bool:
        """Whether the topic named ``topic``, whose URL is ``topic_url``, is plain."""
        if topic in self.names:
            return True
        if not self.prefixes or topic_url.endswith("/topics/" + topic):
            return False
        return topic_url.startswith(self.prefixes)
