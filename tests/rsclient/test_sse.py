"""The shared event-stream parser, fed literal bytes and lines; and its aiohttp reader."""

from __future__ import annotations

import random
import re

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rsclient.exceptions import EventStreamError
from rsclient.sse import Event, EventParser, event_batches


def feed_bytewise(parser: EventParser, stream: bytes) -> list[Event]:
    events: list[Event] = []
    for i in range(len(stream)):
        events += parser.feed(stream[i : i + 1])
    return events


def test_fields_comments_and_dispatch() -> None:
    parser = EventParser()
    events = parser.feed(b": comment\nevent: edit\nid: 7\ndata: a\ndata:b\n\ndata: c\n\n")
    assert events == [Event("a\nb", "edit", "7"), Event("c", "message", "7")]


def test_field_value_loses_one_leading_space_only() -> None:
    parser = EventParser()
    assert parser.feed(b"data:  two\ndata:none\ndata\n\n") == [Event(" two\nnone\n")]


def test_multi_line_data_and_empty_data_lines() -> None:
    parser = EventParser()
    events = parser.feed(b'data: {"a":\ndata:\ndata: 1}\n\n')
    assert events == [Event('{"a":\n\n1}')]


def test_comments_and_blocks_without_data_dispatch_nothing() -> None:
    parser = EventParser()
    assert parser.feed(b": heartbeat\n\n:\n\nevent: x\n\n") == []
    # the event type of an undispatched block does not leak into the next event
    assert parser.feed(b"data: y\n\n") == [Event("y", "message")]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_each_line_ending_whole_and_split_anywhere(eol: bytes) -> None:
    stream = eol.join([b"id: 1", b"data: x", b"", b"data: \xc3\xa9", b"", b""])
    assert EventParser().feed(stream) == [Event("x", id="1"), Event("é", id="1")]
    assert feed_bytewise(EventParser(), stream) == [Event("x", id="1"), Event("é", id="1")]


def test_mixed_line_endings_and_crlf_split_across_chunks() -> None:
    parser = EventParser()
    stream = b"\xef\xbb\xbfid: 1\r\ndata: x\r\n\r\nid: 2\rdata: \xc3\xa9\r\rdata: z\n\n"
    events = feed_bytewise(parser, stream)  # CRLF and UTF-8 split across chunks
    assert events == [Event("x", id="1"), Event("é", id="2"), Event("z", id="2")]


def test_cr_then_lf_in_the_next_chunk_is_one_line_end() -> None:
    parser = EventParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r\n") == [Event("a")]  # not two blank lines: one event only
    assert parser.feed(b"data: b\n\n") == [Event("b")]


def test_bom_is_dropped_only_at_the_start() -> None:
    parser = EventParser()
    assert parser.feed(b"\xef\xbb") == []
    assert parser.feed(b"\xbfdata: a\n\n") == [Event("a")]
    # a BOM later is part of the field name, so the line is an unknown field
    assert parser.feed(b"\xef\xbb\xbfdata: b\n\ndata: c\n\n") == [Event("c")]


def test_partial_chunks_hold_the_incomplete_line() -> None:
    parser = EventParser()
    assert parser.feed(b"da") == []
    assert parser.feed(b"ta: hel") == []
    assert parser.feed(b"lo\n") == []
    assert parser.feed(b"\n") == [Event("hello")]


def test_retry_and_ignored_fields() -> None:
    parser = EventParser()
    parser.feed(b"retry: 2500\nretry: soon\nid: a\x00b\nfoo: bar\ndata\n\n")
    assert parser.retry == 2500
    assert parser.last_event_id == ""  # an id containing NUL is ignored
    parser.feed(b"retry: -1\nretry: 1.5\n\n")
    assert parser.retry == 2500  # only ASCII digits set it


def test_id_survives_dispatch_and_an_empty_id_resets_it() -> None:
    parser = EventParser()
    assert parser.feed(b"id: 5\ndata: a\n\ndata: b\n\nid\ndata: c\n\n") == [
        Event("a", id="5"),
        Event("b", id="5"),
        Event("c", id=""),
    ]


def test_id_without_data_moves_the_resume_point_only_at_a_blank_line() -> None:
    parser = EventParser()
    assert parser.feed(b"id: 5\n") == []
    assert parser.block_event_id == ""
    assert parser.feed(b"\n") == []
    assert parser.block_event_id == "5"


def test_resumed_parser_starts_from_the_given_id() -> None:
    parser = EventParser(last_event_id="9")
    assert parser.block_event_id == "9"
    assert parser.feed(b"data: x\n\n") == [Event("x", id="9")]


def test_overlong_line_is_refused() -> None:
    parser = EventParser(max_line_bytes=10)
    with pytest.raises(EventStreamError, match="longer"):
        parser.feed(b"data: " + b"x" * 20)


def test_lines_already_split() -> None:
    parser = EventParser()
    lines = [
        "retry: 1000",
        "",
        ": heartbeat",
        "",
        "id: 1-0",
        'data: {"a":',
        "data: 1}",
        "",
        "event: error",
        "data: too slow",
        "",
    ]
    msgs = [m for m in (parser.feed_line(line) for line in lines) if m is not None]
    assert msgs[0].data == '{"a":\n1}' and msgs[0].id == "1-0" and msgs[0].event == "message"
    assert msgs[1].event == "error" and parser.last_event_id == "1-0"
    assert parser.retry == 1000


async def test_event_batches_reads_a_response_body() -> None:
    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in (b"id: 1\ndata: a", b"\n\n", b"id: 2\n\n", b"data: b\r\n\r\n"):
            await resp.write(part)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/s", stream)
    parser = EventParser()
    events: list[Event] = []
    async with (
        TestServer(app, host="127.0.0.1") as server,
        aiohttp.ClientSession() as session,
        session.get(server.make_url("/s")) as resp,
    ):
        async for batch in event_batches(resp.content, parser):
            events += batch
    assert events == [Event("a", id="1"), Event("b", id="2")]
    assert parser.block_event_id == "2"


def test_an_event_that_never_ends_is_refused() -> None:
    """``data`` lines without a blank line: each line short, the event bounded all the same."""
    parser = EventParser(max_line_bytes=100)
    with pytest.raises(EventStreamError, match="event longer than 100"):
        for _ in range(30):
            parser.feed(b"data: 0123456789\n")
    again = EventParser(max_line_bytes=100)
    for _ in range(30):  # the same lines, dispatched one by one, are fine
        assert again.feed(b"data: 0123456789\n\n") == [Event("0123456789")]


def reference(stream: bytes) -> tuple[list[Event], str, int | None]:
    """WHATWG HTML §9.2.6 read literally, on the whole stream at once: the events, the last
    event id and the reconnection time. What the incremental parser must agree with."""
    text = stream.decode("utf-8", errors="replace")
    text = text.removeprefix("\ufeff")
    *lines, _unfinished = re.split(r"\r\n|\r|\n", text)
    events, data, event, last_id, retry = [], [], "", "", None
    for line in lines:
        if line == "":
            if data:
                events.append(Event("\n".join(data), event or "message", last_id))
            data, event = [], ""
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        value = value[1:] if colon and value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            retry = int(value)
    return events, last_id, retry


PIECES = [
    b"data", b"data:", b"data: x", b"data:  two spaces", b"event: e", b"event:", b"id: 7",
    b"id:", b"id: a\0b", b"retry: 250", b"retry: x", b"retry:", b": comment", b":", b"x",
    b"nocolon", b"\r", b"\n", b"\r\n", b"\r\r", b"\n\n", b"\xef\xbb\xbf", b"\xc3\xbc",
    b"\xff", b"\xe2\x82", b"\xac", b" ", b"\0", b"data: \xf0\x9f\x98\x80",
]  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_chunked_anyhow_the_parser_reads_as_the_standard_does(seed: int) -> None:
    """Seeded differential fuzz: random streams, cut into random chunks, against
    :func:`reference`. The same events, last event id and retry, whatever the cuts."""
    rng = random.Random(31_337 + seed)
    for _ in range(300):
        stream = b"".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40)))
        if rng.random() < 0.3:
            stream = b"\xef\xbb\xbf" + stream
        cuts = sorted(rng.sample(range(len(stream) + 1), min(len(stream) + 1, rng.randint(0, 8))))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        parser = EventParser()
        got = [event for chunk in chunks for event in parser.feed(chunk)]
        assert (got, parser.last_event_id, parser.retry) == reference(stream), (stream, cuts)
