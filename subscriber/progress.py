"""A one-line progress bar on stderr (redrawn at most 10 times a second)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        width: int = 30,
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self.total: int | None = None
        self.done = 0
        self._drawn = 0.0
        self._started = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.enabled and time.monotonic() - self._drawn >= 0.1:
            self._draw()

    def _draw(self, end: str = "") -> None:
        self._drawn = time.monotonic()
        if self.total:
            filled = int(self.width * min(self.done, self.total) / self.total)
            bar = "#" * filled + "-" * (self.width - filled)
            text = f"\r{self.label} [{bar}] {self.done}/{self.total}"
        else:
            text = f"\r{self.label} {self.done}"
        self.stream.write(text + end)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw("\n")
