"""How much of a document the parser will read: bounds that keep parsing linear and short.

A document within ``max_bytes`` can still be built to make a parser slow: one element with
50,000 attributes (reading them is quadratic in lxml), 50,000 links in one entry, or megabyte
attribute values. Each bound here is checked before the work it bounds; breaking one raises
:class:`resourcesync.LimitExceededError` naming the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .namespaces import MAX_ENTRIES


@dataclass(frozen=True, slots=True)
class Limits:
    #: Entries (``<url>``/``<sitemap>``) per document; Sitemaps allow 50,000.
    max_entries: int = MAX_ENTRIES
    #: Attributes on one ``<rs:md>`` or ``<rs:ln>``; ResourceSync defines at most 12.
    max_attributes: int = 64
    #: Characters in one attribute value, and in the text of ``<loc>``, ``<lastmod>`` and
    #: ``<changefreq>`` (URLs are at most 2,048 characters under the Sitemaps protocol).
    max_value_chars: int = 8192
    #: ``<rs:ln>`` elements in one entry (or at the root).
    max_links: int = 1024


#: The limits :func:`resourcesync.parse` applies unless given others.
DEFAULT_LIMITS = Limits()
