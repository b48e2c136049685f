"""Small JSON state files that survive crashes: the position of a feed or a bridge.

A write goes to a temporary file in the same directory, is fsynced, then renamed over the
old file (``os.replace`` is atomic on POSIX), so a reader sees either the old state or the
new one, never half of each. A missing file is an empty state.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .exceptions import StateError

__all__ = ["StateFile"]


class StateFile:
    """A JSON object kept in one file at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any]:
        """The saved object, or ``{}`` when there is no file yet.

        Raises:
            StateError: the file exists but is not a JSON object.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StateError(f"cannot read state file {self.path}: {exc}") from exc
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise StateError(f"state file {self.path} is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise StateError(f"state file {self.path} does not hold a JSON object")
        return data

    def save(self, data: dict[str, Any]) -> None:
        """Replace the file's content with ``data`` atomically (write, fsync, rename)."""
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(data, handle, separators=(",", ":"), sort_keys=True)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise StateError(f"cannot write state file {self.path}: {exc}") from exc
