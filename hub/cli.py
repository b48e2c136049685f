"""``rshub serve``: run the hub, on an embedded Redis unless ``--redis-url`` is given."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from .auth import PublisherAuth
from .connection import StoreError
from .embedded_redis import EmbeddedRedis
from .exceptions import HubError
from .settings import Settings, describe_error

log = logging.getLogger("rshub")


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the hub",
        description="Run the hub. Every flag also comes from RSHUB_<FLAG> (e.g. RSHUB_PORT).",
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
        help="bearer token allowed to publish to any topic (repeatable)",
    )
    parser.add_argument(
        "--open",
        action="store_true",
        default=None,
        help="allow a non-loopback bind with no publisher tokens",
    )
    parser.add_argument(
        "--allow-private-callbacks",
        action="store_true",
        default=None,
        help="let the hub call loopback/private addresses (development on one machine only)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.set_defaults(run=run_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {
        name: getattr(args, name)
        for name in (
            "host",
            "port",
            "redis_url",
            "data_dir",
            "base_url",
            "tokens",
            "open",
            "allow_private_callbacks",
        )
        if getattr(args, name, None) is not None
    }
    return Settings(**overrides)


def tune_gc(young_threshold: int) -> None:
    """Freeze what start-up allocated (long-lived anyway) and collect young objects less
    often. Process-wide, so it belongs to the ``serve`` entry point, not to the app."""
    if young_threshold:
        gc.collect()
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)


def run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = settings_from_args(args)
        PublisherAuth.check_startup(settings)
    except (ValidationError, SettingsError) as exc:
        print(f"rshub serve: bad setting: {describe_error(exc)}", file=sys.stderr)
        return 2
    except HubError as exc:
        print(f"rshub serve: {exc}", file=sys.stderr)
        return 2

    from . import web_app  # imported late: keeps `rshub --help` fast

    embedded: EmbeddedRedis | None = None
    redis_url = settings.redis_url
    try:
        if redis_url is None:
            embedded = EmbeddedRedis(settings.data_dir / "redis", appendfsync=settings.appendfsync)
            redis_url = embedded.start()
            log.info(
                "embedded redis-server pid %s at %s, data in %s",
                embedded.pid,
                redis_url,
                embedded.data_dir,
            )
        tune_gc(settings.gc_young_threshold)
        web_app.run(settings, redis_url)
    except HubError as exc:
        print(f"rshub serve: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(
            f"rshub serve: bad setting: redis_url (RSHUB_REDIS_URL): cannot use Redis at "
            f"{redis_url}: {' '.join(str(exc).split())}",
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
