"""``rshub serve``: run the hub, on an embedded Redis unless ``--redis-url`` is given."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from hub.core import collector, log_format
from hub.core.auth import PublisherAuth
from hub.core.exceptions import HubError
from hub.core.settings import Settings, describe_error
from hub.live import client_trust
from hub.serve.workers import WorkerPool, worker_count
from hub.store.embedded_redis import EmbeddedRedis
from hub.store.redis_connection import StoreError, _redacted

log = logging.getLogger("rshub")


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the hub",
        description="Run the hub. Every flag also comes from RSHUB_<FLAG> (e.g. RSHUB_PORT), "
        "but the repeatable --token and --alias-url come from RSHUB_TOKENS and "
        "RSHUB_ALIAS_URLS, JSON lists (RSHUB_TOKENS='[\"s3cret\"]').",
    )
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="bind port (default 8080)")
    parser.add_argument("--redis-url", help="use this Redis instead of an embedded one")
    parser.add_argument("--data-dir", help="embedded Redis data directory (default ./rshub-data)")
    parser.add_argument("--base-url", help="public base URL when behind a proxy")
    parser.add_argument(
        "--token",
        action="append",
        dest="tokens",
        help="bearer token allowed to publish to any topic (repeatable; RSHUB_TOKENS)",
    )
    parser.add_argument(
        "--open",
        action="store_true",
        default=None,
        help="allow a non-loopback bind with no publisher tokens",
    )
    parser.add_argument("--admin-token", help="bearer token of the /admin API")
    parser.add_argument(
        "--alias-url",
        action="append",
        dest="alias_urls",
        help="another base URL clients reach this hub by (repeatable)",
    )
    parser.add_argument(
        "--alias-links",
        action="store_true",
        default=None,
        help="documents fetched under an alias link under it (compose from the host)",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        help="peers (IPs, networks, *; comma-separated) whose X-Forwarded-*/Forwarded "
        "headers are believed",
    )
    parser.add_argument(
        "--workers",
        help="hub processes on this port, one Redis (a number or auto; default 1)",
    )
    parser.add_argument("--log-level", help="DEBUG, INFO (default), WARNING, ERROR or CRITICAL")
    parser.add_argument("--log-format", choices=["text", "json"], help="text (default) or json")
    parser.add_argument(
        "--access-log", action="store_true", default=None, help="log one line per request"
    )
    parser.add_argument(
        "--allow-private-callbacks",
        action="store_true",
        default=None,
        help="let the hub call loopback/private addresses (development on one machine only)",
    )
    parser.add_argument(
        "--callback-ca-file", help="PEM CA bundle trusted for https callbacks (with the system's)"
    )
    parser.add_argument(
        "--callback-client-cert", help="PEM client certificate for https callbacks (mTLS)"
    )
    parser.add_argument(
        "--callback-client-key", help="PEM key of --callback-client-cert (if not in that file)"
    )
    parser.add_argument(
        "--no-uvloop",
        dest="uvloop",
        action="store_false",
        default=None,
        help="run on the standard asyncio event loop instead of uvloop",
    )
    parser.set_defaults(run=run_serve)


_SETTINGS_FLAGS = (
    "host",
    "port",
    "redis_url",
    "data_dir",
    "base_url",
    "tokens",
    "open",
    "workers",
    "admin_token",
    "alias_urls",
    "alias_links",
    "forwarded_allow_ips",
    "log_level",
    "log_format",
    "access_log",
    "allow_private_callbacks",
    "uvloop",
    "callback_ca_file",
    "callback_client_cert",
    "callback_client_key",
)


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {
        name: getattr(args, name)
        for name in _SETTINGS_FLAGS
        if getattr(args, name, None) is not None
    }
    return Settings(**overrides)


def _worker_launch(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The flags given to ``rshub serve`` that each worker process needs too, and the
    secrets among them as ``RSHUB_*`` variables: any local user can read a command line
    (``/proc/PID/cmdline``), only the owner an environment."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for name in (
        "host",
        "port",
        "data_dir",
        "base_url",
        "log_level",
        "log_format",
        "forwarded_allow_ips",
        "callback_ca_file",
        "callback_client_cert",
        "callback_client_key",
    ):
        value = getattr(args, name, None)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    if getattr(args, "admin_token", None) is not None:
        env["RSHUB_ADMIN_TOKEN"] = args.admin_token
    if getattr(args, "tokens", None):
        env["RSHUB_TOKENS"] = json.dumps(args.tokens)
    for alias in getattr(args, "alias_urls", None) or []:
        argv += ["--alias-url", alias]
    if getattr(args, "open", None):
        argv.append("--open")
    if getattr(args, "access_log", None):
        argv.append("--access-log")
    if getattr(args, "allow_private_callbacks", None):
        argv.append("--allow-private-callbacks")
    if getattr(args, "uvloop", None) is False:
        argv.append("--no-uvloop")
    return argv, env


def _check_port_free(host: str, port: int, *, shared: bool) -> None:
    """Raise the ``OSError`` the hub's listen would meet, before anything starts: a port in
    use was said after the embedded Redis had been started and stopped (its log lines came
    first). A bind with the options of the hub's own; the socket is closed at once, so a
    port taken in between is still reported by the listen itself."""
    if not port:  # any free port: nothing to check
        return
    for family, kind, proto, _name, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if shared:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)


def run_serve(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        PublisherAuth.check_startup(settings)
    except (ValidationError, SettingsError) as exc:
        print(f"rshub serve: bad setting: {describe_error(exc)}", file=sys.stderr)
        return 2
    except HubError as exc:
        print(f"rshub serve: {exc}", file=sys.stderr)
        return 2
    log_format.configure(settings.log_level, settings.log_format)

    embedded: EmbeddedRedis | None = None
    redis_url = settings.redis_url
    try:
        shared = settings.reuse_port or worker_count(settings.workers) > 1
        _check_port_free(settings.host, settings.port, shared=shared)
        if redis_url is None:
            embedded = EmbeddedRedis(settings.data_dir / "redis", appendfsync=settings.appendfsync)
            redis_url = embedded.start()
            log.info(
                "embedded redis-server pid %s at %s, data in %s",
                embedded.pid,
                embedded.address,
                embedded.data_dir,
            )
        workers = worker_count(settings.workers)
        if workers > 1:
            collector.tune(settings.gc_young_threshold)  # imports done: the GC back on
            log.info("rshub hub at %s, %d workers", settings.public_url, workers)
            argv, secrets = _worker_launch(args)
            pool = WorkerPool(workers, argv, redis_url, embedded, secrets=secrets)
            return asyncio.run(pool.run())
        # Imported late (`rshub --help` and a pool's parent need no app), aiohttp's client
        # contexts without their trust until the hub serves (hub.live.client_trust).
        with client_trust.deferred():
            from hub.web import app as web_app
        collector.tune(settings.gc_young_threshold)  # imports done: the GC back on (rshub.cli)
        web_app.run(settings, redis_url, embedded, use_uvloop=settings.uvloop)
    except HubError as exc:
        print(f"rshub serve: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(
            f"rshub serve: bad setting: redis_url (RSHUB_REDIS_URL): cannot use Redis at "
            f"{_redacted(redis_url or '')}: {' '.join(str(exc).split())}",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        print(
            f"rshub serve: cannot listen on {settings.host}:{settings.port}: {exc}", file=sys.stderr
        )
        return 1
    finally:
        if embedded is not None:
            embedded.stop()
    return 0
