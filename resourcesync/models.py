"""Immutable models of ResourceSync documents (Z39.99-2014 Sections 7-13).

One :class:`Document` subclass per document type; the type is fixed by the root element
(``<urlset>`` or ``<sitemapindex>``) together with the root ``rs:md/@capability``, which
the class records as ``capability`` and ``is_index``.

Models are pydantic v2 and frozen, and are only ever built through pydantic's public API
(the constructor, ``model_validate``, ``model_construct``), never by writing its private
attributes, so any pydantic 2.x will do. Building them validates the field types only; the
ResourceSync rules live in :mod:`resourcesync.validate`.
"""

from __future__ import annotations

import datetime as _dt
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DOCUMENT_TYPES",
    "Capability",
    "CapabilityList",
    "Change",
    "ChangeDump",
    "ChangeDumpIndex",
    "ChangeDumpManifest",
    "ChangeDumpNotification",
    "ChangeList",
    "ChangeListIndex",
    "ChangeListNotification",
    "Document",
    "Entry",
    "Link",
    "Metadata",
    "ResourceDump",
    "ResourceDumpIndex",
    "ResourceDumpManifest",
    "ResourceList",
    "ResourceListIndex",
    "SourceDescription",
    "SourceDescriptionIndex",
    "construct",
]

# ``Metadata`` has a field called ``datetime`` (ResourceSync 1.1): never shadow the type.
DateTime = _dt.datetime


class Capability(StrEnum):
    """Values of ``rs:md/@capability`` (Section 7; notifications from the 2017 push spec)."""

    #: Source Description (Section 8).
    DESCRIPTION = "description"
    #: Capability List (Section 9).
    CAPABILITYLIST = "capabilitylist"
    #: Resource List and Resource List Index (Sections 10.1, 10.2).
    RESOURCELIST = "resourcelist"
    #: Change List and Change List Index (Sections 12.1, 12.2).
    CHANGELIST = "changelist"
    #: Resource Dump and Resource Dump Index (Section 11.1).
    RESOURCEDUMP = "resourcedump"
    #: Resource Dump Manifest (Section 11.2).
    RESOURCEDUMP_MANIFEST = "resourcedump-manifest"
    #: Change Dump and Change Dump Index (Section 13.1).
    CHANGEDUMP = "changedump"
    #: Change Dump Manifest (Section 13.2).
    CHANGEDUMP_MANIFEST = "changedump-manifest"
    #: Change notification: a Change List fragment pushed over WebSub.
    CHANGELIST_NOTIFICATION = "changelist-notification"
    #: Change Dump notification: the push analogue for packaged bitstreams.
    CHANGEDUMP_NOTIFICATION = "changedump-notification"


class Change(StrEnum):
    """Values of ``rs:md/@change`` (Section 7)."""

    #: The resource was created.
    CREATED = "created"
    #: The resource was updated.
    UPDATED = "updated"
    #: The resource was deleted.
    DELETED = "deleted"


#: ``defer_build``: each model's validator is built at its first use (or by
#: :func:`build_models`), not at import: the 19 of them took ~20 ms of CPU at every import,
#: before a restarted hub could serve.
_CONFIG = ConfigDict(frozen=True, populate_by_name=True, extra="forbid", defer_build=True)


class Link(BaseModel):
    """An ``<rs:ln>``: a link to a related resource or document (Sections 7, 14).

    ``extra`` keeps attributes that ResourceSync does not define, keyed by their
    ``{namespace}name``, so that a parse/serialize round trip loses nothing.
    """

    model_config = _CONFIG

    rel: str
    href: str
    modified: DateTime | None = None
    hash: str | None = None
    length: int | None = None
    type: str | None = None
    pri: int | None = None
    encoding: str | None = None
    path: str | None = None
    extra: dict[str, str] = Field(default_factory=dict)


class Metadata(BaseModel):
    """An ``<rs:md>``: about the document at the root, about the resource in an entry.

    ``from_`` is spelled ``from`` in XML and accepted under that alias. ``datetime`` is
    the ResourceSync 1.1 change time; ``extra`` keeps undefined attributes.
    """

    model_config = _CONFIG

    capability: Capability | None = None
    at: DateTime | None = None
    completed: DateTime | None = None
    from_: DateTime | None = Field(default=None, alias="from")
    until: DateTime | None = None
    change: Change | None = None
    datetime: DateTime | None = None
    hash: str | None = None
    length: int | None = None
    type: str | None = None
    encoding: str | None = None
    path: str | None = None
    extra: dict[str, str] = Field(default_factory=dict)


class Entry(BaseModel):
    """A ``<url>`` (or ``<sitemap>`` in an index): one resource, change or document."""

    model_config = _CONFIG

    loc: str
    lastmod: DateTime | None = None
    changefreq: str | None = None
    md: Metadata | None = None
    links: tuple[Link, ...] = ()

    @property
    def change(self) -> Change | None:
        """The nature of the change, for entries of change documents."""
        return None if self.md is None else self.md.change

    @property
    def change_time(self) -> DateTime | None:
        """When the change happened: ``rs:md/@datetime`` if given (1.1), else ``lastmod``."""
        md = self.md
        if md is not None and md.datetime is not None:
            return md.datetime
        return self.lastmod


class Document(BaseModel):
    """A ResourceSync document: root ``rs:md``, root ``rs:ln`` links and entries.

    Do not instantiate this base class; pick the subclass for the document type. When
    ``md`` lacks a capability, the subclass fills in its own.
    """

    model_config = _CONFIG

    #: The root ``rs:md/@capability`` of this document type.
    capability: ClassVar[Capability]
    #: Whether the root element is ``<sitemapindex>`` (else ``<urlset>``).
    is_index: ClassVar[bool] = False

    md: Metadata = Field(default_factory=Metadata)
    links: tuple[Link, ...] = ()
    entries: tuple[Entry, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _default_capability(cls, data: Any) -> Any:
        capability = getattr(cls, "capability", None)
        if capability is None or not isinstance(data, dict):
            return data
        md = data.get("md")
        if md is None:
            return {**data, "md": Metadata.model_construct(capability=capability, extra={})}
        # dict first: isinstance() of a pydantic model class runs Python (its metaclass's
        # __instancecheck__), and parsed documents hand in dicts.
        if isinstance(md, dict):
            if md.get("capability") is None:
                return {**data, "md": {**md, "capability": capability}}
        elif isinstance(md, Metadata) and md.capability is None:
            return {**data, "md": md.model_copy(update={"capability": capability})}
        return data

    @property
    def up(self) -> str | None:
        """The ``href`` of the first root link with ``rel="up"``, if any."""
        return next((ln.href for ln in self.links if ln.rel == "up"), None)


class SourceDescription(Document):
    """Source Description: the Source's Capability Lists (Section 8)."""

    capability = Capability.DESCRIPTION


class SourceDescriptionIndex(Document):
    """Source Description Index, grouping several Source Descriptions (Section 8)."""

    capability = Capability.DESCRIPTION
    is_index = True


class CapabilityList(Document):
    """Capability List: the capabilities offered for one set of resources (Section 9)."""

    capability = Capability.CAPABILITYLIST


class ResourceList(Document):
    """Resource List: a snapshot of resources at ``md.at`` (Section 10.1)."""

    capability = Capability.RESOURCELIST


class ResourceListIndex(Document):
    """Resource List Index: the Resource Lists of one snapshot (Section 10.2)."""

    capability = Capability.RESOURCELIST
    is_index = True


class ChangeList(Document):
    """Change List: changes since ``md.from_``, in forward chronological order (12.1)."""

    capability = Capability.CHANGELIST


class ChangeListIndex(Document):
    """Change List Index: Change Lists in forward chronological order (Section 12.2)."""

    capability = Capability.CHANGELIST
    is_index = True


class ResourceDump(Document):
    """Resource Dump: packages of resource bitstreams (Section 11.1)."""

    capability = Capability.RESOURCEDUMP


class ResourceDumpIndex(Document):
    """Resource Dump Index, grouping several Resource Dumps (Section 11.1)."""

    capability = Capability.RESOURCEDUMP
    is_index = True


class ResourceDumpManifest(Document):
    """Resource Dump Manifest: the bitstreams inside one package (Section 11.2)."""

    capability = Capability.RESOURCEDUMP_MANIFEST


class ChangeDump(Document):
    """Change Dump: packages of changed bitstreams (Section 13.1)."""

    capability = Capability.CHANGEDUMP


class ChangeDumpIndex(Document):
    """Change Dump Index, grouping several Change Dumps (Section 13.1)."""

    capability = Capability.CHANGEDUMP
    is_index = True


class ChangeDumpManifest(Document):
    """Change Dump Manifest: the changed bitstreams inside one package (Section 13.2)."""

    capability = Capability.CHANGEDUMP_MANIFEST


class ChangeListNotification(Document):
    """Change notification: a Change List fragment pushed to subscribers (push spec).

    It is a fragment, so unlike a Change List its root ``rs:md`` needs no ``from``.
    """

    capability = Capability.CHANGELIST_NOTIFICATION


class ChangeDumpNotification(Document):
    """Change Dump notification: announces new change packages (push spec)."""

    capability = Capability.CHANGEDUMP_NOTIFICATION


#: Document class for each (capability, is_index) pair that the standard defines.
DOCUMENT_TYPES: dict[tuple[Capability, bool], type[Document]] = {
    (cls.capability, cls.is_index): cls
    for cls in (
        SourceDescription,
        SourceDescriptionIndex,
        CapabilityList,
        ResourceList,
        ResourceListIndex,
        ChangeList,
        ChangeListIndex,
        ResourceDump,
        ResourceDumpIndex,
        ResourceDumpManifest,
        ChangeDump,
        ChangeDumpIndex,
        ChangeDumpManifest,
        ChangeListNotification,
        ChangeDumpNotification,
    )
}

M = TypeVar("M", bound=BaseModel)


def build_models() -> None:
    """Build every model's validator now rather than at its first use (a server calls it
    once it serves, so that no request pays for it). Idempotent and thread-safe."""
    models: tuple[type[BaseModel], ...] = (Link, Metadata, Entry, Document)
    for model in (*models, *DOCUMENT_TYPES.values()):
        model.model_rebuild()


def construct(cls: type[M], values: dict[str, Any]) -> M:
    """Build ``cls`` from already-valid ``values`` keyed by field name, without validation.

    :meth:`BaseModel.model_construct` with ``model_fields_set`` the keys given; missing
    fields get their defaults. For callers that checked the values themselves.
    """
    return cls.model_construct(set(values), **values)
