"""An SSE stream as plain data: what it sends, read back by the clients' own parser (the
WHATWG rules, :class:`rsclient.sse.EventParser`), without a socket or a clock."""

from __future__ import annotations

import random

import pytest

from hub.core.sse import event_lines
from hub.core.sse_stream import (
    LAST_CHUNK,
    SSE_HEADERS,
    SseStream,
    SseTerms,
    last_event,
    opening_id,
    response_head,
    resume_from,
    topic_ending,
    topics_ending,
)
from hub.core.stream_endings import (
    DELETED,
    EXPIRED,
    ID_FULL,
    REVOKED,
    SHUTDOWN,
    TOO_MANY_TOPICS,
    TOO_SLOW,
)
from rsclient.backoff import parse_retry_hint
from rsclient.sse import Event, EventParser

HEARTBEAT, CLOSE, SHUTDOWN_CLOSE = 15.0, 5.0, 2.0


def stream(*, chunked: bool = False, now: float = 100.0) -> SseStream:
    terms = SseTerms(
        chunked=chunked,
        heartbeat_seconds=HEARTBEAT,
        close_seconds=CLOSE,
        shutdown_close_seconds=SHUTDOWN_CLOSE,
    )
    return SseStream(terms, now)


def unchunk(body: bytes) -> tuple[bytes, bool]:
    """A chunked body's payload, and whether its last chunk came (RFC 9112 §7.1)."""
    payload, at = b"", 0
    while at < len(body):
        line_end = body.index(b"\r\n", at)
        size = int(body[at:line_end], 16)
        start = line_end + 2
        if size == 0:
            assert body[start:] == b"\r\n"
            return payload, True
        payload += body[start : start + size]
        assert body[start + size : start + size + 2] == b"\r\n"
        at = start + size + 2
    return payload, False


def parsed(body: bytes) -> tuple[list[Event], EventParser]:
    parser = EventParser()
    return parser.feed(body), parser


def one(body: bytes) -> Event:
    events, _parser = parsed(body)
    assert len(events) == 1, events
    return events[0]


def test_the_body_opens_with_the_reconnection_time() -> None:
    _events, parser = parsed(stream().opening())
    assert parser.retry == 1000
    payload, ended = unchunk(stream(chunked=True).opening())
    assert payload == stream().opening() and not ended


def test_events_are_sent_as_given_or_as_one_chunk() -> None:
    encoded = event_lines([("1-0", b'{"a":1}'), ("2-0", b'{"a":2}')])
    plain = stream().events(encoded, 101.0)
    assert plain == encoded
    events, parser = parsed(plain)
    assert [(e.id, e.data) for e in events] == [("1-0", '{"a":1}'), ("2-0", '{"a":2}')]
    assert parser.last_event_id == "2-0"
    chunk = stream(chunked=True).events(encoded, 101.0)
    assert unchunk(chunk) == (encoded, False)


def test_nothing_is_sent_for_nothing_so_a_chunked_body_never_ends_early() -> None:
    chunked = stream(chunked=True)
    assert chunked.events(b"", 101.0) == b""
    assert not chunked.ended


def test_a_heartbeat_is_due_an_interval_after_the_last_bytes() -> None:
    s = stream(now=100.0)
    assert s.heartbeat_in(100.0) == HEARTBEAT
    assert s.heartbeat(100.0 + HEARTBEAT - 0.001) == b""
    beat = s.heartbeat(100.0 + HEARTBEAT)
    assert beat == b": heartbeat\n\n"
    assert parsed(beat)[0] == []  # a comment: clients see no event
    # Events sent put the next heartbeat off; a heartbeat sent counts as bytes too.
    s.events(event_lines([("3-0", b"{}")]), 120.0)
    assert s.heartbeat_in(120.0) == HEARTBEAT
    assert s.heartbeat(130.0) == b""
    assert s.heartbeat_in(130.0) == pytest.approx(5.0)
    assert s.heartbeat(135.0) and s.heartbeat(140.0) == b""
    assert s.heartbeat_in(200.0) == 0.0


def test_a_chunked_heartbeat_is_one_chunk() -> None:
    s = stream(chunked=True, now=0.0)
    assert unchunk(s.heartbeat(HEARTBEAT)) == (b": heartbeat\n\n", False)


def test_the_end_is_the_last_bytes_and_nothing_follows() -> None:
    s = stream(chunked=True)
    last = topic_ending(TOO_SLOW, topic="t", last_sent="7-0", position="5-0")
    data, within = s.end(last, TOO_SLOW)
    assert unchunk(data) == (last, True)
    assert within == CLOSE
    assert s.ended
    # Nothing is sent behind the resume point the last event named.
    assert s.events(event_lines([("8-0", b"{}")]), 200.0) == b""
    assert s.heartbeat(10_000.0) == b""
    assert s.end(b"event: error\ndata: x\n\n", TOO_SLOW)[0] == b""


def test_an_end_without_a_last_event_still_ends_a_chunked_body() -> None:
    data, within = stream(chunked=True).end(b"", None)
    assert data == LAST_CHUNK and within == CLOSE
    assert stream().end(b"", None) == (b"", CLOSE)


def test_a_shutdown_gets_the_shorter_of_the_two_bounds() -> None:
    last = topic_ending(SHUTDOWN, topic="t", last_sent=None, position="5-0")
    assert stream().end(last, SHUTDOWN)[1] == SHUTDOWN_CLOSE
    terms = SseTerms(chunked=False, heartbeat_seconds=1, close_seconds=1, shutdown_close_seconds=9)
    longer = SseStream(terms, 0.0)
    assert longer.end(last, SHUTDOWN)[1] == 1


def test_a_topic_stream_s_last_events() -> None:
    shutdown = one(topic_ending(SHUTDOWN, topic="t", last_sent="7-0", position="5-0"))
    assert (shutdown.event, shutdown.id) == ("shutdown", "7-0")
    assert shutdown.data == "shutdown; resume with Last-Event-ID: 7-0"
    _events, parser = parsed(topic_ending(SHUTDOWN, topic="t", last_sent=None, position="5-0"))
    assert parser.retry == 100 and parser.last_event_id == "5-0"  # where it started
    deleted = one(topic_ending(DELETED, topic="news", last_sent="7-0", position="5-0"))
    assert (deleted.event, deleted.data, deleted.id) == ("deleted", "news", "")
    slow = one(topic_ending(TOO_SLOW, topic="t", last_sent=None, position="5-0"))
    assert (slow.event, slow.id) == ("error", "5-0")  # where it began: nothing was sent
    assert slow.data == "too slow; resume with Last-Event-ID: 5-0; retry after 0.00 s"
    # A too-slow client's own wait, in words its clients read and in the field a browser's
    # EventSource waits by, and the id it resumes from.
    _events, parser = parsed(
        topic_ending(TOO_SLOW, topic="t", last_sent="7-0", position="5-0", retry_after=3.456)
    )
    told = _events[0]
    assert (told.id, parser.retry, parser.last_event_id) == ("7-0", 3456, "7-0")
    assert parse_retry_hint(told.data) == 3.46
    for reason in (EXPIRED, REVOKED):
        told = one(topic_ending(reason, topic="t", last_sent=None, position="5-0"))
        assert told.event == "error" and told.id == ""
        assert told.data == f"{reason} and resume with Last-Event-ID: 5-0"
    assert topic_ending(None, topic="t", last_sent="7-0", position="5-0") == b""


def test_a_stream_of_several_topics_names_its_composite_id() -> None:
    rid = "c1.AAAA"
    for reason in (EXPIRED, REVOKED, ID_FULL):
        told = one(topics_ending(reason, resume_id=rid, message=reason))
        assert (told.event, told.id) == ("error", rid)
        assert told.data == f"{reason}; resume with Last-Event-ID: {rid}"
    # Too slow: its wait too, in words and as the reconnection time EventSource takes.
    (slow,), parser = parsed(
        topics_ending(TOO_SLOW, resume_id=rid, message=TOO_SLOW, retry_after=2.5)
    )
    assert (slow.event, slow.id, parser.retry) == ("error", rid, 2500)
    assert slow.data == f"{TOO_SLOW}; resume with Last-Event-ID: {rid}; retry after 2.50 s"
    deleted = one(topics_ending(DELETED, resume_id=rid, message="topic deleted: a"))
    assert (deleted.event, deleted.id) == ("deleted", rid)
    assert deleted.data == f"topic deleted: a; resume with Last-Event-ID: {rid}"
    many = one(topics_ending(TOO_MANY_TOPICS, resume_id=rid, message="narrow them"))
    assert (many.event, many.data, many.id) == ("error", "narrow them", "")  # would end again
    shutdown = one(topics_ending(SHUTDOWN, resume_id=rid, message=SHUTDOWN))
    assert (shutdown.event, shutdown.id) == ("shutdown", rid)
    assert topics_ending(None, resume_id=rid, message="") == b""
    _events, parser = parsed(opening_id(rid))
    assert parser.last_event_id == rid


def test_last_event_id_wins_over_since_and_empty_names_nothing() -> None:
    assert resume_from("9-0", "3-0") == ("9-0", "Last-Event-ID")
    assert resume_from(None, "3-0") == ("3-0", "since")
    assert resume_from("", "3-0") == ("3-0", "since")
    assert resume_from("", "") is None
    assert resume_from(None, None) is None


def test_the_response_head() -> None:
    head = response_head(
        date="Wed, 02 Dec 2026 16:00:00 GMT",
        server="Python/3.11 aiohttp/3",
        request_id_header="X-Request-Id",
        request_id="abc",
    )
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    assert lines[-2:] == ["", ""]  # the head's end, no body yet
    fields = dict(line.split(": ", 1) for line in lines[1:-2])
    assert fields == {
        **SSE_HEADERS,
        "Transfer-Encoding": "chunked",
        "Date": "Wed, 02 Dec 2026 16:00:00 GMT",
        "Server": "Python/3.11 aiohttp/3",
        "X-Request-Id": "abc",
    }


def test_seeded_sequences_keep_the_body_well_formed() -> None:
    """Any order of events, heartbeats and an end gives a chunked body that parses: every
    event the stream returned bytes for arrives, in order, nothing after the end."""
    rng = random.Random(20261202)
    for _round in range(200):
        s = stream(chunked=True, now=0.0)
        body, sent, now = s.opening(), [], 0.0
        for step in range(rng.randrange(0, 30)):
            now += rng.choice([0.0, 0.5, HEARTBEAT, 2 * HEARTBEAT])
            action = rng.random()
            if action < 0.5:
                ids = [f"{step}-{i}" for i in range(rng.randrange(0, 3))]
                data = s.events(event_lines((i, b'{"x":"\\n"}') for i in ids), now)
                if data:
                    sent += ids
                body += data
            elif action < 0.9:
                body += s.heartbeat(now)
            else:
                break
        reason = rng.choice([None, SHUTDOWN, DELETED, TOO_SLOW, EXPIRED, REVOKED])
        last = topic_ending(reason, topic="t", last_sent=sent[-1] if sent else None, position="0-1")
        body += s.end(last, reason)[0]
        body += s.events(event_lines([("late-0", b"{}")]), now + 1)
        payload, ended = unchunk(body)
        assert ended
        events, _parser = parsed(payload)
        ordinary = [e.id for e in events if e.event == "message"]
        assert ordinary == sent
        assert len(events) - len(ordinary) == (1 if last else 0)


class _Driver(SseStream):
    """A driver that is its stream (as the lean path's) may use any name of its own."""

    __slots__ = ("_done", "_due", "_terms")

    def __init__(self) -> None:
        super().__init__(SseTerms(True, HEARTBEAT, CLOSE, SHUTDOWN_CLOSE), 0.0)
        self._done, self._due, self._terms = "mine", "mine", "mine"


def test_a_subclass_s_names_do_not_touch_the_stream_s_state() -> None:
    driver = _Driver()
    assert driver.heartbeat(HEARTBEAT) and not driver.ended
    assert driver.end(b"", None) == (LAST_CHUNK, CLOSE)
    assert driver.ended and (driver._done, driver._due, driver._terms) == ("mine",) * 3


@pytest.mark.parametrize("data", ["a\nb", "a\rb", "a\r\nb", "\n\nevent: x\n\n", "", "é ✓"])
def test_a_last_event_s_text_never_ends_it_early_or_adds_a_field(data: str) -> None:
    told = one(last_event("error", data, event_id="7-0"))
    assert (told.event, told.id) == ("error", "7-0")
    assert told.data == data.replace("\r\n", "\n").replace("\r", "\n")
