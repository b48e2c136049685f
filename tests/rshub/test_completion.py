"""``rshub completion SHELL`` prints a script that completes every sub-command."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = (
    "serve",
    "publish",
    "wikipedia",
    "bridge",
    "subscribe",
    "sync",
    "dead-letters",
    "inspect",
    "token",
    "completion",
)


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_names_the_sub_commands(shell: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rshub", "completion", shell],
        capture_output=True,
        timeout=30,
        check=True,
    )
    script = done.stdout.decode()
    assert "rshub" in script and "--topic" in script
    for command in COMMANDS:
        assert command in script, command


def test_bash_accepts_the_script() -> None:
    script = subprocess.run(
        [sys.executable, "-m", "rshub", "completion", "bash"], capture_output=True, timeout=30
    ).stdout
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
