"""``rshub serve`` with bad settings: exit 2 and one stderr line naming the setting."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import HubProcess, free_port


def serve(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rshub",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--port",
            str(free_port()),
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "env,argv,names",
    [
        ({"RSHUB_TOKENS": "abc"}, [], "RSHUB_TOKENS"),
        ({"RSHUB_TOPIC_TOKENS": "{bad"}, [], "RSHUB_TOPIC_TOKENS"),
        ({"RSHUB_APPENDFSYNC": "sometimes"}, [], "RSHUB_APPENDFSYNC"),
        ({"RSHUB_MAX_CONNECTIONS": "0"}, [], "RSHUB_MAX_CONNECTIONS"),
        ({}, ["--redis-url", "notaurl"], "RSHUB_REDIS_URL"),
        ({}, ["--redis-url", "redis://[::1"], "RSHUB_REDIS_URL"),
        ({}, ["--redis-url", "redis://127.0.0.1:99999"], "RSHUB_REDIS_URL"),
        # Each of these was taken, then broke the hub (tests/hub/test_settings_fuzz.py).
        ({"RSHUB_GC_YOUNG_THRESHOLD": str(10**30)}, [], "RSHUB_GC_YOUNG_THRESHOLD"),
        ({"RSHUB_WORKERS": str(10**30)}, [], "RSHUB_WORKERS"),
        ({"RSHUB_TOPIC_RETENTION_MAX_EVENTS": '{"t": -1}'}, [], "RSHUB_TOPIC_RETENTION_MAX_EVENTS"),
        ({"RSHUB_ADMIN_TOKEN": ""}, [], "RSHUB_ADMIN_TOKEN"),
        ({"RSHUB_CALLBACK_CA_FILE": "ca\n.pem"}, [], "RSHUB_CALLBACK_CA_FILE"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(
    tmp_path: Path, env: dict[str, str], argv: list[str], names: str
) -> None:
    done = serve(tmp_path, *argv, env=env)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rshub serve: bad setting: ") and names in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


def test_an_unreachable_redis_is_one_line_naming_it(tmp_path: Path) -> None:
    """Nothing listens there. (The hub waits for an external Redis for
    RSHUB_REDIS_STARTUP_SECONDS, 60 s by default, so that containers may start in any order;
    0 makes it try once.)"""
    done = serve(
        tmp_path,
        "--redis-url",
        "redis://127.0.0.1:1",
        env={"RSHUB_REDIS_STARTUP_SECONDS": "0"},
    )
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "RSHUB_REDIS_URL" in lines[0] and "did not answer" in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


def test_listening_is_logged_only_once_listening(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(tmp_path, "--port", str(port))
    assert done.returncode == 1 and "cannot listen" in done.stderr
    assert "listening on" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr + done.stdout

    (tmp_path / "ok").mkdir()
    hub = HubProcess(str(tmp_path / "ok")).start()
    try:
        assert f"listening on http://127.0.0.1:{hub.port}" in hub.log()
    finally:
        hub.stop()
