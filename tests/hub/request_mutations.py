"""Seeded mutations of raw HTTP requests, for the lean paths' hostile fuzzes."""

from __future__ import annotations

import asyncio
import random


def mutate(
    rng: random.Random,
    data: bytes,
    *,
    chars: bytes,
    headers: list[bytes],
    splice: int,
    again: bool = False,
) -> bytes:
    """``data`` with 1-4 of: a byte replaced, removed, or one of ``chars`` inserted; one of
    ``headers`` inserted; up to ``splice`` of its own bytes copied elsewhere; and with
    ``again``, the start of a second request behind it."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out))
        what = rng.randrange(6 if again else 5)
        if what == 0:
            out[at] = rng.randrange(256)
        elif what == 1:
            del out[at]
        elif what == 2:
            out.insert(at, rng.choice(chars))
        elif what == 3:
            out[at:at] = rng.choice(headers)
        elif what == 4:
            out[at:at] = out[rng.randrange(len(out)) :][: rng.randint(1, splice)]
        else:  # a second request behind it
            out += data[: rng.randrange(len(data))]
    return bytes(out)


async def send_in_pieces(writer: asyncio.StreamWriter, data: bytes, pieces: int) -> None:
    """``data`` written in ``pieces`` writes, a millisecond apart (so that they arrive as
    separate reads)."""
    step = max(1, len(data) // pieces)
    for i in range(0, len(data), step):
        writer.write(data[i : i + step])
        await writer.drain()
        if pieces > 1:
            await asyncio.sleep(0.001)
