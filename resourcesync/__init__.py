"""ResourceSync documents (ANSI/NISO Z39.99-2014), sans I/O: bytes in, models, bytes out.

Parse with :func:`parse`, build documents from the models, write them with
:func:`serialize`, and check them with :func:`validate`. Nothing here touches sockets or
files; callers own the I/O. The ZIP packages of Resource Dumps and Change Dumps are
written by :mod:`resourcesync.package_writer` and read by :mod:`resourcesync.package_reader`,
through the file objects and the directory their callers give.
"""

from .datetimes import format_datetime, parse_datetime
from .exceptions import (
    DamagedPackageError,
    DocumentError,
    DocumentTooLargeError,
    LimitExceededError,
    ManifestMismatchError,
    PackageError,
    PackageWriteError,
    ParseError,
    ResourceSyncError,
    UnsafeDocumentError,
    UnsafePackageError,
    ValidationError,
)
from .limits import DEFAULT_LIMITS, Limits
from .models import (
    DOCUMENT_TYPES,
    Capability,
    CapabilityList,
    Change,
    ChangeDump,
    ChangeDumpIndex,
    ChangeDumpManifest,
    ChangeDumpNotification,
    ChangeList,
    ChangeListIndex,
    ChangeListNotification,
    Document,
    Entry,
    Link,
    Metadata,
    ResourceDump,
    ResourceDumpIndex,
    ResourceDumpManifest,
    ResourceList,
    ResourceListIndex,
    SourceDescription,
    SourceDescriptionIndex,
)
from .parse import parse, parse_root, parse_tree
from .serialize import serialize
from .validate import validate

__all__ = [
    "DEFAULT_LIMITS",
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
    "DamagedPackageError",
    "Document",
    "DocumentError",
    "DocumentTooLargeError",
    "Entry",
    "LimitExceededError",
    "Limits",
    # models
    "Link",
    "ManifestMismatchError",
    "Metadata",
    "PackageError",
    "PackageWriteError",
    "ParseError",
    "ResourceDump",
    "ResourceDumpIndex",
    "ResourceDumpManifest",
    "ResourceList",
    "ResourceListIndex",
    # exceptions
    "ResourceSyncError",
    "SourceDescription",
    "SourceDescriptionIndex",
    "UnsafeDocumentError",
    "UnsafePackageError",
    "ValidationError",
    "format_datetime",
    # functions
    "parse",
    "parse_datetime",
    "parse_root",
    "parse_tree",
    "serialize",
    "validate",
]
