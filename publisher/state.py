"""The publisher's state files: the position of an edit feed or of a bridge.

The file itself is :class:`rsclient.statefile.StateFile` (temporary file, fsync, rename,
directory fsync); this adds the publisher's conventions: a missing file is an empty
object, and failures are :class:`~publisher.exceptions.StateError`.
"""

from __future__ import annotations

from typing import Any

from rsclient.exceptions import StateFileError
from rsclient.statefile import StateFile as _JSONStateFile

from .exceptions import StateError

__all__ = ["StateFile"]


class StateFile(_JSONStateFile):
    """A JSON object kept in one file at ``path``; ``{}`` until first saved."""

    def load(self) -> dict[str, Any]:
        """The saved object, or ``{}`` when there is no file yet.

        Raises:
            StateError: the file exists but is not a JSON object, or cannot be read.
        """
        try:
            return super().load() or {}
        except StateFileError as exc:
            raise StateError(str(exc)) from exc

    def save(self, data: dict[str, Any]) -> None:
        """Replace the file's content with ``data`` atomically and durably.

        Raises:
            StateError: the file cannot be written; it keeps its previous content.
        """
        try:
            super().save(data)
        except StateFileError as exc:
            raise StateError(str(exc)) from exc
