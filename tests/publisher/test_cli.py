"""``rshub publish``, ``rshub wikipedia`` and ``rshub bridge`` as a user runs them."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from publisher.editfeed import read_recording, sample_path
from publisher.wikipedia import changes_from_event
from rshub.cli import main
from tests.conftest import Hub
from tests.support import free_port, notification

from .helpers import StaticSource, serve, stored_events
from .test_bridge import changelist, v10


async def rshub(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_publish_one_change_from_flags(hub: Hub, redis_url: str, capsys: Any) -> None:
    code = await rshub(
        "publish",
        "--hub",
        hub.url,
        "--topic",
        "t",
        "--loc",
        "http://example.org/a",
        "--change",
        "created",
        "--lastmod",
        "2026-01-01T10:00:00Z",
        "--length",
        "12",
        "--type",
        "text/plain",
        "--link",
        "describedby",
        "http://example.org/a.meta",
    )
    assert code == 0
    [stored] = await stored_events(redis_url, "t")
    assert capsys.readouterr().out.split() == [stored["id"]]
    assert stored["change"] == "created" and stored["length"] == 12
    assert stored["links"] == [{"rel": "describedby", "href": "http://example.org/a.meta"}]


async def test_publish_a_file_from_stdin(
    hub: Hub, redis_url: str, capsys: Any, monkeypatch: Any
) -> None:
    body = notification([{"loc": f"http://example.org/{i}"} for i in range(3)])
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(body)))
    assert await rshub("publish", "--hub", hub.url, "--topic", "t", "-") == 0
    ids = [e["id"] for e in await stored_events(redis_url, "t")]
    assert capsys.readouterr().out.split() == ids and len(ids) == 3


@pytest.mark.parametrize("hub_settings", [{"tokens": ["s3cret"]}])
async def test_publish_failures_exit_non_zero_with_a_message(
    hub: Hub, capsys: Any, tmp_path: Path
) -> None:
    flags = ["--topic", "t", "--loc", "http://example.org/a"]
    assert await rshub("publish", "--hub", hub.url, "--token", "nope", *flags) == 1
    assert "HTTP 403" in capsys.readouterr().err
    dead = f"http://127.0.0.1:{free_port()}"
    assert await rshub("publish", "--hub", dead, "--retry-for", "0.2", *flags) == 1
    assert "gave up" in capsys.readouterr().err
    bad = tmp_path / "bad.xml"
    bad.write_bytes(b"<urlset>")
    assert await rshub("publish", "--hub", hub.url, "--topic", "t", str(bad)) == 2
    assert "not well-formed" in capsys.readouterr().err
    assert await rshub("publish", "--hub", hub.url, "--topic", "t") == 2
    assert "nothing to publish" in capsys.readouterr().err
    assert await rshub("publish", "--hub", hub.url, *flags, "--lastmod", "yesterday") == 2


async def test_wikipedia_replay_and_resume(hub: Hub, redis_url: str, tmp_path: Path) -> None:
    state = str(tmp_path / "wiki.json")
    args = [
        "wikipedia",
        "--hub",
        hub.url,
        "--topic",
        "wiki",
        "--replay",
        "sample",
        "--state",
        state,
        "--log-level",
        "WARNING",
    ]
    assert await rshub(*args, "--limit", "250") == 0
    assert await rshub(*args, "--limit", "250", "--wiki", "enwiki") == 0
    events = list(read_recording(sample_path()))[:500]
    expected = [e.loc for ev in events[:250] for e in changes_from_event(ev.data)]
    expected += [
        e.loc
        for ev in events[250:]
        if ev.data["wiki"] == "enwiki"
        for e in changes_from_event(ev.data)
    ]
    assert [e["loc"] for e in await stored_events(redis_url, "wiki")] == expected


async def test_bridge_once(hub: Hub, redis_url: str, tmp_path: Path) -> None:
    source = StaticSource()
    async with serve(source.app) as base:
        source.docs["/cl.xml"] = changelist([v10("a", "created", 1), v10("b", "created", 2)], 0)
        args = [
            "bridge",
            "--hub",
            hub.url,
            "--topic",
            "src",
            "--source",
            base + "/cl.xml",
            "--state",
            str(tmp_path / "bridge.json"),
            "--once",
            "--log-level",
            "WARNING",
        ]
        assert await rshub(*args) == 0
        assert await rshub(*args) == 0  # nothing new the second time
    assert len(await stored_events(redis_url, "src")) == 2


async def test_bridge_refuses_a_source_that_is_not_resourcesync(
    hub: Hub, tmp_path: Path, capsys: Any
) -> None:
    source = StaticSource()
    async with serve(source.app) as base:
        source.docs["/page.html"] = b"<!DOCTYPE html><html><body>Hello</body></html>"
        common = ["--hub", hub.url, "--topic", "src", "--state", str(tmp_path / "b.json")]
        once = ["bridge", *common, "--source", base + "/page.html", "--once"]
        assert await rshub(*once) == 1
        assert "not a ResourceSync document" in capsys.readouterr().err
        # Not --once either: polling again cannot make a web page a Source.
        forever = ["bridge", *common, "--source", base + "/page.html", "--interval", "0.1"]
        assert await asyncio.wait_for(rshub(*forever), 10) == 1
        # A Source that is merely down is polled again, but --once reports it.
        dead = ["bridge", *common, "--source", f"http://127.0.0.1:{free_port()}/cl", "--once"]
        assert await rshub(*dead) == 1
