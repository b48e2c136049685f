"""The README's journeys as a user runs them: real ``rshub`` processes end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import TIME_SCALE, HubProcess


def rshub(*args: str) -> list[str]:
    return [sys.executable, "-m", "rshub", *args]


@pytest.mark.timeout(120)
def test_offline_wikipedia_journey(tmp_path: Path) -> None:
    """``rshub serve`` + ``rshub wikipedia --replay sample`` + ``rshub subscribe``: the
    subscriber prints every published edit as a ResourceSync change, in order."""
    hub = HubProcess(str(tmp_path)).start()
    try:
        published = subprocess.run(
            rshub(
                "wikipedia",
                "--hub",
                hub.url,
                "--topic",
                "wiki",
                "--replay",
                "sample",
                "--rate",
                "5000",
                "--state",
                str(tmp_path / "wiki.state"),
            ),
            capture_output=True,
            text=True,
            timeout=90 * TIME_SCALE,
        )
        assert published.returncode == 0, published.stderr
        summary = published.stderr.strip().splitlines()[-1]
        count = int(summary.split("published ")[1].split()[0])
        assert count > 1500, summary

        printed = subprocess.run(
            rshub(
                "subscribe",
                "--hub",
                hub.url,
                "--topic",
                "wiki",
                "--since",
                "0",
                "--limit",
                str(count),
            ),
            capture_output=True,
            text=True,
            timeout=60 * TIME_SCALE,
        )
        assert printed.returncode == 0, printed.stderr
        events = [json.loads(line) for line in printed.stdout.splitlines()]
        assert len(events) == count
        assert {e["change"] for e in events} == {"created", "updated", "deleted"}
        assert all(e["loc"].startswith("https://") for e in events)
        assert len({e["loc"].split("/")[2] for e in events}) >= 3  # several wikis
        ids = [e["id"] for e in events]
        assert len(set(ids)) == count
        assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
        assert any(link["rel"] == "latest-version" for e in events for link in e.get("links", []))
    finally:
        hub.stop()
