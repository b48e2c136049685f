"""What the Redis Cluster and Sentinel fixtures share: a set of redis-server processes this
test started, under one scratch directory, stopped by pid (never by name) with it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self


class RedisProcesses:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            proc.wait(10)
        self._procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
