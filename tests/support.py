"""Shared test helpers: building notifications, bounded waits, free ports."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from xml.sax.saxutils import escape, quoteattr


class TimeScale:
    """How much slower than an idle machine this one runs now: every timeout and every
    bound on elapsed time in the suite is multiplied by it (``10 * TIME_SCALE``).

    It is measured, not configured: the run-queue length per core over the last minute
    (``os.getloadavg``), taken as each test starts (:meth:`hold`), so a bound taken while
    a second full run shares the machine grows with that load instead of failing a
    correct hub. At most
    :attr:`CEILING`, so that a hung test still ends; at least 1, or the fixed floor from
    ``RSHUB_TEST_TIME_SCALE`` (a machine known to be slow, whatever its load)."""

    #: The largest factor: a hung test fails within this many times its timeout.
    CEILING = 6.0

    def __init__(self, floor: float) -> None:
        self.floor = floor
        self._held: float | None = None

    def hold(self) -> None:
        """Keep the present factor until :meth:`release`: within one test every bound
        agrees with every other (a token minted for ``6 * TIME_SCALE`` seconds, then a
        check that its lease is at most ``6 * TIME_SCALE``), whatever the load does
        meanwhile. The suite holds it for each test (``tests/conftest.py``)."""
        self._held = self.measured()

    def release(self) -> None:
        self._held = None

    def __float__(self) -> float:
        return self.measured() if self._held is None else self._held

    def measured(self) -> float:
        """The factor the load gives now."""
        try:
            per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
        except OSError:  # no load figure on this platform
            per_core = 1.0
        return max(self.floor, min(per_core, self.CEILING), 1.0)

    def __mul__(self, other: float) -> float:
        return float(self) * other

    def __rmul__(self, other: float) -> float:
        return other * float(self)

    def __repr__(self) -> str:
        return f"TimeScale({float(self):.2f})"


#: Scales every timeout in the suite by the machine's present load (:class:`TimeScale`).
TIME_SCALE = TimeScale(float(os.environ.get("RSHUB_TEST_TIME_SCALE", "1")))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def notification(
    changes: Iterable[dict[str, Any]], *, capability: str = "changelist-notification"
) -> bytes:
    """A change notification with one ``<url>`` per change dict (loc, lastmod, change, ...)."""
    urls = []
    for c in changes:
        attrs = f' change="{c.get("change", "updated")}"'
        for name in ("hash", "length", "type"):
            if name in c:
                attrs += f" {name}={quoteattr(str(c[name]))}"
        links = "".join(
            f"<rs:ln rel={quoteattr(ln['rel'])} href={quoteattr(ln['href'])}/>"
            for ln in c.get("links", [])
        )
        urls.append(
            f"<url><loc>{escape(c['loc'])}</loc><lastmod>{c.get('lastmod', '2026-01-01T00:00:00Z')}"
            f"</lastmod><rs:md{attrs}/>{links}</url>"
        )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="{capability}"/>' + "".join(urls) + "</urlset>"
    ).encode()


def changes(
    n: int, *, prefix: str = "http://example.org/r", start: int = 0
) -> list[dict[str, Any]]:
    """``n`` updated-changes with distinct locs and non-decreasing lastmods."""
    return [
        {
            "loc": f"{prefix}{i}",
            "lastmod": f"2026-01-01T00:00:{(i // 1000) % 60:02d}Z",
            "change": "updated",
        }
        for i in range(start, start + n)
    ]


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0, interval: float = 0.01
) -> None:
    """Poll ``condition`` until true; fail the test after ``timeout`` seconds (scaled)."""
    deadline = time.monotonic() + timeout * TIME_SCALE
    while True:
        result = condition()
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout * TIME_SCALE:.1f}s")
        await asyncio.sleep(interval)


def worker_pids(supervisor: int) -> set[int]:
    """The live worker processes of ``rshub serve --workers N`` running as ``supervisor``.

    A worker is known by what it is: a child of the supervisor whose command line is the
    one hub.serve.workers.WorkerPool runs (this interpreter, ``-m rshub serve``, ending in
    ``--workers 1``), compared word for word. The embedded redis-server is a child too, and
    a substring of a path (a checkout under ``.../rshub``) would count it as a worker.
    """
    try:
        with open(f"/proc/{supervisor}/task/{supervisor}/children") as f:
            kids = {int(p) for p in f.read().split()}
    except FileNotFoundError:
        return set()
    workers = set()
    for kid in kids:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                argv = [os.fsdecode(a) for a in f.read().split(b"\0")[:-1]]
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone meanwhile; a zombie's command line is empty
        if argv[:4] == [sys.executable, "-m", "rshub", "serve"] and argv[-2:] == [
            "--workers",
            "1",
        ]:
            workers.add(kid)
    return workers


class HubProcess:
    """``rshub serve`` as a real child process (embedded Redis under ``data_dir``)."""

    def __init__(
        self, data_dir: str, port: int | None = None, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.args = args
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> HubProcess:
        log = open(os.path.join(self.data_dir, "hub.log"), "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rshub",
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                self.data_dir,
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )
        log.close()
        deadline = time.monotonic() + timeout * TIME_SCALE
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"hub exited with {self.proc.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"hub not healthy within {timeout}s: {self.log()}")

    def log(self) -> str:
        path = os.path.join(self.data_dir, "hub.log")
        return open(path, errors="replace").read()[-3000:] if os.path.exists(path) else ""

    def kill(self) -> None:
        """SIGKILL: no clean shutdown at all."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
