"""The Source's errors: one family, :class:`SourceError`.

``UsageError`` (bad usage, exit 2) and ``StateMismatch`` (a state file this Source cannot
use, exit 2) are said in one line; ``NotAResource`` never leaves the package (a request for
it is a 404).
"""

from __future__ import annotations

__all__ = ["NotAResource", "SourceError", "StateMismatch", "UsageError"]


class SourceError(Exception):
    """Anything the Source refuses or cannot do."""


class UsageError(SourceError):
    """Bad usage: not a directory, a port that cannot be listened on."""


class StateMismatch(SourceError):
    """The state file cannot be used for this Source: unreadable, another layout, or made
    for another directory or URL (its history names other resources)."""


class NotAResource(SourceError):
    """The path names no resource: missing, a symbolic link on the way, not a regular file,
    a reserved or a ``.``/``..`` name."""
