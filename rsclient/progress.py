"""Progress bars for the long jobs of the client commands (tqdm, on stderr).

Drawn only when stderr is a terminal, unless the user asks (``--progress``) or refuses
(``--no-progress``): a log file or a pipe gets no control characters.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tqdm import tqdm

__all__ = ["add_progress_options", "progress_bar"]


def progress_bar(
    desc: str, *, total: int | None = None, enabled: bool | None = None, unit: str = "it"
) -> tqdm[Any]:
    """A bar on stderr; ``enabled=None`` draws it when stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(desc=desc, total=total, unit=unit, disable=not enabled, file=sys.stderr, leave=True)


def add_progress_options(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` (``args.progress``: True, False or None)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="draw progress bars even when stderr is not a terminal",
    )
    group.add_argument(
        "--no-progress", dest="progress", action="store_false", help="draw no progress bars"
    )
