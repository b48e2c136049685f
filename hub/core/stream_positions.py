"""The resume id of a stream of several topics: one position per topic, kept short.

A stream of one topic resumes from one event id. A stream of several topics
(``/events?topic=a&topic=b``, ``?topic_prefix=repo-``: :mod:`hub.live.multiplex`) must
resume each of them exactly where its client was, and its events interleave, so no one
event id says that. Its id (the SSE ``id:``, a WebSocket message's ``"id"``) is a
composite: a **base** position, and the position of every topic whose client has been sent
events after that base. A topic named in the id resumes after its position; every other
topic the stream covers (topics first published since included) resumes after the base.

Meaning, exactly: for a topic named with position ``p``, its client has been sent every
event of that topic up to ``p`` and none after; for any other topic, every event up to the
base and none after. :class:`StreamPositions` keeps that true as events are sent, and keeps
the list short by moving the base forward past every topic it knows all events of
(:meth:`StreamPositions.known_through`: the events it sent, the next event it read, or the
topic's last id as Redis said at a known time). A stream's events then mostly name a
handful of topics, however many it follows.

Wire format: ``m1.`` then the unpadded base64url (RFC 4648 §5) of::

    varint base ms, varint base seq, varint count,
    count x (varint shared, varint rest length, rest, varint ms - base ms, varint seq)

(unsigned LEB128 varints). Topics come in increasing byte order, each name as the number of
leading bytes it shares with the one before and the rest (``repo-0001`` after ``repo-0000``
costs three bytes). Every position named lies after the base. The id is another party's
bytes when it comes back: :func:`decode` is strict (names, order, ranges, no trailing
bytes) and bounded (``stream_max_id_bytes``, ``stream_max_topics``), and anything else is a
400 naming the parameter.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Iterable, Mapping

from hub.core.events import U64_MAX, EventKey
from hub.core.exceptions import BadRequest
from hub.core.topics import TOPIC_NAME

#: What every composite id starts with (``m``ultiple topics, format 1): never an event id
#: or a time, which start with a digit.
MARK = "m1."
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
#: A varint of a 64-bit number takes at most 10 bytes.
_VARINT_BYTES = 10
_NAME_BYTES = 128


def before(key: EventKey) -> EventKey:
    """The position just before ``key`` (every event id is after ``0-0``)."""
    ms, seq = key
    if seq:
        return ms, seq - 1
    return (ms - 1, U64_MAX) if ms else (0, 0)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _entry(previous: bytes, name: bytes, key: EventKey, base: EventKey) -> bytes:
    shared = 0
    limit = min(len(previous), len(name))
    while shared < limit and previous[shared] == name[shared]:
        shared += 1
    rest = name[shared:]
    return _varint(shared) + _varint(len(rest)) + rest + _varint(key[0] - base[0]) + _varint(key[1])


def encode(base: EventKey, listed: Mapping[str, EventKey]) -> str:
    """The composite id of ``base`` and the topics ``listed`` (each after ``base``)."""
    parts = [_varint(base[0]), _varint(base[1]), _varint(len(listed))]
    previous = b""
    for topic in sorted(listed):
        name = topic.encode()
        parts.append(_entry(previous, name, listed[topic], base))
        previous = name
    return MARK + base64.urlsafe_b64encode(b"".join(parts)).rstrip(b"=").decode("ascii")


def is_composite(value: str) -> bool:
    return value.startswith(MARK)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def varint(self, what: str) -> int:
        value = shift = 0
        for _ in range(_VARINT_BYTES):
            if self.at >= len(self.data):
                raise ValueError(f"it ends inside {what}")
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if value > U64_MAX:
                    raise ValueError(f"{what} is beyond 64 bits")
                return value
            shift += 7
        raise ValueError(f"{what} is longer than {_VARINT_BYTES} bytes")

    def take(self, n: int, what: str) -> bytes:
        if self.at + n > len(self.data):
            raise ValueError(f"it ends inside {what}")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out


def decode(
    value: str, *, what: str, max_bytes: int, max_topics: int
) -> tuple[EventKey, dict[str, EventKey]]:
    """The base and listed positions of the composite id ``value`` (of the parameter or
    header ``what``); 400 naming ``what`` and the problem when it is not one this hub could
    have given out, or is beyond the bounds."""
    if len(value) > max_bytes:
        raise BadRequest(
            f"{what} is a resume id of {len(value)} bytes, beyond the hub's limit of "
            f"{max_bytes} (stream_max_id_bytes, RSHUB_STREAM_MAX_ID_BYTES)",
            limit="stream_max_id_bytes",
        )
    try:
        return _decode(value, max_topics)
    except ValueError as exc:
        raise BadRequest(
            f"invalid resume id in {what}: {exc} (resume from an id this hub gave out)",
            rule="a resume id of several topics is m1. and base64url, as the hub writes it",
        ) from None


def _decode(value: str, max_topics: int) -> tuple[EventKey, dict[str, EventKey]]:
    if not value.startswith(MARK):
        raise ValueError(f"it does not start with {MARK!r}")
    text = value[len(MARK) :]
    if not _BASE64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("it is not base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error:
        raise ValueError("it is not base64url") from None
    reader = _Reader(data)
    base = (reader.varint("the base"), reader.varint("the base"))
    count = reader.varint("the count")
    if count > max_topics:
        raise ValueError(
            f"it names {count} topics, beyond the hub's limit of {max_topics} (stream_max_topics)"
        )
    listed: dict[str, EventKey] = {}
    previous = b""
    for index in range(count):
        shared = reader.varint("a name")
        rest = reader.take(reader.varint("a name"), "a name")
        if shared > len(previous) or shared + len(rest) > _NAME_BYTES:
            raise ValueError(f"topic {index} has no valid name")
        name = previous[:shared] + rest
        try:
            topic = name.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"topic {index} has no valid name") from None
        if not TOPIC_NAME.fullmatch(topic) or name <= previous:
            raise ValueError(f"topic {index} has no valid name, or is out of order")
        ms = base[0] + reader.varint("a position")
        key = (ms, reader.varint("a position"))
        if ms > U64_MAX or key <= base:
            raise ValueError(f"the position of topic {topic!r} is not after the base")
        listed[topic] = key
        previous = name
    if reader.at != len(data):
        raise ValueError("bytes follow its last topic")
    return base, listed


class StreamPositions:
    """What a stream of several topics has sent its client, as its resume id says it.

    For every topic it follows: its **position** (the last event sent, or the base) and its
    **horizon** (every event of the topic up to it was sent, or does not exist). The base
    may move up to the lowest horizon (:meth:`advance`): then every topic whose position
    is not after the base needs no entry of its own. Horizons only grow, so a base taken
    from them stays true until the next :meth:`advance`.

    An SSE stream gives out an id per event, so the encoding is kept up to date entry by
    entry (the names in order, each entry's bytes): a new id costs a join and base64 of
    its bytes, not a sort and encoding of every entry.
    """

    __slots__ = ("_chunks", "_encoded", "_horizon", "_listed", "_names", "base")

    def __init__(self, base: EventKey, listed: Mapping[str, EventKey] | None = None) -> None:
        self.base = base
        self._listed: dict[str, EventKey] = {
            topic: key for topic, key in (listed or {}).items() if key > base
        }
        self._horizon: dict[str, EventKey] = {}
        self._encoded: str | None = None
        #: The listed names in order, and each one's entry (front-coded on the one before).
        self._names: list[str] = []
        self._chunks: list[bytes] = []
        self._rebuild()

    def __len__(self) -> int:
        """Topics the id names (besides the base)."""
        return len(self._listed)

    @property
    def topics(self) -> Iterable[str]:
        """The topics followed."""
        return self._horizon.keys()

    def position(self, topic: str) -> EventKey:
        """Where ``topic`` resumes: after its entry, else after the base."""
        return self._listed.get(topic, self.base)

    def follow(self, topic: str) -> EventKey:
        """Track ``topic`` (its position known only as the id says it); where it resumes."""
        position = self.position(topic)
        self._horizon.setdefault(topic, position)
        return position

    def forget_others(self) -> None:
        """Drop the entries of topics not followed (a resume id of another selection: this
        stream's id names only its own topics)."""
        others = self._listed.keys() - self._horizon.keys()
        for topic in others:
            del self._listed[topic]
        if others:
            self._rebuild()

    def drop(self, topic: str) -> None:
        """Stop tracking ``topic`` (it was deleted): the id names it no more, and it no
        longer holds the base back. A topic of that name published to again later starts
        after the base, before which it had no event."""
        self._horizon.pop(topic, None)
        if self._listed.pop(topic, None) is not None:
            self._rebuild()

    def sent(self, topic: str, key: EventKey) -> None:
        """``topic``'s event ``key`` was sent (its events go out in order)."""
        if key > self.base:
            self._put(topic, key)
        if key > self._horizon.get(topic, key):
            self._horizon[topic] = key

    def undo(self, topic: str, position: EventKey, horizon: EventKey) -> None:
        """Take back :meth:`sent` (the event was not sent after all): ``topic`` is at
        ``position`` with ``horizon`` again."""
        if position > self.base:
            self._put(topic, position)
        elif self._listed.pop(topic, None) is not None:
            self._rebuild()
        self._horizon[topic] = horizon

    def horizon(self, topic: str) -> EventKey:
        return self._horizon[topic]

    def lowest_horizon(self, among: Iterable[str]) -> EventKey | None:
        """The lowest horizon of the topics ``among`` (None: none of them)."""
        horizon = self._horizon
        return min((horizon[topic] for topic in among), default=None)

    def raise_base(self, key: EventKey) -> None:
        """Move the base up to ``key``, which the caller knows to be at or below every
        horizon (:meth:`advance` finds that out by looking at all of them)."""
        if key > self.base:
            self.base = key
            self._listed = {t: k for t, k in self._listed.items() if k > key}
            self._rebuild()

    def state(self) -> tuple[EventKey, dict[str, EventKey], dict[str, EventKey]]:
        """Everything, to :meth:`restore` (a write that cannot go out after all)."""
        return self.base, dict(self._listed), dict(self._horizon)

    def restore(self, state: tuple[EventKey, dict[str, EventKey], dict[str, EventKey]]) -> None:
        self.base, self._listed, self._horizon = state[0], dict(state[1]), dict(state[2])
        self._rebuild()

    def known_through(self, topic: str, key: EventKey) -> None:
        """Every event of ``topic`` up to ``key`` was sent or does not exist (the next one
        read lies after it, or Redis said so)."""
        if key > self._horizon.get(topic, key):
            self._horizon[topic] = key

    def advance(self, limit: EventKey | None = None) -> bool:
        """Move the base up to the lowest horizon, and no further than ``limit`` (a stream
        that finds topics as they appear: up to where it knows them all); whether the id
        changed. O(topics): call it when the id names many topics, not per event."""
        if not self._horizon:
            return False
        lowest = min(self._horizon.values())
        if limit is not None and limit < lowest:
            lowest = limit
        if lowest <= self.base:
            return False
        self.base = lowest
        self._listed = {t: key for t, key in self._listed.items() if key > lowest}
        self._rebuild()
        return True

    def encode(self) -> str:
        """The resume id now (kept until the next change)."""
        if self._encoded is None:
            base = self.base
            head = _varint(base[0]) + _varint(base[1]) + _varint(len(self._names))
            data = head + b"".join(self._chunks)
            self._encoded = MARK + base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
        return self._encoded

    def _rebuild(self) -> None:
        listed, base = self._listed, self.base
        self._names = sorted(listed)
        self._chunks = []
        previous = b""
        for topic in self._names:
            name = topic.encode()
            self._chunks.append(_entry(previous, name, listed[topic], base))
            previous = name
        self._encoded = None

    def _put(self, topic: str, key: EventKey) -> None:
        names, chunks, base = self._names, self._chunks, self.base
        at = bisect.bisect_left(names, topic)
        previous = names[at - 1].encode() if at else b""
        chunk = _entry(previous, topic.encode(), key, base)
        if topic in self._listed:
            chunks[at] = chunk
        else:
            names.insert(at, topic)
            chunks.insert(at, chunk)
            if at + 1 < len(names):  # the next entry is now front-coded on this one
                following = names[at + 1]
                chunks[at + 1] = _entry(
                    topic.encode(), following.encode(), self._listed[following], base
                )
        self._listed[topic] = key
        self._encoded = None
