"""Logs of a real ``rshub serve``: JSON lines, request ids, the access log, shutdown lines,
log settings; and the start-up wait for an external Redis that is not up yet."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hub.core.exceptions import RedisUnavailable
from hub.core.settings import Settings
from hub.store.embedded_redis import EmbeddedRedis
from tests.conftest import start_hub
from tests.support import HubProcess, free_port, wait_for


def _json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_logs_with_request_ids_access_log_and_shutdown_lines(tmp_path: Path) -> None:
    hub = HubProcess(str(tmp_path), None, "--log-format", "json", "--access-log").start()
    try:
        req = urllib.request.Request(f"{hub.url}/healthz", headers={"X-Request-Id": "trace-42"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["X-Request-Id"] == "trace-42"
    finally:
        hub.stop()
    assert hub.proc is not None and hub.proc.returncode == 0
    records = _json_lines(hub.log())  # every line parses as JSON, or this fails
    for record in records:
        assert {"time", "level", "logger", "message", "request_id"} <= set(record)
    [access] = [
        r for r in records if r["logger"] == "rshub.access" and r["request_id"] == "trace-42"
    ]
    assert access["status"] == 200 and access["route"] == "/healthz" and access["method"] == "GET"
    messages = [str(r["message"]) for r in records]
    assert any(m.startswith("shutdown started") for m in messages)
    assert messages.index("shutdown complete") > next(
        i for i, m in enumerate(messages) if m.startswith("shutdown started")
    )


def test_the_access_log_never_shows_a_query_token(tmp_path: Path) -> None:
    """Browsers pass read tokens as ``?access_token=`` (EventSource cannot set headers)."""
    hub = HubProcess(str(tmp_path), None, "--log-format", "json", "--access-log").start()
    paths = [
        "/topics/t/events?access_token=SECRET-ONE",
        "/topics/t/events?since=0&ACCESS_TOKEN=SECRET-TWO&x=1",
        "/healthz?a=1&access_token=SECRET-THREE",
    ]
    try:
        for path in paths:
            try:
                urllib.request.urlopen(f"{hub.url}{path}", timeout=5).close()
            except urllib.error.HTTPError:
                pass  # an unknown topic is a 404: logged all the same
    finally:
        hub.stop()
    log = hub.log()
    assert "SECRET" not in log
    logged = [r["path"] for r in _json_lines(log) if r["logger"] == "rshub.access"]
    assert "/topics/t/events?access_token=***" in logged
    assert "/topics/t/events?since=0&ACCESS_TOKEN=***&x=1" in logged
    assert "/healthz?a=1&access_token=***" in logged


def test_the_access_log_masks_a_token_wherever_it_stands(tmp_path: Path) -> None:
    """A JWT after ``;``, inside the path or bare was logged verbatim at INFO."""
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJTRUNSRVQifQ.SECRETsig"
    hub = HubProcess(str(tmp_path), None, "--log-format", "json", "--access-log").start()
    paths = {
        f"/topics/t/events;access_token={jwt}": "/topics/t/events;access_token=***",
        f"/topics/access_token={jwt}/events": "/topics/access_token=***/events",
        f"/topics/t/events?x=1;access_token={jwt}": "/topics/t/events?x=1;access_token=***",
        f"/topics/{jwt}/events": "/topics/***/events",
        "/topics/eyjafjalla.is.fine/events": "/topics/eyjafjalla.is.fine/events",
    }
    try:
        for path in paths:
            try:
                urllib.request.urlopen(f"{hub.url}{path}", timeout=5).close()
            except urllib.error.HTTPError:
                pass  # refused or unknown: logged all the same
    finally:
        hub.stop()
    log = hub.log()
    assert "SECRET" not in log and "eyJzdWIi" not in log
    logged = [r["path"] for r in _json_lines(log) if r["logger"] == "rshub.access"]
    for masked in paths.values():
        assert masked in logged, (masked, logged)


def test_log_level_from_the_environment_and_no_access_log_by_default(tmp_path: Path) -> None:
    hub = HubProcess(str(tmp_path), None, env={"RSHUB_LOG_LEVEL": "warning"}).start()
    try:
        urllib.request.urlopen(f"{hub.url}/healthz", timeout=5).close()
    finally:
        hub.stop()
    log = hub.log()
    assert " INFO " not in log and "GET /healthz" not in log


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--log-level", "LOUD"], {}), ([], {"RSHUB_LOG_LEVEL": "verbose"})],
)
def test_an_invalid_log_level_is_an_error_naming_the_setting(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rshub", "serve", "--port", str(free_port()), *args],
        cwd=tmp_path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "log_level" in proc.stderr and "DEBUG, INFO" in proc.stderr


async def test_start_up_waits_for_a_redis_that_comes_up_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    redis = EmbeddedRedis(tmp_path / "redis", port=port)
    settings = Settings(host="127.0.0.1", port=free_port(), redis_startup_seconds=30)
    caplog.set_level(logging.INFO, logger="hub.store.redis_connection")
    starting = asyncio.create_task(start_hub(settings, redis.url))
    try:
        await wait_for(lambda: "not reachable (attempt 2" in caplog.text)
        assert not starting.done()
        await asyncio.to_thread(redis.start)
        runner, _app = await asyncio.wait_for(starting, 30)
        try:
            assert "answered after" in caplog.text
            assert any(r.levelno == logging.WARNING for r in caplog.records)
        finally:
            await runner.cleanup()
    finally:
        if not starting.done():
            starting.cancel()
        redis.stop()


async def test_start_up_gives_up_with_a_clear_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    settings = Settings(host="127.0.0.1", port=free_port(), redis_startup_seconds=0.5)
    with pytest.raises(RedisUnavailable, match=rf"127\.0\.0\.1:{port}.* within 0\.5s"):
        await start_hub(settings, f"redis://127.0.0.1:{port}/0")
