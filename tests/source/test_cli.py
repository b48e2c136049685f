"""``rshub source``'s usage errors: each said in one line, exit 2, nothing served; and a
hub that refuses the changes (a wrong token) ends it with exit 1, saying why."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rsclient.statefile import StateFile
from tests.commands import Command
from tests.conftest import Hub
from tests.support import free_port

pytestmark = pytest.mark.timeout(60)


async def said(*argv: str) -> tuple[int, list[str]]:
    cmd = await Command("source", *argv).start()
    try:
        code = await cmd.wait(30)
    finally:
        await cmd.stop()
    return code, [line for line in cmd.stderr.splitlines() if line.startswith("rshub source")]


async def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    port = str(free_port())

    code, lines = await said(str(tmp_path / "missing"), "--port", port)
    assert code == 2 and len(lines) == 1 and "No such file or directory" in lines[0]
    code, lines = await said(str(tmp_path / "file"), "--port", port)
    assert code == 2 and lines == [f"rshub source: {tmp_path / 'file'} is not a directory"]

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        code, lines = await said(str(tmp_path / "dir"), "--port", busy)
    assert code == 2 and lines == [f"rshub source: cannot listen on 127.0.0.1:{busy}: in use"]

    other = tmp_path / "other.json"
    StateFile(other).save({"format": 1, "directory": "/elsewhere", "base_url": "http://x"})
    code, lines = await said(str(tmp_path / "dir"), "--port", port, "--state", str(other))
    assert code == 2 and len(lines) == 1 and "is for directory '/elsewhere'" in lines[0]
    (tmp_path / "junk.json").write_text("[1, 2]")
    code, lines = await said(
        str(tmp_path / "dir"), "--port", port, "--state", str(tmp_path / "junk.json")
    )
    assert code == 2 and len(lines) == 1 and "does not hold a JSON object" in lines[0]

    code, _ = await said(str(tmp_path / "dir"), "--port", "0")
    assert code == 2
    code, lines = await said(str(tmp_path / "dir"), "--hub", "ftp://127.0.0.1:1", "--topic", "t")
    assert code == 2 and len(lines) == 1 and "--hub" in lines[0]
    assert not any((tmp_path / "dir").iterdir())  # no state written by a refused start


@pytest.fixture
def hub_settings() -> dict[str, object]:
    return {"tokens": ["right"]}


async def test_a_hub_that_refuses_the_changes_ends_it_with_exit_1(hub: Hub, tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.txt").write_text("a\n")
    code, lines = await said(
        str(tmp_path / "dir"),
        "--port",
        str(free_port()),
        "--hub",
        hub.url,
        "--topic",
        "t",
        "--token",
        "wrong",
    )
    assert code == 1, lines
    assert any("HTTP 401" in line or "HTTP 403" in line for line in lines), lines
    assert not any("wrong" in line for line in lines)  # the token is never shown
