"""The ``rshub`` command itself, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys

from hub import __version__


def test_version_prints_the_package_version_and_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rshub", "--version"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"rshub {__version__}"
