"""What a TLS file named by a setting must hold, checked when the settings are read.

A CA bundle without a certificate, or a client certificate whose key is missing or belongs
to another certificate, used to pass the settings check and fail later, when the callback
client's TLS context was built, as if the hub could not listen (exit 1). Checked here, the
same mistake is a bad setting: exit 2 and a line naming it. The checks load the files the
way the callback client does (``ssl.SSLContext.load_verify_locations`` and
``load_cert_chain``), so what passes here loads there.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Literal


class KeyPairError(ValueError):
    """A client certificate and key that do not load together; ``blame`` is the setting
    whose file is wrong (``cert`` when the key was expected in the certificate's file)."""

    def __init__(self, blame: Literal["cert", "key"], reason: str) -> None:
        super().__init__(reason)
        self.blame = blame
        self.reason = reason


class _Encrypted(Exception):
    """Raised instead of a passphrase: without a callback, OpenSSL would prompt for one on
    the terminal and start-up would hang."""


def _ask_passphrase() -> str:
    raise _Encrypted


def _shown(path: Path) -> str:
    return repr(str(path)[:200])


def check_readable(path: Path) -> None:
    """A regular file this process can open and read."""
    try:
        if not path.is_file():
            raise ValueError(f"{_shown(path)} is not a readable file")
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:  # no permission, a name too long, an I/O error
        raise ValueError(f"{_shown(path)} cannot be read ({exc.strerror})") from None


def check_certificates(path: Path) -> None:
    """A readable file holding at least one PEM certificate (a CA bundle, or a client
    certificate with its chain)."""
    check_readable(path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no default CAs: only this file's
    try:
        context.load_verify_locations(cafile=str(path))
    except ssl.SSLError:
        raise ValueError(f"{_shown(path)} holds no PEM certificate") from None
    if not context.cert_store_stats()["x509"]:  # a file of CRLs only
        raise ValueError(f"{_shown(path)} holds no PEM certificate")


def check_key_pair(cert: Path, key: Path | None) -> None:
    """The client certificate ``cert`` and its private key (in ``key``, or in ``cert``'s
    own file when ``key`` is None) load together and match."""
    holder: Literal["cert", "key"] = "cert" if key is None else "key"
    key_file = cert if key is None else key
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(str(cert), None if key is None else str(key), _ask_passphrase)
    except _Encrypted:
        raise KeyPairError(
            holder,
            f"the private key in {_shown(key_file)} is encrypted: the hub cannot be given "
            "its passphrase (keep the key unencrypted, readable by the hub's user only)",
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise KeyPairError(
                holder,
                f"the private key in {_shown(key_file)} does not match the certificate "
                f"in {_shown(cert)}",
            ) from None
        raise KeyPairError(holder, f"{_shown(key_file)} holds no PEM private key") from None


def check_url_options(options: Mapping[str, str]) -> None:
    """The TLS files a Redis URL names in its query (``ssl_ca_certs``, ``ssl_certfile``,
    ``ssl_keyfile``, as redis-py reads them): without this, a wrong one was retried as a
    Redis that does not answer, for the whole start-up wait."""
    ca, cert, key = (options.get(k) for k in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"))
    if key and not cert:
        raise ValueError("its ssl_keyfile is given without ssl_certfile")
    named = (("ssl_ca_certs", ca), ("ssl_certfile", cert))
    for option, path in named:
        if path:
            try:
                check_certificates(Path(path))
            except ValueError as exc:
                raise ValueError(f"its {option}: {exc}") from None
    if key:
        try:
            check_readable(Path(key))
        except ValueError as exc:
            raise ValueError(f"its ssl_keyfile: {exc}") from None
    if cert:
        try:
            check_key_pair(Path(cert), Path(key) if key else None)
        except KeyPairError as exc:
            option = "ssl_keyfile" if exc.blame == "key" else "ssl_certfile"
            raise ValueError(f"its {option}: {exc.reason}") from None
