"""Exceptions raised by :mod:`resourcesync`.

The tree::

    ResourceSyncError                 root of everything this package raises
    ├── DocumentError                 the document is wrong (the peer's fault), http_status 400
    │   ├── ParseError                not XML, wrong root element, wrong namespace
    │   ├── UnsafeDocumentError       DTD / entity declarations, nesting too deep
    │   ├── DocumentTooLargeError     more than ``max_bytes`` bytes, http_status 413
    │   ├── LimitExceededError        over a parse limit (attributes, value size, entries,
    │   │                             links; :class:`resourcesync.limits.Limits`)
    │   └── ValidationError           well-formed XML that breaks a ResourceSync rule
    ├── PackageError                  a ZIP package (Sections 11, 13) is refused, ``rule``
    │   ├── DamagedPackageError       not a ZIP, cut off, or its bytes fail their checksum
    │   ├── UnsafePackageError        an entry that could escape or exhaust the reader: a
    │   │                             name with ``..``, ``/``, ``\\`` or a drive letter, a
    │   │                             symlink, a ZIP bomb, too many entries or bytes
    │   └── ManifestMismatchError     ``manifest.xml`` is missing or invalid, or lies about
    │                                 the package (a path, a length or a hash)
    └── PackageWriteError             what a package writer was given is wrong (a path, a
                                      source whose length changed while it was read)

Every :class:`DocumentError` carries ``http_status``, the status a server should answer
with when the document came in a request body. Every exception here pickles (a server may
parse in a worker process and re-raise the error in the parent).

:class:`ValidationError` names the broken rule with a stable id (``rule``), the document's
capability (``document``) and the 0-based entry index (``index``, ``None`` for the root).
Rule ids are ``<scope>.<problem>``; the scope is the element concerned (``document``,
``md``, ``entry``, ``link``) or the attribute syntax (``datetime``, ``hash``, ``length``,
``pri``, ``path``), or the document type for type-specific rules:

=============================== ==========================================================
rule                            broken requirement (Z39.99-2014 section)
=============================== ==========================================================
document.md-required            root ``<rs:md>`` is mandatory (7)
document.md-repeated            root ``<rs:md>`` appears more than once (7)
document.capability-required    root ``rs:md/@capability`` is mandatory (7)
document.capability-value       unknown capability, or model class does not match it (7)
document.index-not-allowed      ``<sitemapindex>`` root for a capability without index (7)
document.max-entries            more than 50,000 entries (Sitemaps limit, 10.2)
document.max-bytes              serialized document over 50 MB (Sitemaps limit)
document.xml-char               a string holds a character XML cannot carry
<capability>.at-required        ``at`` is mandatory on the root ``rs:md`` (Appendix A)
<capability>.from-required      ``from`` is mandatory on the root ``rs:md`` (Appendix A)
md.completed-before-at          ``completed`` earlier than ``at`` (7)
md.until-before-from            ``until`` earlier than ``from`` (7)
entry.loc-required              ``<loc>`` is mandatory and not empty (7)
entry.element-repeated          ``<loc>``, ``<lastmod>``, ``<changefreq>`` or ``<rs:md>`` twice
entry.lastmod-required          change entries need ``<lastmod>`` or ``rs:md/@datetime`` (12.1)
entry.md-required               ``<rs:md>`` mandatory here (9, 11.2, 12.1, 13.2)
entry.change-required           ``rs:md/@change`` mandatory in change documents (12.1, 13.2)
entry.change-value              ``change`` not created, updated or deleted (7)
entry.capability-required       capability list entries need ``rs:md/@capability`` (9)
entry.capability-value          unknown capability, or not ``capabilitylist`` in a
                                Source Description (8)
entry.changefreq-value          ``<changefreq>`` outside the Sitemaps values (7)
entry.chronological-order       change entries not in forward chronological order (12.1)
capabilitylist.duplicate-capability  two entries for one capability (9)
manifest.path-required          manifest entry without ``rs:md/@path`` (11.2, 13.2)
link.rel-required               ``rs:ln`` without ``rel`` (7)
link.href-required              ``rs:ln`` without ``href`` (7)
datetime.w3c                    not a W3C Datetime, or a time without timezone (7)
hash.syntax                     ``hash`` not a list of ``algo:hex`` of the right length (7)
hash.algorithm                  algorithm other than md5, sha-1, sha-256 (7)
length.value                    ``length`` not a non-negative integer (7)
pri.value                       ``pri`` not an integer in 1..999999 (7)
path.syntax                     ``path`` without leading ``/`` or with ``.``/``..`` (11.2)
=============================== ==========================================================
"""

from __future__ import annotations

__all__ = [
    "DamagedPackageError",
    "DocumentError",
    "DocumentTooLargeError",
    "LimitExceededError",
    "ManifestMismatchError",
    "PackageError",
    "PackageWriteError",
    "ParseError",
    "ResourceSyncError",
    "UnsafeDocumentError",
    "UnsafePackageError",
    "ValidationError",
]


class ResourceSyncError(Exception):
    """Root of every exception this package raises."""


class DocumentError(ResourceSyncError):
    """The document is wrong; a server should reject it with ``http_status``."""

    #: HTTP status a server should answer when this document was a request body.
    http_status: int = 400


class ParseError(DocumentError):
    """The bytes are not XML, or not a Sitemap ``urlset``/``sitemapindex``."""


class UnsafeDocumentError(DocumentError):
    """The document uses DTDs or entities, or nests too deeply; it was not expanded."""


class DocumentTooLargeError(DocumentError):
    """The document exceeds the byte limit; it was rejected before parsing."""

    http_status = 413
    rule = "document.max-bytes"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"document is {size} bytes, more than the limit of {limit} bytes")
        self.size = size
        self.limit = limit

    def __reduce__(self) -> tuple[type[DocumentTooLargeError], tuple[int, int]]:
        return type(self), (self.size, self.limit)


class LimitExceededError(DocumentError):
    """A parse limit is exceeded; ``limit`` names it (a field of ``Limits``)."""

    def __init__(self, limit: str, value: int, maximum: int, where: str) -> None:
        super().__init__(f"{where}: {value:,} is more than the limit of {maximum:,} ({limit})")
        #: The field of :class:`resourcesync.limits.Limits` that was exceeded.
        self.limit = limit
        self.value = value
        self.maximum = maximum
        self.where = where
        #: Stable rule id, ``limit.<field>``.
        self.rule = f"limit.{limit}"
        #: 0-based entry index, when the limit was exceeded inside an entry.
        self.index: int | None = None

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.limit, self.value, self.maximum, self.where), self.__dict__


class ValidationError(DocumentError):
    """A ResourceSync rule is broken; ``rule``, ``document`` and ``index`` say which."""

    def __init__(self, rule: str, document: str, index: int | None, detail: str) -> None:
        where = document if index is None else f"{document} entry {index}"
        super().__init__(f"{where}: {rule}: {detail}")
        #: Stable rule id, see the table in this module's docstring.
        self.rule = rule
        #: Capability of the document (``"changelist"``, ...), or the root element name
        #: when the capability is unknown.
        self.document = document
        #: 0-based index of the offending entry; ``None`` for the root.
        self.index = index
        #: Human-readable detail without the location prefix.
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.rule, self.document, self.index, self.detail)


class PackageError(ResourceSyncError):
    """A package is refused; ``rule`` names the check it failed, ``detail`` says how.

    Nothing of a refused package is left in the reader's target.
    """

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}")
        #: Stable rule id, ``<scope>.<problem>`` (``entry.name-unsafe``, ``zip.truncated``...).
        self.rule = rule
        #: Human-readable detail.
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.rule, self.detail)


class DamagedPackageError(PackageError):
    """Not a ZIP archive, cut off part-way, or an entry's bytes fail their CRC."""


class UnsafePackageError(PackageError):
    """An entry could escape the target or exhaust the reader; nothing was written."""


class ManifestMismatchError(PackageError):
    """``manifest.xml`` is missing or invalid, or does not describe the package's bytes."""


class PackageWriteError(ResourceSyncError):
    """A package writer was given something it cannot package (the caller's fault)."""
