"""hub.core.stream_positions: the composite resume id of a stream of several topics.

Its encoding round-trips and stays short; its decoder is strict and bounded (every refusal
a 400 naming the parameter); and :class:`StreamPositions` keeps the id's meaning true as
events are sent, taken back, and the base moves.
"""

from __future__ import annotations

import base64
import random

import pytest

from hub.core.events import U64_MAX
from hub.core.exceptions import BadRequest
from hub.core.stream_positions import MARK, StreamPositions, before, decode, encode, is_composite

BASE = (1_795_341_600_000, 3)


def _decode(value: str, max_bytes: int = 10_000, max_topics: int = 1000) -> tuple:
    return decode(value, what="since", max_bytes=max_bytes, max_topics=max_topics)


def _raw(data: bytes) -> str:
    return MARK + base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_an_id_names_its_base_and_the_topics_sent_past_it() -> None:
    listed = {"repo-0001": (BASE[0] + 5, 0), "repo-0002": (BASE[0], 4), "a": (BASE[0] + 9, 7)}
    text = encode(BASE, listed)
    assert is_composite(text) and not is_composite("1-0") and not is_composite("2026-01-01")
    assert _decode(text) == (BASE, listed)
    assert _decode(encode(BASE, {})) == (BASE, {})


def test_names_in_order_share_their_common_start() -> None:
    """Front coding: a thousand names of one prefix and their positions take fewer
    characters than the names alone would (nine each)."""
    listed = {f"repo-{i:04d}": (BASE[0] + i + 1, 0) for i in range(1000)}
    text = encode(BASE, listed)
    assert len(text) < 1000 * 9, len(text)
    assert _decode(text) == (BASE, listed)


def test_the_largest_positions_round_trip() -> None:
    listed = {"t": (U64_MAX, U64_MAX)}
    assert _decode(encode((0, 0), listed)) == ((0, 0), listed)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("m1.", "ends inside the base"),
        ("m2.AAAA", "does not start with"),
        ("m1.AA=A", "not base64url"),
        ("m1.A+AA", "not base64url"),
        ("m1.A", "not base64url"),
        ("m1.AAA%", "not base64url"),
        (_raw(b"\xff" * 11), "longer than 10 bytes"),
        (_raw(b"\xff" * 9 + b"\x7f"), "beyond 64 bits"),
        (_raw(b"\x00\x00\x01"), "ends inside a name"),
        (_raw(b"\x00\x00\x01\x00\x01!\x01\x00"), "no valid name"),
        (_raw(b"\x00\x00\x01\x05\x01a\x01\x00"), "no valid name"),
        (_raw(b"\x00\x00\x02\x00\x01b\x01\x00\x00\x01a\x01\x00"), "out of order"),
        (_raw(b"\x00\x00\x02\x00\x01a\x01\x00\x01\x00\x01\x00"), "out of order"),
        (_raw(b"\x05\x05\x01\x00\x01a\x00\x05"), "not after the base"),
        (_raw(b"\x00\x00\x01\x00\x01a\x01\x00\x00"), "bytes follow"),
        (_raw(b"\x00\x00\x01\x00\x01\xc3\x01\x00"), "no valid name"),
        (_raw(b"\x00\x00\x01\x00\x81\x01" + b"a" * 129 + b"\x01\x00"), "no valid name"),
    ],
)
def test_a_malformed_id_is_a_400_naming_the_parameter(value: str, says: str) -> None:
    with pytest.raises(BadRequest) as refused:
        _decode(value)
    assert refused.value.http_status == 400
    assert "since" in refused.value.message and says in refused.value.message, refused.value


def test_an_id_beyond_the_limits_is_a_400_naming_them() -> None:
    listed = {f"t{i}": (BASE[0] + i + 1, 0) for i in range(50)}
    text = encode(BASE, listed)
    with pytest.raises(BadRequest, match="stream_max_id_bytes") as refused:
        _decode(text, max_bytes=len(text) - 1)
    assert refused.value.detail["limit"] == "stream_max_id_bytes"
    with pytest.raises(BadRequest, match="beyond the hub's limit of 49"):
        _decode(text, max_topics=49)
    assert _decode(text, max_bytes=len(text), max_topics=50)[1] == listed


def test_a_seeded_fuzz_of_ids_decodes_or_is_a_400() -> None:
    """Mutated ids, truncations and random bytes: a 400 naming the parameter, or an id
    whose re-encoding is itself (no two texts mean one id)."""
    rng = random.Random(7)
    good = encode(BASE, {f"p-{i}": (BASE[0] + i, i) for i in range(1, 30)})
    decoded = refused = 0
    for _ in range(5000):
        text = list(good)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(text))
            op = rng.randrange(3)
            if op == 0:
                text[pos] = rng.choice("AZaz09_-=+/.%m1\x00é")
            elif op == 1:
                del text[pos]
            else:
                text.insert(pos, rng.choice("AQgw"))
        value = "".join(text) if rng.random() < 0.9 else _raw(rng.randbytes(rng.randrange(40)))
        try:
            base, listed = _decode(value)
        except BadRequest as exc:
            assert "since" in exc.message
            refused += 1
            continue
        decoded += 1
        assert _decode(encode(base, listed)) == (base, listed)
    assert decoded > 30 and refused > 1000, (decoded, refused)


def test_before_is_the_position_just_before() -> None:
    assert before((5, 2)) == (5, 1)
    assert before((5, 0)) == (4, U64_MAX)
    assert before((0, 0)) == (0, 0)


class TestStreamPositions:
    def test_a_topic_sent_past_the_base_is_named_and_others_are_not(self) -> None:
        positions = StreamPositions(BASE)
        for topic in ("a", "b", "c"):
            assert positions.follow(topic) == BASE
        positions.sent("b", (BASE[0] + 1, 0))
        assert _decode(positions.encode()) == (BASE, {"b": (BASE[0] + 1, 0)})
        assert positions.position("a") == BASE and positions.position("b") == (BASE[0] + 1, 0)

    def test_the_base_moves_up_to_the_lowest_horizon_and_no_further_than_a_limit(
        self,
    ) -> None:
        positions = StreamPositions(BASE)
        for topic in ("a", "b"):
            positions.follow(topic)
        positions.sent("a", (BASE[0] + 10, 0))
        positions.sent("b", (BASE[0] + 20, 0))
        assert positions.advance()  # a known up to 10 only: the base moves there, no further
        assert positions.base == (BASE[0] + 10, 0)
        assert _decode(positions.encode())[1] == {"b": (BASE[0] + 20, 0)}
        assert not positions.advance()
        positions.known_through("a", (BASE[0] + 30, 0))  # Redis: a has nothing after 10
        assert positions.advance(limit=(BASE[0] + 15, 0))
        assert positions.base == (BASE[0] + 15, 0)
        assert _decode(positions.encode()) == ((BASE[0] + 15, 0), {"b": (BASE[0] + 20, 0)})
        assert positions.advance()
        assert positions.base == (BASE[0] + 20, 0) and len(positions) == 0

    def test_an_id_resumed_names_only_the_topics_the_stream_follows(self) -> None:
        positions = StreamPositions(BASE, {"a": (BASE[0] + 1, 0), "gone": (BASE[0] + 2, 0)})
        positions.follow("a")
        positions.forget_others()
        assert _decode(positions.encode())[1] == {"a": (BASE[0] + 1, 0)}

    def test_undo_and_restore_take_back_what_was_not_sent(self) -> None:
        positions = StreamPositions(BASE)
        positions.follow("a")
        positions.follow("b")
        positions.sent("a", (BASE[0] + 1, 0))
        before_b = positions.encode()
        state = positions.state()
        positions.sent("b", (BASE[0] + 2, 0))
        positions.raise_base((BASE[0] + 1, 0))
        positions.restore(state)
        assert positions.encode() == before_b
        positions.sent("b", (BASE[0] + 3, 0))
        positions.undo("b", BASE, BASE)
        assert positions.encode() == before_b and positions.horizon("b") == BASE

    def test_the_kept_encoding_is_the_full_encoding(self) -> None:
        """Entries are kept up to date one by one (each id of an SSE stream): the result is
        always what encoding everything again gives."""
        rng = random.Random(3)
        for _ in range(50):
            positions = StreamPositions(BASE)
            names = [f"t{rng.randrange(60):02d}" for _ in range(40)]
            listed: dict[str, tuple[int, int]] = {}
            for name in names:
                positions.follow(name)
            for _ in range(200):
                name = rng.choice(names)
                key = (BASE[0] + rng.randrange(10**6), rng.randrange(4))
                if key <= positions.base:
                    continue
                if rng.random() < 0.85:
                    positions.sent(name, key)
                    listed[name] = key
                else:
                    positions.undo(name, positions.base, positions.horizon(name))
                    listed.pop(name, None)
                assert positions.encode() == encode(positions.base, listed)


def test_a_dropped_topic_leaves_the_id_and_no_longer_holds_the_base_back() -> None:
    positions = StreamPositions(BASE)
    for topic in ("a", "b", "c"):
        positions.follow(topic)
    positions.sent("a", (BASE[0] + 5, 0))
    positions.sent("c", (BASE[0] + 9, 0))
    positions.known_through("a", (BASE[0] + 20, 0))
    assert sorted(_decode(positions.encode())[1]) == ["a", "c"]
    positions.drop("c")
    assert _decode(positions.encode())[1] == {"a": (BASE[0] + 5, 0)}
    positions.known_through("b", (BASE[0] + 30, 0))
    assert positions.advance() and positions.base == (BASE[0] + 20, 0)  # c's 9 held it back
    assert sorted(positions.topics) == ["a", "b"] and positions.position("c") == positions.base
