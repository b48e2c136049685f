"""hub.core.rendering's fast paths (bench/hub.py figure 4) write what the plain code wrote.

:func:`rendering.attr` skips escaping a value with nothing to escape, and
:func:`rendering.w3c_ms` formats the whole seconds once per second: both are checked
against the code they replace, on seeded fuzz of hostile publisher values and of times.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import orjson

from hub.core import rendering
from hub.core.events import Event
from resourcesync import ChangeListNotification, parse

_ENTITIES = {'"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}


def reference_attr(value: object) -> str:
    text = str(value).replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")
    for char, entity in _ENTITIES.items():
        text = text.replace(char, entity)
    return '"' + text + '"'


def reference_w3c_ms(ms: int) -> str:
    text = datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}".rstrip("0")
    return text + "Z"


ALPHABET = list("aZ09:/?=#%._-+ ") + list("&<>\"'\n\r\t") + ["é", "ß", "\u2028", "😀", "\x7f"]


def test_attr_equals_the_plain_escaping_on_hostile_values() -> None:
    rng = random.Random(22)
    named: list[object] = ["", "plain", "&", "<>", '"', "\n\r\t", "a&amp;b", "'", 0, 12345, 1.5]
    fuzz = ["".join(rng.choices(ALPHABET, k=rng.randrange(0, 40))) for _ in range(3000)]
    for value in named + fuzz:
        assert rendering.attr(value) == reference_attr(value), repr(value)


def test_w3c_ms_equals_the_plain_formatting() -> None:
    rng = random.Random(23)
    base = 1_795_341_600_000
    named = [0, 1, 999, 1000, 1001, base, base + 1, base + 10, base + 100, base + 120, base + 999]
    same_second = [base + 5000 + k for k in range(0, 1000, 7)]
    fuzz = [rng.randrange(0, 4_102_444_800_000) for _ in range(3000)]
    for ms in named + same_second + fuzz:
        assert rendering.w3c_ms(ms) == reference_w3c_ms(ms), ms


def test_a_body_of_hostile_values_parses_back_to_them() -> None:
    rng = random.Random(24)
    events = []
    for k in range(200):
        value = "".join(rng.choices([c for c in ALPHABET if c not in "\r\x7f"], k=12))
        data = {"loc": f"http://x/{k}?v=&amp;<{k}>", "lastmod": "2026-11-22T10:00:00Z"}
        data |= {"change": "updated", "type": value, "length": k}
        events.append((Event(f"{1_795_341_600_000 + k * 37}-{k}", orjson.dumps(data)), data))
    body = rendering.notification([e for e, _ in events], up="http://hub/t/capabilitylist.xml")
    doc = parse(body)
    assert isinstance(doc, ChangeListNotification)
    for entry, (event, data) in zip(doc.entries, events, strict=True):
        assert entry.loc == data["loc"]
        assert entry.md is not None and entry.md.type == data["type"]
        assert entry.md.extra[f"{{{rendering.RSHUB_NS}}}id"] == event.id
