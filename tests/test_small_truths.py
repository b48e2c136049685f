"""What the help, the docs page, the logs and the README say is what the hub and clients do."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.commands import Command
from tests.conftest import Hub
from tests.support import TIME_SCALE

ROOT = Path(__file__).resolve().parents[1]


def rshub(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rshub", *argv],
        capture_output=True,
        text=True,
        timeout=timeout * TIME_SCALE,
    )


def test_serve_help_names_the_variable_each_flag_comes_from() -> None:
    text = " ".join(rshub("serve", "--help").stdout.split())
    # RSHUB_TOKEN is not read by the hub: the help must not send anyone there.
    assert "RSHUB_TOKENS" in text and "RSHUB_ALIAS_URLS" in text


@pytest.mark.parametrize("command", ["subscribe", "sync"])
def test_the_token_of_subscribe_and_sync_is_a_read_token(command: str) -> None:
    text = " ".join(rshub(command, "--help").stdout.split())
    token = text.split("--token TOKEN", 2)[-1]
    assert token.lstrip().startswith("read token of a private topic"), token[:120]
    assert "for publishing" not in text


@pytest.mark.parametrize("loc", ["notaurl", "ftp://e.org/a", "http://exa mple.org/"])
async def test_a_bad_loc_is_a_usage_error(hub: Hub, loc: str) -> None:
    cmd = Command("publish", "--hub", hub.url, "--topic", "t", "--loc", loc)
    await cmd.start()
    try:
        assert await cmd.wait() == 2, cmd.stderr
    finally:
        await cmd.stop()
    assert (
        cmd.stderr.strip() == f"rshub publish: --loc must be an absolute http(s) URL, got {loc!r}"
    )


async def test_the_docs_page_renders_code_spans(hub: Hub) -> None:
    async with hub.session.get(f"{hub.url}/docs") as resp:
        assert resp.status == 200
        page = await resp.text()
    assert "`" not in page  # Markdown code spans are rendered, not shown raw
    assert "<code>hub.mode</code>" in page


def test_a_port_in_use_is_not_announced_as_ready(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable, "-m", "rshub", "serve", "--port", str(port),
                "--data-dir", str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=60 * TIME_SCALE,
            env={**os.environ, "RSHUB_LOG_LEVEL": "INFO"},
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "hub ready" not in done.stderr, done.stderr
    # The first line and the only one: four lines of the embedded Redis starting and
    # stopping came first, before.
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"rshub serve: cannot listen on 127.0.0.1:{port}: "), line
    assert "in use" in line, line
    assert not (tmp_path / "redis").exists()  # no Redis was started for nothing


def test_the_readme_commands_write_nothing_into_the_checkout() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    writers = [line for block in blocks for line in block.splitlines() if "rshub " in line]
    for line in writers:
        command = line.split("#", 1)[0].split()
        if "sync" in command:
            dest = command[command.index("--dest") + 1]
            assert dest.startswith(("~", "/")), line
        if "wikipedia" in command or "bridge" in command:
            assert "--state" in command, line  # its default lands in the working directory
            state = command[command.index("--state") + 1]
            assert state.startswith(("~", "/")), line


@pytest.mark.parametrize("hub_settings", [{"tokens": ["pub"], "admin_token": "adm"}])
async def test_the_dashboard_takes_the_admin_token_and_says_so(hub: Hub) -> None:
    url = f"{hub.url}/admin/overview.json"
    for token in ("adm", "pub"):
        headers = {"Authorization": f"Bearer {token}"}
        async with hub.session.get(url, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
    async with hub.session.get(url, headers={"Authorization": "Bearer nope"}) as resp:
        assert resp.status == 403
        error = (await resp.json())["error"]
    assert "admin token" in error and "hub-wide token" in error
