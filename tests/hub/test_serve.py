"""``rshub serve`` as a user runs it: embedded Redis, health, clean stop, no orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from hub.store.embedded_redis import EmbeddedRedis, _alive_redis
from tests.support import TIME_SCALE, HubProcess, free_port


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
    # A bound on a busy machine (TIME_SCALE), not a speed target: bench/peer_nchan.py
    # measures restart -> serving.
    hub = HubProcess(str(tmp_path)).start(timeout=5 * TIME_SCALE)
    try:
        assert time.monotonic() - started < 5 * TIME_SCALE
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


def _health(hub: HubProcess) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(hub.url + "/healthz", timeout=2) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_killed_embedded_redis_is_restarted_and_publishes_resume(tmp_path: Path) -> None:
    """kill -9 of the redis-server child: the hub reports it, restarts it on the same data,
    and publishes work again without restarting the hub."""
    hub = HubProcess(str(tmp_path), None, env={"RSHUB_APPENDFSYNC": "always"}).start()
    try:
        body = (
            b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            b'xmlns:rs="http://www.openarchives.org/rs/terms/">'
            b'<rs:md capability="changelist-notification"/><url><loc>http://x/1</loc>'
            b'<lastmod>2026-01-01T00:00:00Z</lastmod><rs:md change="created"/></url></urlset>'
        )

        def publish() -> int:
            request = urllib.request.Request(
                hub.url + "/topics/t", data=body, headers={"Content-Type": "application/xml"}
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as resp:
                    return resp.status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert publish() == 202
        status, health = _health(hub)
        embedded = health["embedded_redis"]
        assert isinstance(embedded, dict) and embedded["restarts"] == 0
        old_pid = int(embedded["pid"])
        os.kill(old_pid, signal.SIGKILL)
        killed = time.monotonic()
        recovered = None
        while time.monotonic() - killed < 20 * TIME_SCALE:
            status, health = _health(hub)
            embedded = health["embedded_redis"]
            assert isinstance(embedded, dict)
            if status == 200 and embedded["restarts"] == 1 and publish() == 202:
                recovered = time.monotonic() - killed
                break
            time.sleep(0.05)
        assert recovered is not None, hub.log()
        print(f"\nembedded Redis killed; publishes resumed after {recovered:.2f} s")
        assert int(embedded["pid"]) != old_pid
        assert not _alive_redis(old_pid)  # reaped: no zombie left behind
        events = urllib.request.urlopen(hub.url + "/topics/t/events?since=0", timeout=2)
        first = events.read(200)  # the event stored before the kill is still there
        events.close()
        assert b"http://x/1" in first
    finally:
        hub.stop()
