"""hub.core.page_text: a page written in pieces is the page written whole, in both codings,
and a later version that goes on from an earlier one is the one written from nothing."""

from __future__ import annotations

import gzip
import random
import zlib

from hub.core.page_text import CLOSE, PageText, PageWriter

HEAD = b'<?xml version="1.0" encoding="UTF-8"?>\n<urlset><rs:md capability="changelist"/>'
CLOSED_HEAD = HEAD.replace(b"/>", b' until="2026-01-01T00:00:00Z"/>')


def entries(n: int, start: int = 0) -> list[bytes]:
    return [f"<url><loc>http://example.org/r{i}</loc></url>".encode() for i in range(start, n)]


def written(head: bytes, pieces: list[bytes]) -> PageText:
    writer = PageWriter(head)
    for piece in pieces:
        writer.add(piece)
    return writer.finish()


def check(text: PageText, head: bytes, pieces: list[bytes]) -> None:
    raw, gz = text.joined()
    assert raw == head + b"".join(pieces) + CLOSE
    assert text.length == len(raw) and text.gz_length == len(gz)
    assert gzip.decompress(gz) == raw
    # one gzip member: a decoder that stops after the first member gets it all
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert decoder.decompress(gz) == raw and decoder.eof and not decoder.unused_data


def test_pieces_make_the_whole_page_in_both_codings() -> None:
    pieces = entries(3000)
    check(written(HEAD, pieces), HEAD, pieces)
    check(written(HEAD, []), HEAD, [])


def test_going_on_with_the_same_head_reuses_the_earlier_version() -> None:
    first = written(HEAD, entries(1000))
    writer = PageWriter.going_on(first, HEAD)
    for piece in entries(1500, 1000):
        writer.add(piece)
    later = writer.finish()
    check(later, HEAD, entries(1500))
    # the earlier version's pieces are shared, not copied, and it is left as it was
    assert later.raw[0] is first.raw[0]
    check(first, HEAD, entries(1000))
    # and it can be gone on from again, twice over, each the same
    for _ in range(2):
        again = PageWriter.going_on(first, HEAD)
        again.add(b"<url><loc>x</loc></url>")
        check(again.finish(), HEAD, [*entries(1000), b"<url><loc>x</loc></url>"])


def test_going_on_under_a_new_head_gzips_the_entries_anew() -> None:
    opened = written(HEAD, entries(800))
    writer = PageWriter.going_on(opened, CLOSED_HEAD)
    writer.add(b"<url><loc>last</loc></url>")
    closed = writer.finish()
    check(closed, CLOSED_HEAD, [*entries(800), b"<url><loc>last</loc></url>"])


def test_seeded_chains_of_versions_equal_pages_written_whole() -> None:
    rng = random.Random(42)
    for _ in range(20):
        pieces: list[bytes] = []
        text = written(HEAD, pieces)
        for _ in range(rng.randint(1, 8)):
            more = [
                bytes(rng.choice(b"<>&ab\x00\xff") for _ in range(rng.randint(0, 3000)))
                for _ in range(rng.randint(0, 4))
            ]
            head = CLOSED_HEAD if rng.random() < 0.2 else HEAD
            writer = PageWriter.going_on(text, head)
            for piece in more:
                writer.add(piece)
            pieces += more
            text = writer.finish()
            check(text, head, pieces)
