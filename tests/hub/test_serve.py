"""``rshub serve`` as a user runs it: embedded Redis, health, clean stop, no orphans."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from hub.embedded_redis import EmbeddedRedis, _alive_redis
from tests.support import HubProcess, free_port


def _redis_pid(data_dir: Path) -> int:
    return int((data_dir / "redis" / "redis.pid").read_text())


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive_redis(pid):
            return True
        time.sleep(0.02)
    return False


def test_serve_is_healthy_within_5s_on_embedded_redis(tmp_path: Path) -> None:
    started = time.monotonic()
    hub = HubProcess(str(tmp_path)).start(timeout=5)
    try:
        assert time.monotonic() - started < 5
        with urllib.request.urlopen(hub.url + "/healthz", timeout=2) as resp:
            body = resp.read().decode()
        assert '"redis":"ok"' in body.replace(" ", "")
        pid = _redis_pid(tmp_path)
        assert _alive_redis(pid)
    finally:
        hub.stop()
    assert hub.proc is not None and hub.proc.returncode == 0
    assert _wait_gone(pid), "SIGTERM left the embedded redis-server running"


def test_sigkill_of_the_hub_leaves_no_orphan_redis(tmp_path: Path) -> None:
    hub = HubProcess(str(tmp_path)).start()
    pid = _redis_pid(tmp_path)
    hub.kill()
    assert _wait_gone(pid), "embedded redis-server outlived its killed parent"


def test_data_survives_restart(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path, appendfsync="always")
    url = server.start()
    client = redis.Redis.from_url(url)
    client.xadd("s", {"e": b"1"})
    client.close()
    server.stop()
    again = EmbeddedRedis(tmp_path)
    client = redis.Redis.from_url(again.start())
    try:
        assert client.xlen("s") == 1
    finally:
        client.close()
        again.stop()


def test_non_loopback_bind_without_tokens_refuses(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rshub",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=os.environ.copy(),
    )
    assert proc.returncode == 2
    assert "--open" in proc.stderr


@pytest.mark.parametrize("argv", [["--port", "70000"], ["--port", "x"]])
def test_bad_flags_fail_clearly(tmp_path: Path, argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rshub", "serve", "--data-dir", str(tmp_path), *argv],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "port" in proc.stderr
