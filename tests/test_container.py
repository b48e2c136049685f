"""The container set-up, run as processes: no image registry is reachable here.

``docker/compose.yaml``'s hub, publisher and subscriber services are run with their own
commands and environment, on loopback. What is substituted, and nothing else:

* the ``rshub`` executable -> ``python -m rshub`` of this interpreter;
* the Redis host: ``redis://redis:6379/0`` -> the test session's redis-server;
* the hostname ``hub`` -> 127.0.0.1: ``http://hub:8080`` -> ``http://127.0.0.1:<port>``,
  and the hub's bind ``RSHUB_HOST=0.0.0.0`` / ``RSHUB_PORT=8080`` -> ``127.0.0.1`` / that
  port (tests never listen beyond loopback);
* the hostname ``subscriber`` -> 127.0.0.1: its ``--listen 0.0.0.0:9000`` and
  ``--callback-url http://subscriber:9000`` -> a free port on 127.0.0.1.

So the hub runs with the compose file's base URL scheme, token, private-callback setting,
JSON logs and access log, and a WebSub subscriber gets the publisher's changes through the
in-network base URL. The Dockerfile's HEALTHCHECK command is run against that hub too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import TIME_SCALE, free_port

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _services() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text())["services"])


def _substitute(text: str, mapping: dict[str, str]) -> str:
    for old, new in mapping.items():
        text = text.replace(old, new)
    return text


def _argv(command: list[str], mapping: dict[str, str]) -> list[str]:
    assert command[0] == "rshub", command
    return [sys.executable, "-m", "rshub", *(_substitute(a, mapping) for a in command[1:])]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20 * TIME_SCALE
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"hub not healthy: {log.read_text()}")


def test_compose_file_policies() -> None:
    services = _services()
    for name, service in services.items():
        image = service.get("image", "")
        assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", image), f"{name}: unpinned image {image!r}"
        assert service.get("restart") in ("unless-stopped", "on-failure"), name
    assert services["hub"]["depends_on"]["redis"]["condition"] == "service_healthy"
    for client in ("publisher", "subscriber"):
        assert services[client]["depends_on"]["hub"]["condition"] == "service_healthy"
    assert "healthcheck" in services["redis"] and "healthcheck" in services["hub"]
    env = services["hub"]["environment"]
    assert env["RSHUB_BASE_URL"] == "http://hub:8080"
    assert env["RSHUB_ALLOW_PRIVATE_CALLBACKS"] == "true"
    dockerfile = DOCKERFILE.read_text()
    [base] = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", base), base
    users = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert users and users[-1] not in ("root", "0")
    assert "HEALTHCHECK" in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".git" in ignored and ".venv" in ignored


@pytest.mark.timeout(90)
def test_compose_services_as_processes(redis_url: str, tmp_path: Path) -> None:
    services = _services()
    hub_port, sub_port = free_port(), free_port()
    mapping = {
        "redis://redis:6379/0": redis_url,
        "http://hub:8080": f"http://127.0.0.1:{hub_port}",
        "0.0.0.0:9000": f"127.0.0.1:{sub_port}",
        "http://subscriber:9000": f"http://127.0.0.1:{sub_port}",
    }
    hub_env = {k: _substitute(str(v), mapping) for k, v in services["hub"]["environment"].items()}
    hub_env.update(RSHUB_HOST="127.0.0.1", RSHUB_PORT=str(hub_port))
    hub_url = hub_env["RSHUB_BASE_URL"]
    [token] = json.loads(hub_env["RSHUB_TOKENS"])
    assert hub_url == f"http://127.0.0.1:{hub_port}"

    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"{name}.log", "wb")
        proc = subprocess.Popen(
            argv,
            cwd=tmp_path,
            env={**os.environ, **env},
            stdout=subprocess.PIPE if name == "subscriber" else log,
            stderr=log,
        )
        log.close()
        procs.append(proc)
        return proc

    try:
        hub = start("hub", _argv(services["hub"]["command"], mapping), hub_env)
        _wait_healthy(hub_url, hub, tmp_path / "hub.log")

        # The image's own HEALTHCHECK command, against this hub.
        healthcheck = re.search(
            r"HEALTHCHECK [^\n]*\\\n\s*CMD (\[.*\])$", DOCKERFILE.read_text(), re.M
        )
        assert healthcheck is not None
        check = json.loads(healthcheck.group(1))
        assert check[0] == "python"
        done = subprocess.run(
            [sys.executable, *check[1:]], env={**os.environ, "RSHUB_PORT": str(hub_port)}
        )
        assert done.returncode == 0

        sub_cmd = [*services["subscriber"]["command"], "--limit", "5"]
        subscriber = start("subscriber", _argv(sub_cmd, mapping), {})
        # The subscriber is subscribed once the hub lists its callback.
        deadline = time.monotonic() + 20 * TIME_SCALE
        listed: list[Any] = []
        while not listed and time.monotonic() < deadline:
            assert subscriber.poll() is None, (tmp_path / "subscriber.log").read_text()
            req = urllib.request.Request(
                hub_url + "/topics/wiki/subscriptions",
                headers={"Authorization": f"Bearer {token}"},
            )
            with urllib.request.urlopen(req, timeout=5) as resp:
                listed = json.loads(resp.read())["subscriptions"]
            time.sleep(0.1)
        assert listed and listed[0]["callback"].startswith(f"http://127.0.0.1:{sub_port}")
        assert listed[0]["topic_url"] == f"{hub_url}/topics/wiki"

        start("publisher", _argv(services["publisher"]["command"], mapping), {})
        out, _ = subscriber.communicate(timeout=40 * TIME_SCALE)
        assert subscriber.returncode == 0, (tmp_path / "subscriber.log").read_text()
        changes = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
        assert len(changes) == 5 and all(c["topic"] == "wiki" for c in changes)
        # They came by WebSub (not a polling fallback): the hub counts its deliveries.
        with urllib.request.urlopen(hub_url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        [delivered] = re.findall(r"^rshub_delivered_changes_total (\S+)$", text, re.M)
        assert float(delivered) >= 5
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
    hub_log = (tmp_path / "hub.log").read_text()
    records = [json.loads(line) for line in hub_log.splitlines() if line.strip()]
    assert any(r["logger"] == "rshub.access" for r in records)  # --access-log, JSON format
    assert shlex.join(services["hub"]["command"]).startswith("rshub serve")
