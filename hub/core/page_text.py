"""A Change List page's bytes as they are rendered batch by batch, gzipped as they grow.

A 50,000-entry page is ~11 MB of XML: reading, rendering and gzipping it whole took ~2 s,
longer than a reader should wait. :class:`PageWriter` takes the page in pieces (the head,
then each batch of entries) and keeps both codings as it goes, so that readers can be sent
the first pieces while the rest is rendered, and each piece is gzipped once, with one
compressor, into one gzip member (a client's decoder need not handle several).

The open page only ever grows at its end (:mod:`hub.store.pages`), so its next version is
its last one with more entries: :meth:`PageWriter.going_on` starts from a finished
:class:`PageText` (its bytes before ``</urlset>`` and the compressor's state there, copied),
and only the new entries are read, rendered and gzipped. When the page has closed meanwhile
its head changes (it gains ``until``): the entries are reused, the whole is gzipped anew.

No I/O: callers run the costly steps (:meth:`PageWriter.add` of a large piece,
:meth:`PageWriter.going_on` with a new head, :meth:`PageWriter.finish`) in a thread; zlib
releases the GIL while it compresses.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from hub.core.rendering import URLSET_CLOSE

#: The page's last bytes.
CLOSE = URLSET_CLOSE.encode()
#: gzip level of the served pages (the level :func:`hub.core.rendering.rendered` uses).
LEVEL = 6
#: zlib's ``wbits`` for a gzip header and trailer around the deflate stream.
_GZIP_WBITS = 16 + zlib.MAX_WBITS
#: What a compressor's state holds in memory at :data:`LEVEL` (zlib's window and hash
#: tables with the default memLevel): counted in the size of a kept page.
COMPRESSOR_BYTES = 268 * 1024

Piece = bytes | memoryview


def _compressor() -> zlib._Compress:
    return zlib.compressobj(LEVEL, zlib.DEFLATED, _GZIP_WBITS)


@dataclass(frozen=True, slots=True)
class PageText:
    """One version of a page, whole, in pieces: as sent, gzipped, and where the next
    version goes on from. Pieces are shared with the versions after it, never copied."""

    #: The head (the declaration, ``<urlset>``, the root links and ``rs:md``), the
    #: entries in one or more pieces, then :data:`CLOSE`.
    raw: tuple[Piece, ...]
    #: One gzip member; ``gz[:gz_open]`` is what the compressor wrote before :data:`CLOSE`.
    gz: tuple[Piece, ...]
    gz_open: int
    #: The compressor's state before :data:`CLOSE` (copied before each use, never fed).
    compressor: zlib._Compress

    @property
    def length(self) -> int:
        return sum(map(len, self.raw))

    @property
    def gz_length(self) -> int:
        return sum(map(len, self.gz))

    @property
    def nbytes(self) -> int:
        return self.length + self.gz_length + COMPRESSOR_BYTES

    @property
    def head(self) -> Piece:
        return self.raw[0]

    def joined(self) -> tuple[bytes, bytes]:
        """The page and its gzip, each as one ``bytes``."""
        return b"".join(self.raw), b"".join(self.gz)


class PageWriter:
    """A page being written: ``raw`` and ``gz`` hold its pieces so far (readers may send
    them as they come: ``gz`` is one gzip member, complete once :meth:`finish` ran)."""

    def __init__(self, head: bytes) -> None:
        self.raw: list[Piece] = []
        self.gz: list[Piece] = []
        self._compressor = _compressor()
        self.add(head)

    @classmethod
    def going_on(cls, text: PageText, head: bytes) -> PageWriter:
        """A writer holding ``text`` less its close, under ``head`` (the same head: the
        compressed pieces and state are reused; a new one: the entries are gzipped anew)."""
        if head == text.head:
            writer = cls.__new__(cls)
            writer.raw = list(text.raw[:-1])
            writer.gz = list(text.gz[: text.gz_open])
            writer._compressor = text.compressor.copy()
            return writer
        writer = cls(head)
        for piece in text.raw[1:-1]:
            writer.add(piece)
        return writer

    def add(self, piece: Piece) -> None:
        """Append ``piece`` (rendered entries)."""
        self.raw.append(piece)
        compressed = self._compressor.compress(piece)
        if compressed:
            self.gz.append(compressed)

    def finish(self) -> PageText:
        """Close the page: its last pieces appended, and the whole of it."""
        state = self._compressor.copy()
        gz_open = len(self.gz)
        self.add(CLOSE)
        self.gz.append(self._compressor.flush())
        return PageText(tuple(self.raw), tuple(self.gz), gz_open, state)
