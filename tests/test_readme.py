"""The README's newcomer path, run as written: every ```sh command of "Four journeys" (and
the healthz curl of "Two commands") is its own ``bash -c`` process, as a user types it.

What differs from a user's machine, and why: the hub is ``rshub serve --port P --data-dir
TMP`` on a free port (``HubProcess``), not the README's install-and-serve line on 8080, so
the test neither installs nor collides; client commands find it through ``RSHUB_HUB`` and
curl commands get ``http://127.0.0.1:8080`` rewritten to its URL (the only rewrite);
``HOME`` is a temp dir, so ``~/...`` lands there; the venv's ``bin`` is first on PATH.
Commands that run forever are started in the background and stopped with SIGINT once
they printed what the README promises.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import TIME_SCALE, HubProcess

ROOT = Path(__file__).resolve().parent.parent
README_HUB = "http://127.0.0.1:8080"

#: Lines not run. This one names a placeholder Source (``source.example``): running it
#: could only try the network, which tests never reach.
SKIPPED = [
    "rshub sync --source http://source.example/.well-known/resourcesync "
    "--dest ~/rshub-mirror --via poll",
]


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def commands(block: str) -> list[str]:
    """The commands of one sh block: one per line, a heredoc kept with its command."""
    out: list[str] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        heredoc = re.search(r"<<-?'?(\w+)'?", line)
        if heredoc:
            body = [line]
            while i < len(lines):
                body.append(lines[i])
                i += 1
                if lines[i - 1].strip() == heredoc.group(1):
                    break
            out.append("\n".join(body))
        else:
            out.append(line)
    return out


def journeys() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", section(text, "Four journeys"), re.S)
    return [c for b in blocks for c in commands(b)]


def runs_forever(command: str) -> bool:
    code = command.split("#", 1)[0].strip()
    return (
        code.startswith("rshub subscribe")
        or code.startswith("curl -N")
        or code.startswith("rshub source")
        or code.endswith("&")
        or (code.startswith("rshub sync") and "--once" not in code)
    )


#: What the test suite itself writes into the checkout (hypothesis's database, the dashboard
#: test's screenshot): another pytest-xdist worker may write there while the journeys run.
#: No README command runs hypothesis or takes a screenshot, so nothing they leave hides here.
SUITE_OUTPUT = (".hypothesis", "tests/artifacts")


def git_status() -> set[str]:
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    dirs = set()  # git lists no empty directory (a sync into ./mirror that fetched nothing)
    for d, subdirs, _ in os.walk(ROOT):
        subdirs[:] = [s for s in subdirs if s not in (".git", ".venv", "__pycache__")]
        dirs.add(f"dir {Path(d).relative_to(ROOT)}")
    status = {line for line in out.splitlines() if "__pycache__" not in line} | dirs
    return {
        line
        for line in status
        if not any(f" {top}/" in line or line.endswith(f" {top}") for top in SUITE_OUTPUT)
    }


class Shell:
    """Runs README lines as a user would: ``bash -c``, cwd the checkout."""

    def __init__(self, hub: HubProcess, home: Path, logs: Path) -> None:
        self.hub = hub
        self.logs = logs
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(home),
            "RSHUB_HUB": hub.url,
        }
        self.background: list[tuple[str, subprocess.Popen[bytes], Path, Path]] = []

    def line(self, command: str) -> str:
        return command.replace(README_HUB, self.hub.url)

    def run(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", "-c", self.line(command)],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout * TIME_SCALE,
        )
        assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr}"
        return done

    def start(self, command: str) -> tuple[Path, Path]:
        """In the background; a trailing ``&`` is ours to do (bash -c would orphan it)."""
        n = len(self.background)
        out, err = self.logs / f"bg{n}.out", self.logs / f"bg{n}.err"
        code = self.line(command).rstrip()
        code = code[:-1] if code.endswith("&") else code
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(
                ["bash", "-c", code],
                cwd=ROOT,
                env=self.env,
                stdout=o,
                stderr=e,
                start_new_session=True,
            )
        self.background.append((command, proc, out, err))
        return out, err

    def stop_all(self) -> None:
        for _, proc, _, _ in self.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        for _, proc, _, _ in self.background:
            try:
                proc.wait(10 * TIME_SCALE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def until(what: str, condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout * TIME_SCALE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout * TIME_SCALE:.0f}s: {what}")
        time.sleep(0.05)


def json_lines(path: Path) -> list[dict[str, object]]:
    lines = path.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_readme_commands_are_extracted() -> None:
    """The parser sees every journey command: an edit that drops one fails here."""
    cmds = journeys()
    assert [c for c in cmds if "source.example" in c] == SKIPPED
    assert sum(runs_forever(c) for c in cmds if c not in SKIPPED) == 6, cmds
    assert any("<<'XML'" in c and c.rstrip().endswith("XML") for c in cmds), cmds


@pytest.mark.timeout(90 * TIME_SCALE)
def test_readme_journeys_as_written() -> None:
    before = git_status()
    with tempfile.TemporaryDirectory(prefix="rshub-readme-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        (root / "hub").mkdir()
        hub = HubProcess(str(root / "hub")).start()
        shell = Shell(hub, root / "home", root)
        failure: AssertionError | None = None
        try:
            _journeys(shell, root / "home")
        except AssertionError as exc:
            failure = exc  # still check the checkout: leftovers are the commonest harm
        finally:
            shell.stop_all()
            hub.stop()
    new = sorted(git_status() - before)
    assert not new, f"the README's commands left files in the checkout: {new} ({failure})"
    if failure:
        raise failure


def _journeys(shell: Shell, home: Path) -> None:
    cmds = journeys()
    skipped = [c for c in cmds if c in SKIPPED]
    assert skipped == SKIPPED
    cmds = [c for c in cmds if c not in SKIPPED]
    seen: list[str] = []

    def take(prefix: str) -> str:
        command = next(c for c in cmds if c.startswith(prefix) and c not in seen)
        seen.append(command)
        return command

    # Two commands: the healthz curl of the prose.
    text = (ROOT / "README.md").read_text()
    healthz = re.search(r"`(curl -s \S+/healthz)`", section(text, "Two commands"))
    assert healthz, "README: the healthz curl of 'Two commands'"
    health = json.loads(shell.run(healthz.group(1)).stdout)
    assert health["status"] == "ok", health

    # Journey 1: subscribe, then publish; the subscriber prints the change as a JSON line.
    sub_out, sub_err = shell.start(take("rshub subscribe --topic demo"))
    until("demo subscriber connected", lambda: "waiting for its first" in sub_err.read_text())
    shell.run(take("rshub publish --topic demo"))
    until(
        "subscriber prints http://example.com/res1",
        lambda: any(e.get("loc") == "http://example.com/res1" for e in json_lines(sub_out)),
    )

    # ... or with curl: publish answers JSON with accepted 1; SSE replays it from 0.
    answer = json.loads(shell.run(take("curl -s -X POST")).stdout)
    assert answer["accepted"] == 1 and answer["topic"] == "demo", answer
    sse_out, _ = shell.start(take("curl -N"))
    until(
        "SSE event with loc http://example.com/res1",
        lambda: any(
            line.startswith("data:") and "http://example.com/res1" in line
            for line in sse_out.read_text().splitlines()
        ),
    )

    # Journey 2: the wiki subscriber (&), then the offline replay.
    wiki_out, wiki_err = shell.start(take("rshub subscribe --topic wiki"))
    until("wiki subscriber connected", lambda: "waiting for its first" in wiki_err.read_text())
    replay = shell.run(take("rshub wikipedia --replay sample"), timeout=40)
    published = re.search(r"published (\d+) changes", replay.stderr)
    assert published and int(published.group(1)) > 1500, replay.stderr
    count = int(published.group(1))
    assert (home / ".rshub-wikipedia.state.json").is_file()
    until(f"wiki subscriber prints {count} changes", lambda: len(json_lines(wiki_out)) >= count)
    assert all(str(e["loc"]).startswith("https://") for e in json_lines(wiki_out))

    # Journey 3: sync takes its baseline from the hub's Resource List, then fetches each
    # resource from its Source: wikipedia URLs, unreachable offline (and never reached:
    # tests have no network). So: the mirror directory is made under ~, each failed fetch
    # is said once, and SIGINT ends it with a summary.
    _, sync_err = shell.start(take("rshub sync --topic wiki"))

    def failures() -> list[str]:
        return re.findall(r"^rshub sync: failed (\S+):", sync_err.read_text(), re.M)

    until("sync reports failed fetches", lambda: len(failures()) >= 3)
    assert (home / "rshub-mirror").is_dir()
    _, proc, _, _ = shell.background[-1]
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(15 * TIME_SCALE)
    err = sync_err.read_text()
    assert "Traceback" not in err, err
    assert re.search(r"summary: fetched 0, .* failed \d+", err), err
    said = failures()
    assert len(said) == len(set(said)), "a failed fetch said more than once"
    wiki_locs = {str(e["loc"]) for e in json_lines(wiki_out)}
    assert set(said) <= wiki_locs

    # Journey 4: a directory made a Source (on its default port, 8090), pushing to the
    # hub; rshub sync mirrors it through the hub, fetching the file from the Source.
    shell.run(take("mkdir -p ~/shared"))
    _, source_err = shell.start(take("rshub source ~/shared"))
    until(
        "the Source serves", lambda: "rshub source: serving 1 resources" in source_err.read_text()
    )
    shell.start(take("rshub sync --topic files"))
    mirrored = home / "files-mirror" / "http" / "127.0.0.1_8090" / "files" / "hello.txt"
    until(
        "the mirror holds hello.txt",
        lambda: mirrored.is_file() and mirrored.read_text() == "hello\n",
    )
    (home / "shared" / "hello.txt").write_text("changed\n")
    until("the change reaches the mirror", lambda: mirrored.read_text() == "changed\n")

    assert sorted(seen) == sorted(cmds), "a README command was not run"
