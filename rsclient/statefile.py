"""Files that survive crashes: replaced atomically and durably, never half-written.

:func:`write_atomically` writes to a temporary file in the target's directory, fsyncs it,
renames it over the target (``os.replace`` is atomic on POSIX) and fsyncs the directory,
so that after a crash or power loss a reader finds either the old content or the new one,
and the rename itself is on disk. If anything fails midway, the temporary file is removed
and the old file is left as it was.

:class:`StateFile` keeps one JSON object that way: the publisher's feed and bridge
positions, the subscriber's delivery position.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from .exceptions import StateFileError

__all__ = ["StateFile", "write_atomically"]


def write_atomically(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    temp_prefix: str | None = None,
    durable: bool = True,
) -> None:
    """Replace the file at ``path`` with ``data``; create missing parent directories.

    ``temp_prefix`` names the temporary file (default ``.{name}.``), e.g. so that a
    directory scan can tell it apart. ``durable=False`` skips both fsyncs: still atomic
    for readers, not across a power loss; for bulk data whose loss is recoverable.

    Raises:
        OSError: the file could not be written; the old one is unchanged.
    """
    target = Path(path)
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(directory, temp_prefix or f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        _fsync_directory(directory)


def _create_temporary(directory: Path, prefix: str) -> tuple[int, Path]:
    """A new file for writing, with the permissions the umask gives any new file
    (``tempfile.mkstemp`` would make it 0600, and a mirrored resource unreadable to others).
    """
    for _ in range(100):
        tmp = directory / f"{prefix}{secrets.token_hex(4)}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name {prefix}* in {directory}")


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: fsync the directory itself)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # platforms that cannot open a directory (Windows) have no need
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateFile:
    """A JSON object kept in one file at ``path``, replaced by :func:`write_atomically`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any] | None:
        """The saved object, or ``None`` when there is no file yet.

        Raises:
            StateFileError: the file exists but cannot be read or is not a JSON object.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise StateFileError(f"cannot read state file {self.path}: {exc}") from exc
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise StateFileError(f"state file {self.path} is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise StateFileError(f"state file {self.path} does not hold a JSON object")
        return data

    def save(self, data: dict[str, Any]) -> None:
        """Replace the file's content with ``data``, atomically and durably.

        Raises:
            StateFileError: ``data`` is not JSON-serializable, or the file cannot be
                written. Either way the previous content is kept.
        """
        try:
            text = json.dumps(data, separators=(",", ":"), sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise StateFileError(f"cannot write state file {self.path}: {exc}") from exc
        try:
            write_atomically(self.path, text.encode("utf-8"), temp_prefix=f".{self.path.name}.")
        except OSError as exc:
            raise StateFileError(f"cannot write state file {self.path}: {exc}") from exc
