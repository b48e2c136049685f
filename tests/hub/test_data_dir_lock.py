"""One data directory, one hub: a second owner is refused at once and harms nothing; a
directory that cannot hold data is named as the problem."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from hub.core.exceptions import DataDirLocked, DataDirUnusable
from hub.store.embedded_redis import EmbeddedRedis, _alive_redis, _ping, auth_password
from tests.support import TIME_SCALE, HubProcess, free_port

#: Owns ``argv[1]`` with an embedded Redis, prints "<port> <redis pid>", holds until stdin ends.
HOLDER = """
import sys
from hub.store.embedded_redis import EmbeddedRedis
server = EmbeddedRedis(sys.argv[1], appendfsync="always")
server.start()
print(server.port, server.pid, flush=True)
sys.stdin.read()
server.stop()
"""


class Holder:
    """A separate process owning a data directory, as a running hub would."""

    def __init__(self, data_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(data_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 20 * TIME_SCALE)
        assert ready, "the holder did not start its Redis within 20 s"
        port, redis_pid = self.proc.stdout.readline().split()
        self.port, self.redis_pid = int(port), int(redis_pid)

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout:
            self.proc.stdout.close()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    held = Holder(tmp_path)
    yield held
    held.close()


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout * TIME_SCALE
    while _alive_redis(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_second_owner_is_refused_at_once_naming_the_first(tmp_path: Path, holder: Holder) -> None:
    second = EmbeddedRedis(tmp_path)
    started = time.monotonic()
    with pytest.raises(DataDirLocked) as refused:
        second.start()
    assert time.monotonic() - started < 1.0 * TIME_SCALE
    message = str(refused.value)
    assert f"pid {holder.proc.pid}" in message and f"127.0.0.1:{holder.port}" in message
    assert refused.value.pid == holder.proc.pid and refused.value.port == holder.port
    assert second.pid is None
    # the running one is untouched: same server, still answering
    password = auth_password(tmp_path)
    assert _alive_redis(holder.redis_pid) and _ping(holder.port, 1.0, password)
    assert int((tmp_path / "redis.pid").read_text()) == holder.redis_pid
    holder.close()
    assert holder.proc.returncode == 0


def test_a_dead_owner_frees_the_directory_and_its_data_survives(tmp_path: Path) -> None:
    held = Holder(tmp_path)
    try:
        client = redis.Redis(port=held.port, password=auth_password(tmp_path))
        client.set("k", b"v")  # appendfsync always: on disk when acknowledged
        client.close()
        held.proc.send_signal(signal.SIGKILL)  # its Redis gets SIGTERM from the kernel
        held.proc.wait(10)
    finally:
        held.close()
    successor = EmbeddedRedis(tmp_path)
    client = redis.Redis.from_url(successor.start())
    try:
        assert not _alive_redis(held.redis_pid)
        assert client.get("k") == b"v"
    finally:
        client.close()
        successor.stop()


def test_a_second_owner_in_the_same_process_is_refused_too(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as first:
        with pytest.raises(DataDirLocked, match=f"pid {os.getpid()}"):
            EmbeddedRedis(tmp_path).start()
        assert first.pid is not None and _ping(first.port or 0, 1.0, first.password)


def test_data_dir_below_a_regular_file_is_named_as_the_problem(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(DataDirUnusable) as unusable:
        EmbeddedRedis(tmp_path / "file" / "redis").start()
    message = str(unusable.value)
    assert "a parent of it is not a directory" in message and "listen" not in message
    assert str(tmp_path / "file" / "redis") in message


def test_data_dir_that_is_a_regular_file_is_named_as_the_problem(tmp_path: Path) -> None:
    (tmp_path / "redis").write_text("not a directory")
    with pytest.raises(DataDirUnusable, match="it exists and is not a directory"):
        EmbeddedRedis(tmp_path / "redis").start()


def _start_as_nobody(data_dir: Path) -> str:
    """``start()``'s error message, from a forked child running as ``nobody`` (root may
    write anywhere, and a fresh interpreter could not read this one's files as nobody)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            try:
                EmbeddedRedis(data_dir).start()
                message = "started"
            except DataDirUnusable as exc:
                message = str(exc)
            os.write(write_end, message.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, message
    return message


def test_unwritable_data_dir_is_named_as_the_problem() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as top:
        os.chmod(top, 0o755)
        data = Path(top) / "data"
        data.mkdir()
        os.chmod(data, 0o500)  # owned by root, read-only for everyone else
        if os.geteuid() == 0:
            message = _start_as_nobody(data)
        else:
            with pytest.raises(DataDirUnusable) as unusable:
                EmbeddedRedis(data).start()
            message = str(unusable.value)
    assert message == f"data directory {data} is unusable: it is not writable"


def test_second_rshub_serve_on_a_data_dir_fails_fast_and_the_first_stays_healthy(
    tmp_path: Path,
) -> None:
    first = HubProcess(str(tmp_path)).start()
    try:
        started = time.monotonic()
        argv = ["serve", "--port", str(free_port()), "--data-dir", str(tmp_path)]
        second = subprocess.run(
            [sys.executable, "-m", "rshub", *argv],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert time.monotonic() - started < 10 * TIME_SCALE  # not 15 s of waiting
        assert second.returncode == 1
        assert f"pid {first.proc.pid if first.proc else 0}" in second.stderr
        assert "in use by a running hub" in second.stderr and "listen" not in second.stderr
        with urllib.request.urlopen(first.url + "/healthz", timeout=2) as resp:
            assert resp.status == 200
    finally:
        first.stop()
