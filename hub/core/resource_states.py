"""One URI's latest state as the Resource List fold keeps it: a packed binary value.

The fold (``hub.store.keys.resources``) is one Redis hash per topic, ``loc -> state``,
written by the publish script and read by the Resource List snapshots. A big topic holds
millions of them, so the state is packed: the stored JSON with its event id cost 287
bytes of Redis memory per URI (the loc twice, every field name, the receipt time and the
publisher's ``lastmod`` as text, a hash in hex); packed, 121 (``docs/benchmarks.md``).

A packed state (:data:`FORMAT` first) is::

    0x01 | receipt ms (6 bytes, big-endian) | id sequence (varint) | flags | fields

The flags byte says the change type (its two low bits) and which fields follow, in this
order: the publisher's ``lastmod`` as ms (6 bytes; only where :func:`lastmod_text` writes
it back exactly), ``hash`` as one MD5 or SHA-256 digest (16 or 32 bytes; only for one
digest in lowercase hex), ``length`` (a varint), ``type`` (one byte: a common media type's
number in :data:`MEDIA_TYPES` plus 0x80, or the length of its UTF-8, up to 127), then to
the end anything else (``links``, a package's ``from``/``until``, any field in a form the
others do not hold) as the JSON object it was. A fixed layout read with C-level slices,
not a field-by-field parse: a snapshot reads millions of them. The loc is the hash field,
never repeated. Everything after the event id is the *tail*: the publisher's hub process
packs it (:func:`pack_tails`, beside :mod:`hub.core.packed`), so the script, which alone
knows the event id, only prefixes that; a state the tail cannot hold (an unknown change
type, a tail over 255 bytes) is stored in the earlier form, ``"<event-id> <event-json>"``.

That earlier form is read as well as the packed one (it begins with an ASCII digit, never
0x01): a fold written by an earlier hub keeps being served, and each URI moves to the
packed form when it next changes. Anything else under a loc is :class:`DamagedData`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import orjson

from hub.core.exceptions import DamagedData

#: The first byte of a packed state (an earlier one begins with its event id's digits).
FORMAT = 0x01
#: The longest tail the script takes: its length travels in one byte (0: none).
MAX_TAIL = 255
#: Sequence numbers the script's arithmetic (Lua numbers are doubles) keeps exact.
_MAX_SEQ = 2**53
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
#: The times a ``datetime`` holds, in ms since the epoch: up to the end of the year 9999
#: (253402300800000, which six bytes hold; the publish script has it too).
_MAX_TIME = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MS + 1
#: An earlier form's event id.
_EARLIER_ID = re.compile(rb"[0-9]{1,20}-[0-9]{1,20}")

#: Change types, as the flags' two low bits. ``deleted`` removes the loc from the fold.
_CHANGES = {"created": 1, "updated": 2, "changedump": 3}
_CHANGE_NAMES = (None, "created", "updated", "changedump")
_LASTMOD, _MD5, _SHA256, _LENGTH, _TYPE, _REST = 4, 8, 16, 32, 64, 128
_MAX_LENGTH = 2**64
#: Media types stored as one byte (0x80 + their place here). Part of the format: append
#: only, never reorder. With them a typical state fits Redis's 40-byte allocation.
MEDIA_TYPES = (
    "text/html",
    "text/plain",
    "application/xml",
    "text/xml",
    "application/json",
    "application/pdf",
    "image/jpeg",
    "image/png",
    "image/gif",
    "text/css",
    "application/javascript",
    "text/javascript",
    "application/octet-stream",
    "application/zip",
    "text/csv",
    "application/rdf+xml",
    "application/ld+json",
    "text/turtle",
    "image/svg+xml",
    "image/webp",
    "application/atom+xml",
    "application/rss+xml",
    "application/xhtml+xml",
    "text/markdown",
    "video/mp4",
    "audio/mpeg",
    "application/gzip",
    "image/tiff",
    "text/html; charset=utf-8",
    "text/plain; charset=utf-8",
)
_MEDIA_CODES = {name: bytes((0x80 + i,)) for i, name in enumerate(MEDIA_TYPES)}
#: The longest type stored as text (its length byte stays below 0x80).
_MAX_TYPE = 0x7F
#: Fields the flags hold: a rest naming one of these (or the loc) is damaged.
_HELD = {"lastmod": _LASTMOD, "hash": _MD5 | _SHA256, "length": _LENGTH, "type": _TYPE}


@lru_cache(maxsize=4096)
def lastmod_text(ms: int) -> str:
    """Milliseconds since the epoch as the hub writes a time: ``YYYY-MM-DDThh:mm:ss[.fff]Z``."""
    text = (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}".rstrip("0")
    return text + "Z"


@lru_cache(maxsize=4096)
def _lastmod_ms(value: str) -> int | None:
    """A publisher's ``lastmod`` as ms, where :func:`lastmod_text` writes it back exactly."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    ms, rest = divmod(moment - _EPOCH, _MS)
    if rest or not 0 <= ms < _MAX_TIME or lastmod_text(ms) != value:
        return None
    return int(ms)


def tail(fields: Mapping[str, Any]) -> bytes | None:
    """The packed state of a stored change but its event id; ``None`` when the packed form
    cannot hold it (then the earlier form is stored).

    Written for speed (a publish packs every change's): one pass, locals, no helpers.
    """
    kind, lastmod = fields.get("change"), fields.get("lastmod")
    flags = _CHANGES.get(kind, 0) if type(kind) is str else 0
    if not flags or type(lastmod) is not str or ("links" in fields and not _links_ok(fields)):
        return None
    out = bytearray(1)
    held = 2 if "loc" in fields else 1  # the change, and the loc (the hash field)
    ms = _lastmod_ms(lastmod)
    if ms is not None:
        flags |= _LASTMOD
        out += ms.to_bytes(6, "big")
        held += 1
    value = fields.get("hash")
    if type(value) is str:
        size = len(value)
        hexed = value[4:] if size == 36 and value[:4] == "md5:" else None
        if hexed is None and size == 72 and value[:8] == "sha-256:":
            hexed = value[8:]
        if hexed is not None:
            try:
                raw = bytes.fromhex(hexed)
            except ValueError:
                raw = b""
            if raw.hex() == hexed:  # lowercase, no spaces: it reads back the same
                flags |= _MD5 if size == 36 else _SHA256
                out += raw
                held += 1
    value = fields.get("length")
    if type(value) is int and 0 <= value < _MAX_LENGTH:
        flags |= _LENGTH
        if value < 0x80:
            out.append(value)
        elif value < 0x4000:
            out += bytes((value & 0x7F | 0x80, value >> 7))
        else:
            out += _varint(value)
        held += 1
    value = fields.get("type")
    if type(value) is str:
        code = _MEDIA_CODES.get(value)
        if code is not None:
            flags |= _TYPE
            out += code
            held += 1
        else:
            raw = value.encode()
            if len(raw) <= _MAX_TYPE:
                flags |= _TYPE
                out.append(len(raw))
                out += raw
                held += 1
    if len(fields) > held:
        flags |= _REST
        rest = {
            name: value
            for name, value in fields.items()
            if name not in ("loc", "change") and not _HELD.get(name, 0) & flags
        }
        out += orjson.dumps(rest)
    out[0] = flags
    return bytes(out) if len(out) <= MAX_TAIL else None


def pack_tails(stored: Iterable[bytes]) -> bytes:
    """The tails of a publish's changes (their stored JSON), for the publish script: each
    one length byte then the tail; length 0 where the earlier form is to be stored (a
    deletion, which stores nothing, included)."""
    out = bytearray()
    for event in stored:
        try:
            fields = orjson.loads(event)
        except orjson.JSONDecodeError:
            fields = None
        packed = tail(fields) if isinstance(fields, dict) else None
        if packed is None:
            out.append(0)
        else:
            out.append(len(packed))
            out += packed
    return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _id_bytes(event_id: str) -> bytes | None:
    """An event id as the publish script packs it, or ``None`` where it does not."""
    ms, _, seq = event_id.partition("-")
    try:
        m, s = int(ms), int(seq or 0)
    except ValueError:
        return None
    if not (0 <= m < _MAX_TIME and 0 <= s < _MAX_SEQ):
        return None
    return bytes((FORMAT,)) + m.to_bytes(6, "big") + _varint(s)


def encode(event_id: str, stored: bytes) -> bytes:
    """The fold value the publish script writes for a change (``stored``: its JSON) given
    event id ``event_id``: packed when both its id and its tail pack, else the earlier form.
    A reader that replays events onto a fold it read makes the script's very bytes."""
    try:
        fields = orjson.loads(stored)
    except orjson.JSONDecodeError:
        fields = None
    packed = tail(fields) if isinstance(fields, dict) else None
    head = _id_bytes(event_id) if packed is not None else None
    if head is None or packed is None:
        return event_id.encode() + b" " + stored
    return head + packed


def _damaged(value: bytes, why: str) -> DamagedData:
    return DamagedData(f"a Resource List state {why}: {value[:80]!r}")


def decode(loc: bytes, value: bytes) -> tuple[str, dict[str, Any]]:
    """The event id and stored change (``loc``, ``lastmod``, ``change`` and the rest, as
    :func:`hub.core.events.decode` returns them) of one fold entry, of either form.

    Raises:
        DamagedData: ``value`` is neither form (Redis held something else under the loc).
    """
    if not value or value[0] != FORMAT:
        return _decode_earlier(value)
    end = len(value)
    if end < 9:
        raise _damaged(value, "ends early")
    ms = int.from_bytes(value[1:7], "big")
    seq, pos = value[7], 8
    if seq >= 0x80:  # two bytes inline (a publish's ids share a ms: sequences of hundreds)
        if value[8] < 0x80:
            seq, pos = seq & 0x7F | value[8] << 7, 9
        else:
            seq, pos = _varint_at(value, 7)
    if ms >= _MAX_TIME or pos >= end:  # no time the hub renders: not what the script wrote
        raise _damaged(value, "holds no time the hub writes, or ends early")
    flags = value[pos]
    pos += 1
    change = _CHANGE_NAMES[flags & 3]
    if change is None or (flags & _MD5 and flags & _SHA256):
        raise _damaged(value, "holds no change type, or two hashes")
    try:
        fields: dict[str, Any] = {"loc": loc.decode(), "change": change}
    except UnicodeDecodeError:
        raise DamagedData(f"a Resource List loc is not UTF-8: {loc[:80]!r}") from None
    if flags & _LASTMOD:
        at = int.from_bytes(value[pos : pos + 6], "big")
        pos += 6
        if at >= _MAX_TIME:
            raise _damaged(value, "holds a time out of range")
        fields["lastmod"] = lastmod_text(at)
    if flags & _MD5:
        fields["hash"] = "md5:" + value[pos : pos + 16].hex()
        pos += 16
    elif flags & _SHA256:
        fields["hash"] = "sha-256:" + value[pos : pos + 32].hex()
        pos += 32
    if flags & _LENGTH:
        if pos >= end:
            raise _damaged(value, "ends early")
        length = value[pos]
        if length < 0x80:
            pos += 1
        elif pos + 1 < end and value[pos + 1] < 0x80:
            length, pos = length & 0x7F | value[pos + 1] << 7, pos + 2
        else:
            length, pos = _varint_at(value, pos)
        fields["length"] = length
    if flags & _TYPE:
        if pos >= end:
            raise _damaged(value, "ends early")
        n = value[pos]
        if n >= 0x80:
            if n - 0x80 >= len(MEDIA_TYPES):
                raise _damaged(value, "names no media type")
            fields["type"] = MEDIA_TYPES[n - 0x80]
            pos += 1
        else:
            try:
                fields["type"] = value[pos + 1 : pos + 1 + n].decode()
            except UnicodeDecodeError:
                raise _damaged(value, "holds a type not UTF-8") from None
            pos += 1 + n
    if pos > end:
        raise _damaged(value, "ends early")
    if flags & _REST:
        _rest_into(fields, value[pos:], flags, value)
    elif pos != end:
        raise _damaged(value, "runs on past its fields")
    if type(fields.get("lastmod")) is not str:
        raise _damaged(value, "lacks lastmod")
    return f"{ms}-{seq}", fields


def _varint_at(value: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    for at in range(pos, min(len(value), pos + 10)):
        byte = value[at]
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return n, at + 1
        shift += 7
    raise _damaged(value, "holds an overlong or unended number")


def _rest_into(fields: dict[str, Any], raw: bytes, flags: int, value: bytes) -> None:
    try:
        rest = orjson.loads(raw)
    except orjson.JSONDecodeError:
        rest = None
    if (
        not isinstance(rest, dict)
        or any(name in ("loc", "change") or _HELD.get(name, 0) & flags for name in rest)
        or not _links_ok(rest)
    ):
        raise _damaged(value, "holds other fields that are damaged")
    fields.update(rest)


def _links_ok(fields: Mapping[str, Any]) -> bool:
    """``links``, where there are any, as the renderer reads them: a list of objects."""
    if "links" not in fields:
        return True
    links = fields["links"]
    return type(links) is list and all(type(link) is dict for link in links)


def _decode_earlier(value: bytes) -> tuple[str, dict[str, Any]]:
    """An earlier hub's ``"<event-id> <event-json>"``."""
    event_id, _, stored = value.partition(b" ")
    try:
        fields = orjson.loads(stored)
    except orjson.JSONDecodeError:
        fields = None
    if (
        _EARLIER_ID.fullmatch(event_id) is None
        or int(event_id.partition(b"-")[0]) >= _MAX_TIME
        or not isinstance(fields, dict)
        or not _links_ok(fields)
        or type(fields.get("loc")) is not str
        or type(fields.get("lastmod")) is not str
        or type(fields.get("change")) is not str
    ):
        raise _damaged(value, "is damaged")
    return event_id.decode(), fields
