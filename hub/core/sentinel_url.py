"""The ``redis+sentinel://`` URL that names a Redis behind Sentinel, read and checked.

Form: ``redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB]``
with optional ``?sentinel_username=U&sentinel_password=P``. The hosts are Sentinels (port
26379 when omitted), ``SERVICE`` is the master's name in their configuration, the user and
password are the Redis master's and replicas' (Sentinel hands out their address only);
Sentinels that ask for a password of their own take ``sentinel_password``.
``rediss+sentinel://`` reaches the master and replicas over TLS (the Sentinels themselves
in plain RESP), with ``ssl_ca_certs``, ``ssl_certfile`` and ``ssl_keyfile`` as in a
``rediss://`` URL. Pure: the settings check start-up with it, and
:mod:`hub.store.redis_connection` connects with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

SCHEME = "redis+sentinel"
#: The same, the master and replicas reached over TLS.
TLS_SCHEME = "rediss+sentinel"
DEFAULT_PORT = 26379
_QUERY = ("sentinel_username", "sentinel_password")
#: A ``rediss+sentinel://`` URL's TLS options, as redis-py names them.
_TLS_QUERY = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def is_sentinel(url: str) -> bool:
    """Whether ``url`` names a Redis behind Sentinel (either scheme)."""
    return url.startswith((f"{SCHEME}:", f"{TLS_SCHEME}:"))


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    #: The master and replicas over TLS (``rediss+sentinel://``), with these options.
    tls: bool = False
    tls_options: tuple[tuple[str, str], ...] = ()


def _address(text: str) -> tuple[str, int]:
    if text.startswith("["):  # [::1]:26379
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not host:
            raise ValueError(f"bad Sentinel address {text!r}")
        port_text = rest.removeprefix(":") if rest.startswith(":") else rest
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad Sentinel address {text!r}")
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise ValueError(f"a Sentinel address without a host ({text!r})")
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bad Sentinel port in {text!r} (1-65535)")
    return host, int(port_text)


def parse(url: str) -> SentinelUrl:
    """``url`` read, or ValueError saying what is wrong with it (in the form's terms)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
    if parts.scheme not in (SCHEME, TLS_SCHEME):
        raise ValueError(f"not a {SCHEME}:// or {TLS_SCHEME}:// URL")
    tls = parts.scheme == TLS_SCHEME
    userinfo, at, hosts = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
        if not colon:  # redis://secret@host is how redis-py reads a bare password
            username, password = None, unquote(user) or None
    if not hosts:
        raise ValueError("must name at least one Sentinel (redis+sentinel://HOST:PORT/SERVICE)")
    sentinels = tuple(_address(h) for h in hosts.split(","))
    segments = parts.path.strip("/").split("/") if parts.path.strip("/") else []
    if not segments:
        raise ValueError("must name the master's service (redis+sentinel://HOST:PORT/SERVICE)")
    if len(segments) > 2:
        raise ValueError("the path is /SERVICE or /SERVICE/DB")
    service = unquote(segments[0])
    if not service.isprintable() or " " in service:
        raise ValueError(f"bad service name {service!r}")
    db = 0
    if len(segments) == 2:
        if not segments[1].isdigit() or int(segments[1]) > 15_999:
            raise ValueError(f"the database must be a number, not {segments[1]!r}")
        db = int(segments[1])
    query = parse_qs(parts.query, keep_blank_values=True)
    known = _QUERY + _TLS_QUERY if tls else _QUERY
    unknown = sorted(set(query) - set(known))
    if unknown:
        hint = f" ({TLS_SCHEME}:// takes the ssl_ ones)" if unknown[0] in _TLS_QUERY else ""
        raise ValueError(f"unknown option {unknown[0]!r} (known: {', '.join(known)}){hint}")
    tls_options = tuple((k, query[k][-1]) for k in _TLS_QUERY if k in query and query[k][-1])
    if parts.fragment:
        raise ValueError("a fragment (#...) means nothing here")
    return SentinelUrl(
        sentinels=sentinels,
        service=service,
        db=db,
        username=username,
        password=password,
        sentinel_username=query.get("sentinel_username", [None])[-1] or None,
        sentinel_password=query.get("sentinel_password", [None])[-1] or None,
        tls=tls,
        tls_options=tls_options,
    )
