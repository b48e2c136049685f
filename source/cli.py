"""``rshub source DIR``: serve a directory as a ResourceSync Source, and push its changes.

Exit codes: 0 stopped, 1 the hub refused the changes (a bad token, say), 2 bad usage (not
a directory, a port taken, a state file of another Source), 130 interrupted (the state is
saved first).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from pathlib import Path
from typing import Any

from rsclient import interrupt
from rsclient.hub_token import HubToken, TokenMask
from rsclient.options import add_client_options, count, env_default, non_negative

from .exceptions import SourceError, UsageError

__all__ = ["add_parsers"]

log = logging.getLogger("source")

#: Seconds an interrupted Source gets to finish a push and save its state.
_GRACE = 2.0
DEFAULT_PORT = 8090


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port is 1 to 65535")
    return value


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "source",
        help="serve a directory as a ResourceSync Source, pushing its changes to a hub",
        description="Serve DIR as a ResourceSync Source (Source Description, Capability "
        "List, Resource List, Change Lists, the files) and watch it; with --topic, push "
        "every change to the hub. See docs/source.md.",
    )
    parser.add_argument("directory", metavar="DIR", help="the directory to serve")
    parser.add_argument(
        "--host",
        default=env_default("source_host", "127.0.0.1"),
        help="address to listen on (RSHUB_SOURCE_HOST, default %(default)s)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=env_default("source_port", str(DEFAULT_PORT)),
        help="port to listen on (RSHUB_SOURCE_PORT, default %(default)s)",
    )
    parser.add_argument(
        "--base-url",
        help="the Source's URL as Destinations reach it (default http://HOST:PORT); "
        "every loc is under it",
    )
    add_client_options(
        parser, topic_required=False, token_help="bearer token for publishing (RSHUB_TOKEN)"
    )
    parser.add_argument(
        "--state",
        help="state file: resources, change history, push position "
        "(default DIR/.rshub/source.json)",
    )
    parser.add_argument(
        "--resourcelist-entries",
        type=count,
        default=50_000,
        help="resources in one Resource List; more make an index (default %(default)s)",
    )
    parser.add_argument(
        "--changelist-entries",
        type=count,
        default=1000,
        help="changes in one Change List page (default %(default)s)",
    )
    parser.add_argument(
        "--dumps",
        action="store_true",
        help="serve a Resource Dump and Change Dumps (ZIP packages with manifests), and "
        "announce each Change Dump package to the hub",
    )
    parser.add_argument(
        "--dump-dir",
        help="where the dumps' packages are written (default DIR/.rshub/dumps)",
    )
    parser.add_argument(
        "--dump-package-bytes",
        type=count,
        default=64 * 1024 * 1024,
        help="bytes of bitstreams in one Resource Dump package (default %(default)s)",
    )
    parser.add_argument(
        "--resourcedump-seconds",
        type=non_negative,
        default=60.0,
        help="a Resource Dump is written again, once files changed, when it is older than "
        "this (default %(default)s)",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(run=run_source)


def run_source(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # watchfiles says every batch of events at INFO; the Source says what it recorded.
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    from publisher.exceptions import PublisherError

    pushing = bool(args.topic)
    token = HubToken.of(args.hub, args.token) if pushing else None
    mask = TokenMask(token) if token is not None else None
    if mask is not None:
        mask.install()

    def say(exc: BaseException) -> None:
        text = f"rshub source: {exc}"
        print(token.mask(text) if token else text, file=sys.stderr)

    try:
        interrupt.run(_serve(args), grace=_GRACE)
    except interrupt.Interrupted as exc:
        say(exc)
        return interrupt.EXIT_INTERRUPTED
    except SourceError as exc:
        say(exc)
        return 2
    except PublisherError as exc:
        say(exc)
        return 1
    finally:
        if mask is not None:
            mask.uninstall()
    return 0


async def _serve(args: argparse.Namespace) -> None:
    from aiohttp import web

    from publisher.client import Publisher

    from .app import create_app
    from .documents import Site
    from .dumps import Dumps
    from .pusher import Pusher
    from .runtime import SourceRuntime, resolved_directory

    root = resolved_directory(args.directory)
    host = args.host
    base = args.base_url or f"http://{'[' + host + ']' if ':' in host else host}:{args.port}"
    site = Site(
        base.rstrip("/"),
        hub=args.hub if args.topic else None,
        topic=args.topic or None,
        resourcelist_entries=args.resourcelist_entries,
        changelist_entries=args.changelist_entries,
    )
    # Inside the reserved .rshub directory: never a resource, nor its temporary files.
    state = Path(args.state or os.path.join(root, ".rshub", "source.json"))
    runtime = SourceRuntime(root, site, state)
    runner = web.AppRunner(create_app(runtime), access_log=None)
    await runner.setup()
    publisher = None
    try:
        try:
            await web.TCPSite(runner, host, args.port).start()
        except OSError as exc:
            why = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise UsageError(f"cannot listen on {host}:{args.port}: {why}") from None
        pusher = None
        if site.topic is not None and site.hub is not None:
            publisher = Publisher(
                site.hub, site.topic, token=args.token, up=site.capabilitylist_url
            )
            await publisher.start()
            pusher = Pusher(runtime.inventory, site, publisher, runtime.save)
        dumps = None
        if args.dumps:
            dumps = Dumps(
                root,
                site,
                runtime.inventory,
                args.dump_dir or os.path.join(root, ".rshub", "dumps"),
                max_bytes=args.dump_package_bytes,
                min_age=args.resourcedump_seconds,
                publisher=publisher,
            )
        await runtime.start(pusher, dumps)
        pushing = f"; pushing to {site.topic_url}" if site.topic_url else ""
        print(
            f"rshub source: serving {len(runtime.inventory.files)} resources of {root} at "
            f"{site.description_url}{pushing}",
            file=sys.stderr,
            flush=True,
        )
        raise await runtime.wait_failed()
    finally:
        await runtime.close()
        if publisher is not None:
            await publisher.close(timeout=0)
        await runner.cleanup()
