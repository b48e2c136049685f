"""A clean stop of the embedded redis-server leaves its AOF compacted (an RDB image), so the
next start loads it rather than replaying every command: a restart of a hub holding a big
topic serves sooner. The data comes back whole either way."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from hub.store.embedded_redis import AOF_FILE, COMPACT_MIN_BYTES, RDB_MAGIC, EmbeddedRedis
from tests.support import TIME_SCALE, changes, free_port, notification

#: Hash fields written: an AOF of several times ``COMPACT_MIN_BYTES``.
FIELDS = 60_000
VALUE = b"x" * 200


def _fill(server: EmbeddedRedis, start: int = 0) -> None:
    client = redis.Redis.from_url(server.url)
    try:
        for first in range(start, start + FIELDS, 5_000):
            pipe = client.pipeline(transaction=False)
            for i in range(first, first + 5_000):
                pipe.hset("fold", f"http://example.org/{i}", VALUE)
            pipe.execute()
    finally:
        client.close()


def _fields(server: EmbeddedRedis) -> int:
    client = redis.Redis.from_url(server.url)
    try:
        return int(client.hlen("fold"))
    finally:
        client.close()


@pytest.mark.timeout(120)
def test_a_stop_compacts_a_grown_aof_and_the_data_comes_back(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path, appendfsync="always")
    server.start()
    _fill(server)
    aof = tmp_path / AOF_FILE
    logged = aof.stat().st_size
    assert logged > COMPACT_MIN_BYTES and not aof.read_bytes().startswith(RDB_MAGIC)
    server.stop()
    assert aof.read_bytes().startswith(RDB_MAGIC)  # an RDB image, then nothing
    assert aof.stat().st_size < logged
    server.start()
    try:
        assert _fields(server) == FIELDS
        # a small change since: not compacted again (a stop stays quick)
        client = redis.Redis.from_url(server.url)
        client.hset("fold", "one-more", b"y")
        client.close()
        image = aof.read_bytes()[:1000]
    finally:
        server.stop()
    assert aof.read_bytes()[:1000] == image and aof.read_bytes().endswith(
        b"one-more\r\n$1\r\ny\r\n"
    )
    server.start()
    try:
        assert _fields(server) == FIELDS + 1
    finally:
        server.stop(compact_seconds=0)


@pytest.mark.timeout(60)
def test_a_small_aof_is_left_as_it_is(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path, appendfsync="always")
    server.start()
    client = redis.Redis.from_url(server.url)
    client.set("k", b"v")
    client.close()
    server.stop()
    aof = (tmp_path / AOF_FILE).read_bytes()
    assert not aof.startswith(RDB_MAGIC) and b"$1\r\nk\r\n" in aof


def _serve(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    """``rshub serve`` in a session of its own (its process group is the test's to signal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSHUB_")}
    with (data_dir / "hub.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rshub", "serve", "--port", str(port), "--data-dir",
             str(data_dir)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 30 * TIME_SCALE
    while time.monotonic() < deadline:
        assert proc.poll() is None, (data_dir / "hub.log").read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("rshub serve not healthy in time")


def _stop_group(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the hub's whole process group, as Ctrl-C or ``kill -- -PGID`` sends."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(60 * TIME_SCALE)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


@pytest.mark.timeout(300)
def test_a_signal_to_the_hubs_process_group_leaves_a_compacted_aof(tmp_path: Path) -> None:
    """The embedded server is in a session of its own: the signal reaches the hub alone,
    which compacts the AOF and then stops the server (had the server got the signal too,
    it would have exited with its AOF a log of every command)."""
    port = free_port()
    proc = _serve(tmp_path, port)
    try:
        for start in range(0, 20_000, 10_000):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/topics/t",
                data=notification(changes(10_000, start=start)),
                headers={"Content-Type": "application/xml"},
            )
            with urllib.request.urlopen(request, timeout=60) as resp:
                assert resp.status == 202
        aof = tmp_path / "redis" / AOF_FILE
        logged = aof.stat().st_size  # written at once (only its fsync waits a second)
        assert logged > COMPACT_MIN_BYTES and not aof.read_bytes().startswith(RDB_MAGIC)
    finally:
        code = _stop_group(proc)
    assert code == 0, (tmp_path / "hub.log").read_text()[-2000:]
    assert aof.read_bytes().startswith(RDB_MAGIC) and aof.stat().st_size < logged
    proc = _serve(tmp_path, port)  # and it comes back with the topic
    try:
        url = f"http://127.0.0.1:{port}/topics/t/capabilitylist.xml"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200
    finally:
        assert _stop_group(proc) == 0


@pytest.mark.timeout(300)
def test_a_server_still_loading_its_data_is_waited_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A start waits for a server that answers ``-LOADING`` beyond ``start_timeout``: a
    data set that takes longer to read than that (a big topic, an AOF that is a log of
    commands) is not killed mid-load, again and again, until the start gives up."""
    server = EmbeddedRedis(tmp_path, appendfsync="everysec")
    server.start()
    for start in range(0, 4 * FIELDS, FIELDS):
        _fill(server, start)
    server.stop(compact_seconds=0)  # a log of every command: slow to replay
    caplog.set_level(logging.INFO, logger="hub.store.embedded_redis")
    slow = EmbeddedRedis(tmp_path, start_timeout=0.3)
    slow.start()
    try:
        assert _fields(slow) == 4 * FIELDS
    finally:
        slow.stop(compact_seconds=0)
    loaded = re.findall(
        r"DB loaded from append only file: ([0-9.]+)", (tmp_path / "redis.log").read_text()
    )
    assert loaded, "the server read no AOF"
    if float(loaded[-1]) > 0.5:  # longer than start_timeout (and the time to listen)
        assert "loading its data set" in caplog.text
