"""A clean stop of the embedded redis-server leaves its AOF compacted (an RDB image), so the
next start loads it rather than replaying every command: a restart of a hub holding a big
topic serves sooner. The data comes back whole either way."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from hub.store.embedded_redis import AOF_FILE, COMPACT_MIN_BYTES, RDB_MAGIC, EmbeddedRedis

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
