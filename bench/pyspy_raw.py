"""``py-spy record --format raw`` output, read once for every bench that profiles.

Each line is one distinct stack, root first, frames separated by ``;``, then a space and how
many samples had it. A frame reads ``function (path:line)``.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

_LINE = re.compile(r":\d+\)$")
#: The standard library's folder (``lib/python3.11``).
_STDLIB = re.compile(r"python3\.\d+")


def samples(path: Path) -> Iterator[tuple[list[str], int]]:
    """Each stack of ``path`` (its frames, root first) and its count of samples."""
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            yield stack.split(";"), int(count)


def frame_name(frame: str) -> str:
    """``function (path:line)`` per function: the line dropped, the path from the package
    (below ``site-packages``, the standard library's folder or the checkout) on."""
    name, _, where = frame.partition(" (")
    path = _LINE.sub("", "(" + where)[1:].rstrip(")")
    parts = Path(path).parts
    markers = [i for i, part in enumerate(parts) if part == "site-packages"]
    markers = markers or [i for i, part in enumerate(parts) if _STDLIB.fullmatch(part)]
    if markers:
        path = "/".join(parts[markers[-1] + 1 :])
    else:
        root = str(Path(__file__).resolve().parent.parent) + "/"
        path = path.removeprefix(root)
    return f"{name} ({path})" if where else name


def top_own(paths: Iterable[Path], limit: int = 20) -> tuple[list[tuple[str, int]], int]:
    """The ``limit`` functions with the most own (innermost-frame) samples over ``paths``,
    and the total count of samples."""
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for path in paths:
        for frames, count in samples(path):
            own[frame_name(frames[-1])] += count
            total += count
    return own.most_common(limit), total
