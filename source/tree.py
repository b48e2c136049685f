"""The directory as resources: which files are resources, their keys, their digests.

A resource is a regular file reached from the directory through real directories only.
Symbolic links are never followed, neither to a file nor to a directory, so nothing
outside the directory is ever read, hashed or served; nor are FIFOs, sockets or devices.
Names starting with ``.rshub`` are reserved (a state file kept inside the directory, a
mirror's own state) and are never resources.

Every file is reached by ``openat`` from the directory's own descriptor, one path
component at a time with ``O_NOFOLLOW``: a directory replaced by a symbolic link between a
scan and a read is refused, not followed (a check of the path followed by an ``open`` of
it would leave that window open).

A resource's *key* is its path relative to the directory, its bytes percent-encoded
(:func:`key_of`): plain ASCII, hence JSON- and URL-safe whatever bytes a file name holds,
and the URL path under which it is served. Everything here blocks: callers run it in a
thread (:func:`asyncio.to_thread`), so that hashing a large file never stalls serving.
"""

from __future__ import annotations

import functools
import hashlib
import mimetypes
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote_to_bytes

from .exceptions import NotAResource

__all__ = [
    "RESERVED_PREFIX",
    "FileFacts",
    "digest_file",
    "key_from_url_path",
    "key_of",
    "media_type",
    "open_resource",
    "scan",
]

#: Names (of files or directories) that are never resources.
RESERVED_PREFIX = ".rshub"
#: Bytes read at a time while hashing: large enough to be fast, small enough to stay light.
_CHUNK = 1 << 20
#: Times a file that changes while it is hashed is read again before it is left to the next
#: directory event (which its change also causes).
_HASH_TRIES = 3
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: a FIFO put in a file's place opens at once instead of blocking the thread.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class FileFacts:
    """What a scan learned about one file: its size, digests and the stamp that tells
    whether it may have changed since (size, modification time, inode)."""

    length: int
    mtime_ns: int
    inode: int
    md5: str
    sha256: str

    @property
    def hash(self) -> str:
        """The ``rs:md/@hash`` value: both digests (Section 7 allows several)."""
        return f"md5:{self.md5} sha-256:{self.sha256}"

    def same_stamp(self, st: os.stat_result) -> bool:
        return (st.st_size, st.st_mtime_ns, st.st_ino) == (
            self.length,
            self.mtime_ns,
            self.inode,
        )

    def same_content(self, other: FileFacts) -> bool:
        return (self.length, self.md5, self.sha256) == (other.length, other.md5, other.sha256)

    def to_json(self) -> list[object]:
        return [self.length, self.mtime_ns, self.inode, self.md5, self.sha256]

    @classmethod
    def from_json(cls, data: list[object]) -> FileFacts:
        length, mtime_ns, inode, md5, sha256 = data
        return cls(int(str(length)), int(str(mtime_ns)), int(str(inode)), str(md5), str(sha256))


def key_of(parts: list[bytes]) -> str:
    """The key of the file at ``parts`` (path components, as bytes)."""
    return quote(b"/".join(parts), safe="/")


def key_from_url_path(raw: str) -> str | None:
    """The key a request's raw (still percent-encoded) path below the files' prefix names,
    whatever its spelling (``%41`` or ``A``); ``None`` when no key can be spelled so
    (an empty, ``.``, ``..`` or reserved segment, a NUL)."""
    data = unquote_to_bytes(raw)
    parts = data.split(b"/")
    if any(not _allowed(p) for p in parts):
        return None
    return key_of(parts)


def _allowed(name: bytes) -> bool:
    return (
        bool(name)
        and name not in (b".", b"..")
        and b"\0" not in name
        and not name.startswith(RESERVED_PREFIX.encode())
    )


def _parts(key: str) -> list[bytes]:
    parts = unquote_to_bytes(key).split(b"/") if key else []
    if any(not _allowed(p) for p in parts):
        raise NotAResource(key)
    return parts


def media_type(key: str) -> str:
    """The resource's ``type``, guessed from its name (``application/octet-stream`` when
    the name says nothing)."""
    name = key.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return _media_type_of("x" + name[dot:].lower() if dot > 0 else name)


@functools.lru_cache(maxsize=1024)
def _media_type_of(name: str) -> str:
    # One guess per suffix: mimetypes parses the name as a URL each time.
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or "application/octet-stream"


def _walk_to(root_fd: int, parts: list[bytes]) -> int:
    """A descriptor of the directory at ``parts`` below ``root_fd`` (a duplicate when
    ``parts`` is empty), reached through real directories only."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError:
        os.close(fd)
        raise
    return fd


def open_resource(root: str, key: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file ``key`` names below ``root``, and its
    ``fstat``; the caller closes it.

    Raises:
        NotAResource: no regular file is there, or reaching it would follow a link.
    """
    parts = _parts(key)
    if not parts:
        raise NotAResource(key)
    try:
        root_fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError as exc:
        raise NotAResource(key) from exc
    try:
        return _open_file(root_fd, parts)
    finally:
        os.close(root_fd)


def _open_file(root_fd: int, parts: list[bytes]) -> tuple[int, os.stat_result]:
    try:
        dir_fd = _walk_to(root_fd, parts[:-1])
    except OSError as exc:
        raise NotAResource(key_of(parts)) from exc
    try:
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise NotAResource(key_of(parts)) from exc
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotAResource(key_of(parts))
    return fd, st


def digest_file(fd: int) -> FileFacts | None:
    """Read the open file whole and return its facts; ``None`` if it kept changing while
    it was read (:data:`_HASH_TRIES` times)."""
    for _ in range(_HASH_TRIES):
        before = os.fstat(fd)
        md5, sha256 = hashlib.md5(), hashlib.sha256()
        os.lseek(fd, 0, os.SEEK_SET)
        length = 0
        while chunk := os.read(fd, _CHUNK):
            md5.update(chunk)
            sha256.update(chunk)
            length += len(chunk)
        after = os.fstat(fd)
        if (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns) and (
            length == after.st_size
        ):
            return FileFacts(
                length, after.st_mtime_ns, after.st_ino, md5.hexdigest(), sha256.hexdigest()
            )
    return None


def scan(root: str, under: str, known: Mapping[str, FileFacts]) -> dict[str, FileFacts]:
    """The resources at or below the key ``under`` (``""``: the whole directory), by key.

    A file whose stamp equals its ``known`` facts is not read again. A file that vanishes
    or changes type while it is scanned is left out (its own directory event follows).
    """
    try:
        parts = _parts(under)
    except NotAResource:
        return {}
    found: dict[str, FileFacts] = {}
    try:
        root_fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError:
        return found
    try:
        if parts:
            # ``under`` may name a file or a directory.
            try:
                fd, st = _open_file(root_fd, parts)
            except NotAResource:
                fd = -1
            if fd >= 0:
                try:
                    facts = _facts(fd, st, known.get(under))
                finally:
                    os.close(fd)
                if facts is not None:
                    found[under] = facts
                return found
        try:
            start = _walk_to(root_fd, parts)
        except OSError:
            return found
        for key, fd, st in _files(start, parts):
            try:
                facts = _facts(fd, st, known.get(key))
            finally:
                os.close(fd)
            if facts is not None:
                found[key] = facts
    finally:
        os.close(root_fd)
    return found


def _facts(fd: int, st: os.stat_result, old: FileFacts | None) -> FileFacts | None:
    if old is not None and old.same_stamp(st):
        return old
    try:
        return digest_file(fd)
    except OSError:
        return None


def _files(dir_fd: int, parts: list[bytes]) -> Iterator[tuple[str, int, os.stat_result]]:
    """Every regular file below the directory ``dir_fd`` (which this closes), opened;
    depth first, each directory's names in byte order."""
    try:
        names = sorted(os.listdir(dir_fd))
    except OSError:
        os.close(dir_fd)
        return
    try:
        for text in names:
            name = os.fsencode(text)
            if not _allowed(name):
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError:
                    continue
                yield from _files(child, [*parts, name])
            elif stat.S_ISREG(st.st_mode):
                try:
                    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
                except OSError:
                    continue
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode):
                    os.close(fd)
                    continue
                yield key_of([*parts, name]), fd, fst
    finally:
        os.close(dir_fd)
