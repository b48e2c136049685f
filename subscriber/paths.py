"""The mapping from resource URIs to files in the mirror directory.

``http://Host:8080/a/b%20c/d.txt?x=1`` is stored at ``DIR/http/host_8080/a/b%20c/d.txt%3Fx=1``:

- the scheme, then the host (lower-cased) with ``_PORT`` when a port is given;
- each path segment percent-decoded, then re-encoded so that only unreserved characters
  and ``!$&'()*+,;=:@%`` stay literal: the file name is the canonical spelling, never
  contains ``/`` or NUL, and two spellings of one URI map to one file;
- an empty last segment (``/``, ``/dir/``) becomes ``index``; a query is appended to the
  last segment as ``%3F`` + query (re-encoded the same way); the fragment is dropped.

Refused (:class:`UnsafePathError`): schemes other than http/https, empty hosts, segments
``.`` and ``..`` (also percent-encoded), empty segments (``//``), names starting with
``.rshub`` (reserved for the mirror's own files) and segments longer than 255 bytes.
The result is checked once more to be strictly inside the mirror directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from .exceptions import UnsafePathError

__all__ = ["RESERVED_PREFIX", "uri_to_path", "uri_to_relpath"]

#: Names under the mirror directory that belong to rshub itself (state, temporary files).
RESERVED_PREFIX = ".rshub"

_SAFE = "!$&'()*+,;=:@"
_HOST = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\]")


def _segment(raw: str, uri: str) -> str:
    name = quote(unquote(raw), safe=_SAFE)
    if name in ("", ".", ".."):
        raise UnsafePathError(f"{uri}: path segment {raw!r} cannot be a file name")
    if name.startswith(RESERVED_PREFIX):
        raise UnsafePathError(f"{uri}: names starting with {RESERVED_PREFIX} are reserved")
    if len(name.encode()) > 255:
        raise UnsafePathError(f"{uri}: path segment longer than 255 bytes")
    return name


def uri_to_relpath(uri: str) -> str:
    """The mirror-relative path (``/``-separated) for ``uri``; see the module docstring."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise UnsafePathError(f"{uri}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UnsafePathError(f"{uri}: only http and https URIs can be mirrored")
    host = (parts.hostname or "").lower()
    if not host or _HOST.fullmatch(host) is None:
        raise UnsafePathError(f"{uri}: missing or unusable host")
    host_dir = host.replace(":", "_") + (f"_{port}" if port is not None else "")
    segments = parts.path.split("/")[1:] if parts.path else [""]
    if not segments or segments[-1] == "":
        segments = [*segments[:-1], "index"] if segments else ["index"]
    if parts.query:
        segments[-1] = segments[-1] + "%3F" + quote(unquote(parts.query), safe=_SAFE)
    names = [_segment(s, uri) for s in segments]
    return "/".join([scheme, host_dir, *names])


def uri_to_path(root: Path, uri: str) -> Path:
    """Where ``uri`` lives under ``root``; never outside it."""
    rel = uri_to_relpath(uri)
    path = root / rel
    base = root.resolve()
    resolved = path.resolve()
    if base not in resolved.parents:
        raise UnsafePathError(f"{uri}: maps outside the mirror directory")
    return path
