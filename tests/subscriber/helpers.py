"""Helpers for the subscriber's end-to-end tests: child processes and mirror snapshots."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.support import TIME_SCALE, notification


class Child:
    """A ``python -m rshub ...`` child process with its stderr in a file."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log_path = log
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rshub", *self.args],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout * TIME_SCALE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"did not stop on SIGTERM: {self.log()[-2000:]}") from None


def mirror_files(dest: Path) -> dict[str, bytes]:
    """Every mirrored file (rshub's own files left out), by path relative to ``dest``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(dest):
        dirnames[:] = [d for d in dirnames if not d.startswith(".rshub")]
        for name in filenames:
            if not name.startswith(".rshub"):
                path = Path(dirpath, name)
                try:
                    out[str(path.relative_to(dest))] = path.read_bytes()
                except FileNotFoundError:  # removed while we looked
                    continue
    return out


def expected_files(source_url: str, files: dict[str, bytes]) -> dict[str, bytes]:
    host = source_url.removeprefix("http://").replace(":", "_")
    return {f"http/{host}/files/{name}": data for name, data in files.items()}


async def publish(
    session: aiohttp.ClientSession, hub: str, topic: str, changes: list[dict[str, object]]
) -> list[str]:
    async with session.post(
        f"{hub}/topics/{topic}",
        data=notification(changes),
        headers={"Content-Type": "application/xml"},
    ) as resp:
        assert resp.status == 202, await resp.text()
        return list((await resp.json())["ids"])
