"""ResourceSync rules that well-formed documents must also follow.

:func:`validate` checks a :class:`~resourcesync.models.Document` against the rules of
Z39.99-2014 (Sections 7-13 and Appendix A) and raises the first
:class:`~resourcesync.exceptions.ValidationError` found. Rule ids are listed in
:mod:`resourcesync.exceptions`.

Choices where the standard leaves room, written down here:

* Mandatory ``rs:ln rel="up"`` links (Sections 9-13) are not enforced: the standard's own
  introductory Examples 1-5 omit them, and change notifications are fragments.
* A change notification is a Change List fragment, so its root ``rs:md`` needs no ``from``;
  its entries follow the Change List entry rules (``change``, change time, order).
* Following ResourceSync 1.1, a change entry's time is ``rs:md/@datetime`` when present,
  else ``<lastmod>``; one of the two is mandatory where 1.0 mandates ``<lastmod>``.
* Forward chronological order (equal times allowed) is enforced where the standard says
  "must": Change Lists, Change Dump Manifests, and notifications.
* ``path`` (Sections 11.2, 13.2) is "relative to root of the package and expressed with a
  leading slash": it must start with ``/`` and may not contain ``.`` or ``..`` segments or
  backslashes, which would let a package escape its directory when unpacked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from .datetimes import format_datetime
from .exceptions import ValidationError
from .models import Capability, Change, Document, Entry, Link, Metadata
from .namespaces import CHANGEFREQ_VALUES, HASH_HEX_LENGTHS, MAX_ENTRIES

__all__ = ["HTTP_LOC", "PROFILES", "Profile", "check_hash", "check_path", "validate"]


@dataclass(frozen=True, slots=True)
class Profile:
    """What one document type requires beyond the common rules (Appendix A, 8-13)."""

    #: Mandatory time attribute of the root ``rs:md``: ``"at"``, ``"from"`` or ``None``.
    root_time: str | None = None
    #: Entries must have ``<rs:md>``.
    entry_md: bool = False
    #: Entries describe changes: ``change`` and a change time are mandatory, in order.
    changes: bool = False
    #: Entries name a capability: ``"any"`` or the one value allowed, else ``None``.
    entry_capability: str | None = None
    #: Manifest ``path``: ``"all"`` entries, ``"unless-deleted"``, or ``None``.
    path: str | None = None


_C = Capability
#: Requirements per (capability, is_index).
PROFILES: dict[tuple[Capability, bool], Profile] = {
    (_C.DESCRIPTION, False): Profile(entry_capability=_C.CAPABILITYLIST.value),
    (_C.DESCRIPTION, True): Profile(),
    (_C.CAPABILITYLIST, False): Profile(entry_md=True, entry_capability="any"),
    (_C.RESOURCELIST, False): Profile(root_time="at"),
    (_C.RESOURCELIST, True): Profile(root_time="at"),
    (_C.RESOURCEDUMP, False): Profile(root_time="at"),
    (_C.RESOURCEDUMP, True): Profile(root_time="at"),
    (_C.RESOURCEDUMP_MANIFEST, False): Profile(root_time="at", entry_md=True, path="all"),
    (_C.CHANGELIST, False): Profile(root_time="from", entry_md=True, changes=True),
    (_C.CHANGELIST, True): Profile(root_time="from"),
    (_C.CHANGEDUMP, False): Profile(root_time="from"),
    (_C.CHANGEDUMP, True): Profile(root_time="from"),
    (_C.CHANGEDUMP_MANIFEST, False): Profile(
        root_time="from", entry_md=True, changes=True, path="unless-deleted"
    ),
    (_C.CHANGELIST_NOTIFICATION, False): Profile(entry_md=True, changes=True),
    (_C.CHANGEDUMP_NOTIFICATION, False): Profile(),
}

#: A ``<loc>`` a change can travel with: an absolute http(s) URL with a host, and no spaces
#: or control characters (the Sitemap protocol's "begin with the protocol"; subscribers
#: fetch it, and a relative or bare word means nothing). The hub refuses a notification
#: holding another, and publishers skip such an entry rather than send it.
HTTP_LOC = re.compile(r"(?i:https?)://[^\x00-\x20\x7f-\x9f/?#]+(?:[/?#][^\x00-\x20\x7f-\x9f]*)?")

_HASH_TOKEN = r"(?:md5:[0-9a-fA-F]{32}|sha-1:[0-9a-fA-F]{40}|sha-256:[0-9a-fA-F]{64})"
#: A valid ``hash`` value, whole: what :func:`check_hash` accepts without a word.
HASH_LIST = re.compile(rf"\s*{_HASH_TOKEN}(?:\s+{_HASH_TOKEN})*\s*", re.ASCII)


def check_hash(value: str) -> tuple[str, str] | None:
    """Check a ``hash`` value: whitespace-separated ``algo:hexdigest`` tokens (Section 7).

    Returns ``(rule, detail)`` when the value is wrong, else ``None``.
    """
    if HASH_LIST.fullmatch(value) is not None:
        return None
    tokens = value.split()
    if not tokens:
        return "hash.syntax", "empty hash value"
    for token in tokens:
        algorithm, sep, digest = token.partition(":")
        if not sep or not digest:
            return "hash.syntax", f"{token!r} is not algorithm:hexdigest"
        expected = HASH_HEX_LENGTHS.get(algorithm)
        if expected is None:
            return "hash.algorithm", f"unsupported hash algorithm {algorithm!r} in {token!r}"
        if len(digest) != expected or not all(c in "0123456789abcdefABCDEF" for c in digest):
            return "hash.syntax", f"{token!r} is not {expected} hex digits of {algorithm}"
    return "hash.syntax", f"malformed hash value {value!r}"  # pragma: no cover


def check_path(value: str) -> tuple[str, str] | None:
    """Check a package ``path``: leading ``/``, no ``.``/``..`` segments (11.2, 13.2)."""
    if not value.startswith("/"):
        return "path.syntax", f"path {value!r} does not start with '/'"
    if "\\" in value:
        return "path.syntax", f"path {value!r} contains a backslash"
    for segment in value.split("/"):
        if segment in (".", ".."):
            return "path.syntax", f"path {value!r} contains a {segment!r} segment"
    return None


def validate(doc: Document) -> None:
    """Check ``doc`` against the ResourceSync rules.

    Raises:
        ValidationError: the first broken rule, naming rule id, document and entry index.
    """
    check_document(doc, trusted=False)


def _aware(value: datetime | None, name: str, what: str, index: int | None) -> None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ValidationError(
            "datetime.w3c", name, index, f"{what} {value.isoformat()} has no timezone"
        )


def _check_values(md: Metadata | Link, name: str, index: int | None, where: str) -> None:
    """Checks the parser already guarantees: timezones, non-negative lengths, enums."""
    if isinstance(md, Metadata):
        for field in ("at", "completed", "from_", "until", "datetime"):
            _aware(getattr(md, field), name, f"{where} {field.rstrip('_')}", index)
        if md.change is not None and not isinstance(md.change, Change):
            raise ValidationError("entry.change-value", name, index, f"change {md.change!r}")
    else:
        _aware(md.modified, name, f"{where} modified", index)
    if md.length is not None and md.length < 0:
        raise ValidationError("length.value", name, index, f"{where} length {md.length} < 0")


def _check_common(md: Metadata | Link, name: str, index: int | None, where: str) -> None:
    """Checks that apply to both ``rs:md`` and ``rs:ln`` attributes (Section 7)."""
    if md.hash is not None:
        problem = check_hash(md.hash)
        if problem is not None:
            raise ValidationError(problem[0], name, index, f"{where}: {problem[1]}")
    if md.path is not None:
        problem = check_path(md.path)
        if problem is not None:
            raise ValidationError(problem[0], name, index, f"{where}: {problem[1]}")


def _check_times(md: Metadata, name: str, index: int | None, where: str) -> None:
    if md.at is not None and md.completed is not None and md.completed < md.at:
        raise ValidationError(
            "md.completed-before-at", name, index, f"{where} completed is before at"
        )
    if md.from_ is not None and md.until is not None and md.until < md.from_:
        raise ValidationError("md.until-before-from", name, index, f"{where} until is before from")


def _check_links(links: tuple[Link, ...], name: str, index: int | None, trusted: bool) -> None:
    for n, ln in enumerate(links):
        if not ln.rel:
            raise ValidationError("link.rel-required", name, index, f"rs:ln {n} has no rel")
        if not ln.href:
            raise ValidationError("link.href-required", name, index, f"rs:ln {n} has no href")
        if not trusted:
            _check_values(ln, name, index, f"rs:ln {n}")
        pri = ln.pri
        if pri is not None and not 1 <= pri <= 999_999:
            raise ValidationError("pri.value", name, index, f"rs:ln {n} pri {pri} not 1..999999")
        if ln.hash is not None or ln.path is not None:
            _check_common(ln, name, index, f"rs:ln {n}")


def check_document(doc: Document, *, trusted: bool) -> None:
    """Validate ``doc``; ``trusted`` skips the checks the parser already made."""
    cls = type(doc)
    capability = getattr(cls, "capability", None)
    md = doc.md
    if capability is None:
        raise ValidationError(
            "document.capability-value", "document", None, "use a Document subclass"
        )
    name = str(capability)  # the value, without the enum's Python-level property
    if md.capability is None:
        raise ValidationError("document.capability-required", name, None, "rs:md has no capability")
    if md.capability != capability:
        raise ValidationError(
            "document.capability-value",
            name,
            None,
            f"rs:md capability {md.capability!s} does not match {cls.__name__}",
        )
    if len(doc.entries) > MAX_ENTRIES:
        raise ValidationError(
            "document.max-entries",
            name,
            None,
            f"{len(doc.entries)} entries, more than the limit of {MAX_ENTRIES}",
        )
    profile = PROFILES[(capability, cls.is_index)]
    if not trusted:
        _check_values(md, name, None, "rs:md")
    if profile.root_time == "at" and md.at is None:
        raise ValidationError(f"{name}.at-required", name, None, "rs:md has no at attribute")
    if profile.root_time == "from" and md.from_ is None:
        raise ValidationError(f"{name}.from-required", name, None, "rs:md has no from attribute")
    if md.at is not None or md.from_ is not None:
        _check_times(md, name, None, "rs:md")
    if md.hash is not None or md.path is not None:
        _check_common(md, name, None, "rs:md")
    if doc.links:
        _check_links(doc.links, name, None, trusted)
    _check_entries(doc.entries, profile, name, trusted)


def _check_entries(entries: tuple[Entry, ...], profile: Profile, name: str, trusted: bool) -> None:
    entry_md, changes, entry_capability, path_rule = (
        profile.entry_md,
        profile.changes,
        profile.entry_capability,
        profile.path,
    )
    seen_capabilities: set[str] = set()
    previous: datetime | None = None
    hash_ok = HASH_LIST.fullmatch  # the common, valid case without a function call
    for i, entry in enumerate(entries):
        if not entry.loc:
            raise ValidationError("entry.loc-required", name, i, "no <loc>")
        if not trusted:
            _aware(entry.lastmod, name, "lastmod", i)
        if entry.changefreq is not None and entry.changefreq not in CHANGEFREQ_VALUES:
            raise ValidationError(
                "entry.changefreq-value", name, i, f"changefreq {entry.changefreq!r}"
            )
        md = entry.md
        if md is None:
            if entry_md:
                raise ValidationError("entry.md-required", name, i, "no <rs:md>")
        else:
            if not trusted:
                _check_values(md, name, i, "rs:md")
            digest = md.hash
            if (digest is not None and hash_ok(digest) is None) or md.path is not None:
                _check_common(md, name, i, "rs:md")
            if md.at is not None or md.from_ is not None:
                _check_times(md, name, i, "rs:md")
        if changes:
            change = md.change  # type: ignore[union-attr]  # md checked above
            if change is None:
                raise ValidationError("entry.change-required", name, i, "rs:md has no change")
            when = md.datetime or entry.lastmod  # type: ignore[union-attr]
            if when is None:
                raise ValidationError(
                    "entry.lastmod-required", name, i, "neither <lastmod> nor rs:md datetime"
                )
            if previous is not None and when < previous:
                raise ValidationError(
                    "entry.chronological-order",
                    name,
                    i,
                    f"{'datetime' if md.datetime else 'lastmod'} {format_datetime(when)}"  # type: ignore[union-attr]
                    f" is before the previous entry's {format_datetime(previous)}",
                )
            previous = when
        if path_rule is not None and (md is None or md.path is None):
            if path_rule == "all" or md is None or md.change is not Change.DELETED:
                raise ValidationError("manifest.path-required", name, i, "rs:md has no path")
        if entry_capability is not None and md is not None:
            cap = md.capability
            if cap is None:
                raise ValidationError(
                    "entry.capability-required", name, i, "rs:md has no capability"
                )
            if entry_capability == "any":
                if cap in seen_capabilities:
                    raise ValidationError(
                        "capabilitylist.duplicate-capability",
                        name,
                        i,
                        f"a second entry for capability {cap!s}",
                    )
                seen_capabilities.add(cap)
            elif cap != entry_capability:
                raise ValidationError(
                    "entry.capability-value",
                    name,
                    i,
                    f"capability {cap!s}, expected {entry_capability}",
                )
        if entry.links:
            _check_links(entry.links, name, i, trusted)
