"""The Resource List fold's packed state: round trips, its size, the earlier form, damage.

:mod:`hub.core.resource_states` packs what a Resource List page needs of a URI's latest
change; these hold that everything reads back as the stored change it came from, that a
state the packed form cannot hold is kept in the earlier ``"<id> <json>"`` form (which
is read too), and that bytes the hub did not write are :class:`DamagedData`, never a
crash, named cases and a seeded fuzz of mutations alike.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from hub.core import rendering
from hub.core.exceptions import DamagedData
from hub.core.resource_states import (
    FORMAT,
    MAX_TAIL,
    MEDIA_TYPES,
    decode,
    encode,
    pack_tails,
    tail,
)

ID = "1795341600000-123"
LOC = "http://example.org/ä/x?q=1"


def _event(**fields: Any) -> dict[str, Any]:
    return {"loc": LOC, "lastmod": "2026-11-22T10:00:00Z", "change": "updated"} | fields


ROUND_TRIPS = {
    "plain": _event(),
    "bench-like": _event(hash="md5:" + "0" * 28 + "3039", length=1345, type="text/html"),
    "created, ms lastmod": _event(change="created", lastmod="2026-11-22T10:00:00.25Z"),
    "microsecond lastmod, as text": _event(lastmod="2026-11-22T10:00:00.123456Z"),
    "offset lastmod, as text": _event(lastmod="2026-11-22T10:00:00+02:00"),
    "lastmod no time at all": _event(lastmod="yesterday"),
    "epoch lastmod": _event(lastmod="1970-01-01T00:00:00Z"),
    "year 9999 lastmod": _event(lastmod="9999-12-31T23:59:59.999Z"),
    "two digests": _event(hash="md5:" + "ab" * 16 + " sha-256:" + "cd" * 32),
    "sha-1": _event(hash="sha-1:" + "12" * 20),
    "uppercase hex, as text": _event(hash="md5:" + "AB" * 16),
    "short digest, as text": _event(hash="md5:abcd"),
    "odd spacing in hash": _event(hash=" md5:" + "ab" * 16 + "  x "),
    "empty hash": _event(hash=""),
    "length 0": _event(length=0),
    "length 2**64 - 1": _event(length=2**64 - 1),
    "length negative, in the rest": _event(length=-1),
    "length as text, in the rest": _event(length="12"),
    "type not text, in the rest": _event(type=5),
    "hash not text, in the rest": _event(hash=["md5:x"]),
    "links": _event(links=[{"rel": "describedby", "href": "http://example.org/é"}]),
    "a package": _event(
        change="changedump", **{"from": "2026-11-22T09:00:00Z", "until": "2026-11-22T10:00:00Z"}
    ),
    "unicode type": _event(type="text/plain; charset=ü"),
    "a long type, in the rest": _event(type="x" * 190 + "é" * 5),
    "a type of 127 bytes": _event(type="x" * 125 + "é"),
    "every common media type": _event(type="application/ld+json"),
    "no loc in the JSON": {"lastmod": "2026-11-22T10:00:00Z", "change": "updated", "n": 1},
}


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_a_state_reads_back_as_the_stored_change(name: str) -> None:
    fields = ROUND_TRIPS[name]
    stored = orjson.dumps(fields)
    value = encode(ID, stored)
    assert value[0] == FORMAT
    assert decode(LOC.encode(), value) == (ID, {"loc": LOC} | fields)
    # what the publish script gets is the same state but its id
    packed = tail(fields)
    assert packed is not None and value.endswith(packed)
    assert pack_tails([stored]) == bytes((len(packed),)) + packed


def test_a_typical_state_is_a_quarter_of_its_json() -> None:
    stored = orjson.dumps(ROUND_TRIPS["bench-like"])
    assert len(stored) > 150
    # 36 bytes and Redis's string header fit a 40-byte allocation: ~115 B per URI with its loc
    assert len(encode(ID, stored)) <= 36


@pytest.mark.parametrize("media_type", MEDIA_TYPES)
def test_each_common_media_type_is_one_byte(media_type: str) -> None:
    fields = _event(type=media_type)
    value = encode(ID, orjson.dumps(fields))
    assert value.endswith(bytes((0x80 + MEDIA_TYPES.index(media_type),)))
    assert decode(LOC.encode(), value) == (ID, fields)


def test_a_packed_state_reads_back_from_its_bytes() -> None:
    """The layout, byte by byte (the publish script writes the id part on its own)."""
    value = encode("1764000000000-300", orjson.dumps(ROUND_TRIPS["bench-like"]))
    assert value[:10] == bytes((FORMAT, *TIME, 0xAC, 0x02, 2 | LASTMOD | 8 | 32 | 64))
    assert decode(LOC.encode(), HEAD + bytes((1 | LASTMOD,)) + TIME) == (
        "1-0",
        {"loc": LOC, "change": "created", "lastmod": "2025-11-24T16:00:00Z"},
    )


EARLIER = {
    "unknown change type": _event(change="moved"),
    "no lastmod": {"loc": LOC, "change": "updated"},
    "lastmod not text": _event(lastmod=5),
    "tail over 255 bytes": _event(links=[{"rel": "x", "href": "x" * MAX_TAIL}]),
}


@pytest.mark.parametrize("name", EARLIER)
def test_what_does_not_pack_is_stored_in_the_earlier_form(name: str) -> None:
    stored = orjson.dumps(EARLIER[name])
    assert tail(EARLIER[name]) is None
    assert pack_tails([stored]) == b"\0"
    assert encode(ID, stored) == ID.encode() + b" " + stored


@pytest.mark.parametrize("event_id", ["253402300800000-0", "1-9007199254740992"])
def test_an_id_that_does_not_pack_is_stored_in_the_earlier_form(event_id: str) -> None:
    stored = orjson.dumps(_event())
    assert encode(event_id, stored) == event_id.encode() + b" " + stored


def test_deletions_and_unreadable_json_get_no_tail() -> None:
    deleted = orjson.dumps(_event(change="deleted"))
    assert pack_tails([deleted, b"{not json", b"[1]", orjson.dumps(_event())])[:3] == b"\0\0\0"


def test_an_earlier_hubs_state_is_read() -> None:
    fields = ROUND_TRIPS["bench-like"]
    value = ID.encode() + b" " + orjson.dumps(fields)
    assert decode(b"ignored: the earlier form names its loc", value) == (ID, fields)


#: A packed state's id (1 ms, sequence 0), its flags for a lastmod and the rest, a time.
HEAD = bytes((FORMAT, 0, 0, 0, 0, 0, 1, 0))
LASTMOD, REST = 4, 128
TIME = (1_764_000_000_000).to_bytes(6, "big")

DAMAGED = {
    "empty": b"",
    "garbage": b"garbage",
    "earlier form, no JSON": b"1-0 {not json",
    "earlier form, no id": b" " + orjson.dumps(_event()),
    "earlier form, id not digits": b"1-x " + orjson.dumps(_event()),
    "earlier form, id past year 9999": b"253402300800000-0 " + orjson.dumps(_event()),
    "earlier form, lacks lastmod": b"1-0 " + orjson.dumps({"loc": LOC, "change": "updated"}),
    "earlier form, links not a list": b"1-0 " + orjson.dumps(_event(links=5)),
    "only the format byte": bytes((FORMAT,)),
    "id cut short": bytes((FORMAT, 0, 0, 1)),
    "no flags": HEAD,
    "no change type": HEAD + bytes((LASTMOD,)) + TIME,
    "two hashes": HEAD + bytes((2 | LASTMOD | 8 | 16,)) + TIME + bytes(48),
    "time past year 9999": bytes((FORMAT, 255, 255, 255, 255, 255, 255, 0, 2 | LASTMOD)) + TIME,
    "no lastmod": HEAD + bytes((2,)),
    "lastmod past year 9999": HEAD + bytes((2 | LASTMOD,)) + b"\xff" * 6,
    "lastmod cut short": HEAD + bytes((2 | LASTMOD,)) + TIME[:3],
    "digest cut short": HEAD + bytes((2 | LASTMOD | 8,)) + TIME + bytes(15),
    "overlong sequence": bytes((FORMAT, 0, 0, 0, 0, 0, 1)) + b"\xff" * 11 + bytes((2,)),
    "unended sequence": bytes((FORMAT, 0, 0, 0, 0, 0, 1, 0xFF, 0xFF)),
    "type past the end": HEAD + bytes((2 | LASTMOD | 64,)) + TIME + bytes((5, 65)),
    "type length missing": HEAD + bytes((2 | LASTMOD | 64,)) + TIME,
    "no media type of that number": HEAD + bytes((2 | LASTMOD | 64,)) + TIME + b"\xff",
    "length unended": HEAD + bytes((2 | LASTMOD | 32,)) + TIME + b"\x80",
    "length missing": HEAD + bytes((2 | LASTMOD | 32,)) + TIME,
    "type not UTF-8": HEAD + bytes((2 | LASTMOD | 64,)) + TIME + bytes((1, 0xFF)),
    "bytes past the fields": HEAD + bytes((2 | LASTMOD,)) + TIME + b"x",
    "rest not JSON": HEAD + bytes((2 | LASTMOD | REST,)) + TIME + b"{",
    "rest not an object": HEAD + bytes((2 | LASTMOD | REST,)) + TIME + b"[]",
    "rest names the loc": HEAD + bytes((2 | LASTMOD | REST,)) + TIME + b'{"loc":"x"}',
    "rest names the change": HEAD + bytes((2 | LASTMOD | REST,)) + TIME + b'{"change":"x"}',
    "rest repeats a held field": HEAD
    + bytes((2 | LASTMOD | 32 | REST,))
    + TIME
    + bytes(1)
    + b'{"length":1}',
    "rest lastmod not text": HEAD + bytes((2 | REST,)) + b'{"lastmod":5}',
    "rest links not a list": HEAD + bytes((2 | LASTMOD | REST,)) + TIME + b'{"links":{"a":1}}',
    "rest links not objects": HEAD + bytes((2 | LASTMOD | REST,)) + TIME + b'{"links":[1]}',
}


@pytest.mark.parametrize("name", DAMAGED)
def test_damaged_states_are_damaged_data(name: str) -> None:
    with pytest.raises(DamagedData):
        decode(LOC.encode(), DAMAGED[name])


def test_a_loc_not_utf8_is_damaged_data() -> None:
    with pytest.raises(DamagedData):
        decode(b"\xff", encode(ID, orjson.dumps(_event())))


def test_seeded_mutations_of_states_decode_and_render_or_are_damaged_data() -> None:
    """Each byte flipped, cut, inserted or dropped: a state that still decodes renders as a
    Resource List entry; any other is DamagedData, nothing else."""
    rng = random.Random(20261202)
    values = [encode(ID, orjson.dumps(fields)) for fields in ROUND_TRIPS.values()]
    values += [ID.encode() + b" " + orjson.dumps(fields) for fields in ROUND_TRIPS.values()]
    decoded = damaged = 0
    for _ in range(20_000):
        value = bytearray(rng.choice(values))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(value) + 1)
            how = rng.randrange(4)
            if how == 0 and at < len(value):
                value[at] = rng.randrange(256)
            elif how == 1:
                del value[at:]
            elif how == 2:
                value[at:at] = bytes([rng.randrange(256)])
            elif at < len(value):
                del value[at]
        try:
            event_id, fields = decode(LOC.encode(), bytes(value))
        except DamagedData:
            damaged += 1
            continue
        assert isinstance(rendering.resource_entry(event_id, fields), str)
        decoded += 1
    assert decoded > 1_000 and damaged > 1_000  # both ways were taken


def test_seeded_random_changes_round_trip() -> None:
    rng = random.Random(20261203)
    hexes = "0123456789abcdefABCDEF"
    for _ in range(2_000):
        fields: dict[str, Any] = {
            "loc": LOC,
            "change": rng.choice(["created", "updated", "changedump"]),
            "lastmod": rng.choice(
                [
                    rendering.w3c_ms(rng.randrange(0, 253402300800000)),
                    rendering.w3c_ms(rng.randrange(0, 4000000000) * 1000),
                    "2026-11-22T10:00:00.1234Z",
                    "",
                ]
            ),
        }
        if rng.random() < 0.7:
            parts = [
                rng.choice(["md5:", "sha-1:", "sha-256:", "x:", ""])
                + "".join(rng.choice(hexes) for _ in range(rng.choice([32, 40, 64, 3])))
                for _ in range(rng.randint(1, 3))
            ]
            fields["hash"] = " ".join(parts)
        if rng.random() < 0.7:
            fields["length"] = rng.choice([0, 1, 127, 128, 2**40, 2**64 - 1, -5, "7", 1.5])
        if rng.random() < 0.5:
            fields["type"] = rng.choice(["text/html", "application/ld+json", "", 3])
        if rng.random() < 0.3:
            fields["links"] = [{"rel": "alternate", "href": "http://example.org/" + "é" * 3}]
        event_id = f"{rng.randrange(0, 253402300800000)}-{rng.randrange(0, 2**20)}"
        value = encode(event_id, orjson.dumps(fields))
        assert decode(LOC.encode(), value) == (event_id, fields)
