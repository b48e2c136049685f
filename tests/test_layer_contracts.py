"""The import-linter contracts cannot be walked around: an import planted in a lower layer,
through the ``hub`` package root or straight up a layer, breaks a contract.

The contracts run on a copy of the packages (``lint-imports`` reads the source, never imports
it), so the checkout is never touched while other tests run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("resourcesync", "rsclient", "hub", "publisher", "subscriber", "rshub", "source")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the packages and of pyproject.toml (the contracts), without caches."""
    root = tmp_path_factory.mktemp("contracts")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_copy_keeps_every_contract(pristine: Path) -> None:
    """The baseline: without a plant, the copy passes, so a failure below is the plant's."""
    result = _lint(pristine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "plant", "contract"),
    [
        ("hub/store/planted.py", "from hub import create_app\n", "hub package root"),
        ("hub/core/planted.py", "import hub\n", "hub package root"),
        ("hub/live/planted.py", "from hub import __version__\n", "hub package root"),
        ("hub/store/planted.py", "from hub.web.app import create_app\n", "serve > web > live"),
        ("hub/core/planted.py", "import aiohttp\n", "reach neither aiohttp nor redis"),
        ("source/planted.py", "from hub.core import settings\n", "never import the hub"),
        ("publisher/planted.py", "import source.app\n", "the Source on the publisher"),
    ],
)
def test_a_planted_import_breaks_a_contract(
    pristine: Path, tmp_path: Path, module: str, plant: str, contract: str
) -> None:
    root = tmp_path / "tree"
    shutil.copytree(pristine, root)
    (root / module).write_text(f'"""Planted by the test."""\n\n{plant}')
    result = _lint(root)
    assert result.returncode != 0, result.stdout
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line]
    assert broken, result.stdout
    # import-linter wraps long contract names over lines: look for the name in the report.
    assert contract in " ".join(result.stdout.split()), result.stdout
