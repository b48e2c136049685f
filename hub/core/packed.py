"""The packed form of a publish's changes: ``loc NUL change NUL json NUL``, once per change.

The append script (``hub/store/scripts/append.lua``) takes a whole publish as this one
argument, because encoding thousands of arguments cost the client more than the server's
work. This module is the Python side of that format, encoding and decoding; the script's
own loop is the other, and ``tests/hub/test_packed.py`` holds the two together. NUL cannot
occur in XML text (a loc, a change type) nor in JSON that orjson wrote, so it separates.

Beside it travel the changes' Resource List states but their event ids
(:func:`hub.core.resource_states.pack_tails`, binary, so in an argument of their own):
packed here, where the publish was parsed, the script only prefixes each with its id.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from hub.core.resource_states import pack_tails

_SEP = b"\0"
#: Builds a :class:`Packed` without the named tuple's ``__new__`` in Python.
_new = tuple.__new__


class Packed(NamedTuple):
    """Changes as the append script takes them.

    Packing 50,000 changes takes tens of milliseconds; a worker does it for large publishes.
    """

    data: bytes
    changes: int
    #: The changes' packed Resource List states but their ids (``b""``: the earlier form).
    tails: bytes = b""


def pack(changes: Iterable[tuple[str, str, bytes]]) -> Packed:
    """``(loc, change type, stored JSON)`` each; ValueError if a field holds a NUL."""
    rows = list(changes)
    parts = [b"%s\0%s\0%s\0" % (loc.encode(), kind.encode(), event) for loc, kind, event in rows]
    data = b"".join(parts)
    if data.count(_SEP) != 3 * len(parts):  # one pass in C: a stray NUL would misframe
        raise ValueError("a change's loc, type or JSON holds a NUL byte")
    return Packed(data, len(parts), pack_tails(event for _, _, event in rows))


def pack_nul_free(changes: list[tuple[str, str, bytes]]) -> Packed:
    """:func:`pack` of changes whose fields cannot hold a NUL (a loc that
    :data:`hub.core.events.LOC` accepted, a change type, orjson's JSON), without its check:
    a pass over every byte, a tenth of a one-change publish's packing."""
    parts = [b"%s\0%s\0%s\0" % (loc.encode(), kind.encode(), event) for loc, kind, event in changes]
    tails = pack_tails(event for _, _, event in changes)
    return _new(Packed, (b"".join(parts), len(parts), tails))


def unpack(packed: Packed) -> list[tuple[str, str, bytes]]:
    """The ``(loc, change type, stored JSON)`` of each change, in order."""
    fields = _fields(packed)
    return [
        (fields[i].decode(), fields[i + 1].decode(), fields[i + 2])
        for i in range(0, len(fields), 3)
    ]


def stored_json(packed: Packed) -> list[bytes]:
    """Each change's stored JSON, in order: what the stream holds of it."""
    return _fields(packed)[2::3]


def _fields(packed: Packed) -> list[bytes]:
    fields = packed.data.split(_SEP)
    if fields.pop() != b"" or len(fields) != 3 * packed.changes:
        raise ValueError(f"not {packed.changes} packed changes")
    return fields
