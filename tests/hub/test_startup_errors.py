"""``rshub serve`` with bad settings: exit 2 and one stderr line naming the setting."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from hub.core.settings import Settings
from tests.support import HubProcess, free_port


def serve(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None, wrapper: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """``rshub serve`` run to its end; ``wrapper`` the command it runs under (setpriv)."""
    return subprocess.run(
        [
            *wrapper,
            sys.executable,
            "-m",
            "rshub",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--port",
            str(free_port()),
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "env,argv,names",
    [
        ({"RSHUB_TOKENS": "abc"}, [], "RSHUB_TOKENS"),
        ({"RSHUB_TOPIC_TOKENS": "{bad"}, [], "RSHUB_TOPIC_TOKENS"),
        ({"RSHUB_APPENDFSYNC": "sometimes"}, [], "RSHUB_APPENDFSYNC"),
        ({"RSHUB_MAX_CONNECTIONS": "0"}, [], "RSHUB_MAX_CONNECTIONS"),
        ({}, ["--redis-url", "notaurl"], "RSHUB_REDIS_URL"),
        ({}, ["--redis-url", "redis://[::1"], "RSHUB_REDIS_URL"),
        ({}, ["--redis-url", "redis://127.0.0.1:99999"], "RSHUB_REDIS_URL"),
        # Each of these was taken, then broke the hub (tests/hub/test_settings_fuzz.py).
        ({"RSHUB_GC_YOUNG_THRESHOLD": str(10**30)}, [], "RSHUB_GC_YOUNG_THRESHOLD"),
        ({"RSHUB_WORKERS": str(10**30)}, [], "RSHUB_WORKERS"),
        ({"RSHUB_TOPIC_RETENTION_MAX_EVENTS": '{"t": -1}'}, [], "RSHUB_TOPIC_RETENTION_MAX_EVENTS"),
        ({"RSHUB_ADMIN_TOKEN": ""}, [], "RSHUB_ADMIN_TOKEN"),
        ({"RSHUB_CALLBACK_CA_FILE": "ca\n.pem"}, [], "RSHUB_CALLBACK_CA_FILE"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(
    tmp_path: Path, env: dict[str, str], argv: list[str], names: str
) -> None:
    done = serve(tmp_path, *argv, env=env)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rshub serve: bad setting: ") and names in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


def test_an_unreachable_redis_is_one_line_naming_it(tmp_path: Path) -> None:
    """Nothing listens there. (The hub waits for an external Redis for
    RSHUB_REDIS_STARTUP_SECONDS, 60 s by default, so that containers may start in any order;
    0 makes it try once.)"""
    done = serve(
        tmp_path,
        "--redis-url",
        "redis://127.0.0.1:1",
        env={"RSHUB_REDIS_STARTUP_SECONDS": "0"},
    )
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "RSHUB_REDIS_URL" in lines[0] and "did not answer" in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


def test_listening_is_logged_only_once_listening(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(tmp_path, "--port", str(port))
    assert done.returncode == 1 and "cannot listen" in done.stderr
    assert "listening on" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr + done.stdout

    (tmp_path / "ok").mkdir()
    hub = HubProcess(str(tmp_path / "ok")).start()
    try:
        assert f"listening on http://127.0.0.1:{hub.port}" in hub.log()
    finally:
        hub.stop()


# -- files a setting names: checked for what they must hold --------------------------------


@dataclass
class TlsFiles:
    """Real PEM files from ``trustme``: a CA, a client certificate with its key (apart and
    together), a key of another certificate, the same key encrypted, and an empty file."""

    root: Path

    def __post_init__(self) -> None:
        ca = trustme.CA()
        leaf = ca.issue_cert("hub.example")
        stranger = trustme.CA().issue_cert("other.example")
        ca.cert_pem.write_to_path(str(self.root / "ca.pem"))
        leaf.cert_chain_pems[0].write_to_path(str(self.root / "cert.pem"))
        leaf.private_key_pem.write_to_path(str(self.root / "key.pem"))
        leaf.private_key_and_cert_chain_pem.write_to_path(str(self.root / "both.pem"))
        stranger.private_key_pem.write_to_path(str(self.root / "other-key.pem"))
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
        encrypted = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
        (self.root / "encrypted-key.pem").write_bytes(encrypted)
        (self.root / "empty.pem").write_bytes(b"")

    def __getitem__(self, name: str) -> str:
        return str(self.root / name)


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    (tmp_path / "pem").mkdir()
    return TlsFiles(tmp_path / "pem")


#: (flags naming files in TlsFiles, the setting the line must name, what it must say).
#: Before these were checked, each passed the settings check and failed at start-up as
#: "cannot listen" (exit 1), or as a Redis that did not answer.
BAD_FILES = {
    "ca file without a certificate": (
        ["--callback-ca-file", "key.pem"],
        "RSHUB_CALLBACK_CA_FILE",
        "holds no PEM certificate",
    ),
    "empty ca file": (
        ["--callback-ca-file", "empty.pem"],
        "RSHUB_CALLBACK_CA_FILE",
        "holds no PEM certificate",
    ),
    "client cert without its key": (
        ["--callback-client-cert", "cert.pem"],
        "RSHUB_CALLBACK_CLIENT_CERT",
        "holds no PEM private key",
    ),
    "client cert that is a key": (
        ["--callback-client-cert", "key.pem", "--callback-client-key", "key.pem"],
        "RSHUB_CALLBACK_CLIENT_CERT",
        "holds no PEM certificate",
    ),
    "key not matching the cert": (
        ["--callback-client-cert", "cert.pem", "--callback-client-key", "other-key.pem"],
        "RSHUB_CALLBACK_CLIENT_KEY",
        "does not match the certificate",
    ),
    "key file without a key": (
        ["--callback-client-cert", "cert.pem", "--callback-client-key", "ca.pem"],
        "RSHUB_CALLBACK_CLIENT_KEY",
        "holds no PEM private key",
    ),
    "encrypted key (no prompt at start-up)": (
        ["--callback-client-cert", "cert.pem", "--callback-client-key", "encrypted-key.pem"],
        "RSHUB_CALLBACK_CLIENT_KEY",
        "is encrypted",
    ),
    "key without a cert": (
        ["--callback-client-key", "key.pem"],
        "RSHUB_CALLBACK_CLIENT_KEY",
        "without",
    ),
    "redis url's ca file without a certificate": (
        ["--redis-url", "rediss://127.0.0.1:1/0?ssl_ca_certs=key.pem"],
        "RSHUB_REDIS_URL",
        "ssl_ca_certs",
    ),
    "redis url's client key not matching": (
        ["--redis-url", "rediss://127.0.0.1:1/0?ssl_certfile=cert.pem&ssl_keyfile=other-key.pem"],
        "RSHUB_REDIS_URL",
        "does not match",
    ),
    "sentinel url's client cert without its key": (
        ["--redis-url", "rediss+sentinel://127.0.0.1:1/svc?ssl_certfile=cert.pem"],
        "RSHUB_REDIS_URL",
        "holds no PEM private key",
    ),
}


def _in(tls: TlsFiles, flags: list[str]) -> list[str]:
    """The flags with each file name under the fixture's directory."""
    names = ("ca.pem", "cert.pem", "key.pem", "other-key.pem", "encrypted-key.pem", "empty.pem")
    out = []
    for flag in flags:
        for name in names:
            flag = flag.replace(f"={name}", f"={tls[name]}")
        out.append(tls[flag] if flag in names else flag)
    return out


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_file_without_what_its_setting_needs_is_one_line_naming_it(
    tmp_path: Path, tls: TlsFiles, case: str
) -> None:
    flags, name, reason = BAD_FILES[case]
    # A Redis that does not answer is tried once, so the line before the fix came at once.
    done = serve(tmp_path, *_in(tls, flags), env={"RSHUB_REDIS_STARTUP_SECONDS": "0"})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rshub serve: bad setting: "), lines[0]
    assert name in lines[0] and reason in lines[0], lines[0]
    assert "Traceback" not in done.stderr + done.stdout


def test_the_same_files_rightly_paired_pass(tls: TlsFiles) -> None:
    """The checks refuse only what is wrong: a CA, and a certificate with its key apart or
    in one file, are taken (tests/hub/test_tls_callbacks.py uses such files end to end)."""
    ca, both = tls["ca.pem"], tls["both.pem"]
    for fields in (
        {"callback_ca_file": ca, "callback_client_cert": both},
        {"callback_client_cert": tls["cert.pem"], "callback_client_key": tls["key.pem"]},
        {"redis_url": f"rediss://h:1/0?ssl_ca_certs={ca}&ssl_certfile={both}"},
        {"redis_url": f"rediss+sentinel://h:1/svc?ssl_ca_certs={ca}&ssl_certfile={both}"},
    ):
        Settings.model_validate(fields)


def test_an_unreadable_file_is_one_line_naming_it(tls: TlsFiles, tmp_path: Path) -> None:
    """A file the hub's user may not read (mode 000). Root reads any file through its
    CAP_DAC_OVERRIDE, so as root the hub runs without that capability (setpriv)."""
    locked = Path(tls["ca.pem"])
    locked.chmod(0)
    without_override = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    wrapper = without_override if os.geteuid() == 0 else []
    done = serve(tmp_path / "data", "--callback-ca-file", str(locked), wrapper=wrapper)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rshub serve: bad setting: "), lines[0]
    assert "RSHUB_CALLBACK_CA_FILE" in lines[0] and "cannot be read (Permission denied)" in lines[0]
    assert not (tmp_path / "data").exists()  # refused before anything started
