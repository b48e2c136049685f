"""``rshub subscribe`` and ``rshub sync``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from resourcesync import Entry, format_datetime
from rshub.options import add_client_options, env_default

from .exceptions import SubscriberError
from .follower import Follower, Mode
from .mirror import Mirror
from .poller import Poller
from .position import Position, PositionFile
from .progress import Progress

log = logging.getLogger("rshub.subscriber")

_VIA = ("ws", "sse", "webhook", "poll")


def _add_follow_options(parser: argparse.ArgumentParser) -> None:
    add_client_options(parser, topic_required=False)
    parser.add_argument(
        "--via",
        choices=_VIA,
        default=env_default("via", "ws"),
        help="push transport, or poll only (RSHUB_VIA, default %(default)s)",
    )
    parser.add_argument(
        "--source",
        default=env_default("source"),
        help="poll this ResourceSync Source (Source Description, Capability "
        "List or Change List URL) instead of the hub's documents",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=float(env_default("interval", "5") or 5),
        help="polling interval in seconds (default %(default)s)",
    )
    parser.add_argument(
        "--push-retry",
        type=float,
        default=10.0,
        help="while polling, retry push every N seconds (default %(default)s)",
    )
    parser.add_argument(
        "--overlap",
        type=float,
        default=30.0,
        help="seconds of Change List re-read after the last change, the clock "
        "skew tolerated between Source and subscriber (default %(default)s)",
    )
    parser.add_argument(
        "--no-fallback", action="store_true", help="never poll; only reconnect push"
    )
    parser.add_argument(
        "--callback-url",
        default=env_default("callback_url"),
        help="public URL of the WebSub callback (--via webhook)",
    )
    parser.add_argument(
        "--listen",
        default=env_default("listen", "127.0.0.1:0"),
        help="HOST:PORT for the WebSub callback server (default %(default)s)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log transport switches")


def add_parsers(subparsers: Any) -> None:
    text = "print a topic's changes as JSON lines"
    sub = subparsers.add_parser("subscribe", help=text, description=text)
    _add_follow_options(sub)
    sub.add_argument("--since", default=None, help="resume after this event id")
    sub.add_argument(
        "--state", default=None, help="keep the position in this file and resume from it"
    )
    sub.add_argument("--limit", type=int, default=None, help="exit after N changes")
    sub.set_defaults(run=run_subscribe)

    text = "keep a local directory mirrored from a topic (or a ResourceSync Source)"
    sync = subparsers.add_parser("sync", help=text, description=text)
    _add_follow_options(sync)
    sync.add_argument("--dest", required=True, help="mirror directory")
    sync.add_argument(
        "--audit",
        action="store_true",
        help="compare the mirror with the current Resource List and exit (1 on differences)",
    )
    sync.add_argument(
        "--once",
        action="store_true",
        help="baseline if needed, catch up by polling once, then exit",
    )
    sync.add_argument(
        "--concurrency", type=int, default=16, help="parallel fetches (default %(default)s)"
    )
    sync.add_argument(
        "--resourcelist-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="baseline synchronization only: every SECONDS re-read the whole Resource "
        "List and fetch what differs, instead of following changes",
    )
    progress = sync.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="always draw the baseline progress bar",
    )
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    sync.set_defaults(run=run_sync)


def _setup_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="rshub %(levelname)s %(message)s",
    )


def _check_target(args: argparse.Namespace) -> str | None:
    if args.source is None and args.topic is None:
        return "give --topic (and --hub), or --source"
    if args.topic is None:
        args.via = "poll"  # a plain Source: nothing to push
    if args.via != "poll" and args.topic is None:
        return "push needs --topic; use --via poll with --source alone"
    return None


def _follower(
    args: argparse.Namespace,
    session: aiohttp.ClientSession,
    position: Position,
    save: Callable[[Position], None] | None,
) -> Follower:
    host, _, port = args.listen.rpartition(":")

    def on_mode(mode: Mode, why: str) -> None:
        log.info("now %s (%s)", mode, why)

    return Follower(
        session,
        position,
        hub=args.hub,
        topic=args.topic,
        source=args.source,
        via=args.via,
        fallback=not args.no_fallback,
        token=args.token,
        poll_interval=args.interval,
        push_retry=args.push_retry,
        overlap=timedelta(seconds=args.overlap),
        save=save,
        callback_host=host or "127.0.0.1",
        callback_port=int(port or 0),
        callback_url=args.callback_url,
        on_mode=on_mode,
    )


def _run(main: Awaitable[int]) -> int:
    """Run ``main``; SIGTERM and SIGINT cancel it so that it can save and summarise."""

    async def runner() -> int:
        task = asyncio.ensure_future(main)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, task.cancel)
        try:
            return await task
        except asyncio.CancelledError:
            return 0

    return asyncio.run(runner())


def run_subscribe(args: argparse.Namespace) -> int:
    _setup_logging(args)
    problem = _check_target(args)
    if problem:
        print(f"rshub subscribe: {problem}", file=sys.stderr)
        return 2
    store = PositionFile(args.state) if args.state else None
    position = store.load() if store else Position()
    if args.since:
        position.event_id = args.since

    async def main() -> int:
        count = 0
        async with aiohttp.ClientSession() as session:
            follower = _follower(args, session, position, store.save if store else None)
            async with follower:
                async for event in follower.events():
                    sys.stdout.buffer.write(event.dumps() + b"\n")
                    sys.stdout.flush()
                    count += 1
                    if args.limit is not None and count >= args.limit:
                        return 0
        return 0

    try:
        return _run(main())
    except SubscriberError as exc:
        print(f"rshub subscribe: {exc}", file=sys.stderr)
        return 1


def run_sync(args: argparse.Namespace) -> int:
    _setup_logging(args)
    problem = _check_target(args)
    if problem:
        print(f"rshub sync: {problem}", file=sys.stderr)
        return 2
    try:
        return _run(_sync(args))
    except SubscriberError as exc:
        print(f"rshub sync: {exc}", file=sys.stderr)
        return 1


def _identity(args: argparse.Namespace) -> str:
    return args.source or f"{args.hub.rstrip('/')}/topics/{args.topic}"


async def _sync(args: argparse.Namespace) -> int:
    dest = Path(args.dest)

    def report(text: str) -> None:
        print(f"rshub sync: {text}", file=sys.stderr, flush=True)

    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        mirror = Mirror(dest, session, concurrency=args.concurrency, report=report)
        start = args.source or f"{args.hub.rstrip('/')}/.well-known/resourcesync"
        documents = Poller(session, start, topic=args.topic)
        if args.audit:
            audit = await mirror.audit(documents.resources())
            for line in audit.lines():
                print(line)
            print(
                f"rshub sync: audit: {len(audit.missing)} missing, {len(audit.extra)} extra, "
                f"{len(audit.different)} different",
                file=sys.stderr,
            )
            return 0 if audit.ok else 1

        store = PositionFile(mirror.state_dir / "state.json")
        position = store.load()
        known = position.extra.get("identity")
        if known is not None and known != _identity(args):
            report(f"{dest} mirrors {known}, not {_identity(args)}; use another --dest")
            return 2
        position.extra["identity"] = _identity(args)
        if args.resourcelist_interval:
            await _resync(mirror, documents, args.resourcelist_interval)
            report(f"summary: {mirror.stats.summary()} in {time.monotonic() - started:.1f}s")
            return 1 if mirror.stats.rejected or mirror.stats.failed else 0
        if args.once:
            args.via = "poll"
        follower = _follower(args, session, position, store.save)
        try:
            await follower.start()
            if not position.extra.get("baseline"):
                before = datetime.now(UTC)
                progress = Progress("baseline", enabled=args.progress)

                async def listed() -> AsyncIterator[tuple[Entry, datetime | None]]:
                    # What the baseline holds need not come again from a Change List.
                    async for entry, at in documents.resources():
                        if entry.lastmod is not None:
                            position.remember(entry.loc, format_datetime(entry.lastmod))
                        yield entry, at

                at = await mirror.baseline(listed(), progress=progress)
                if position.watermark is None:
                    position.watermark = min(at or before, before)
                position.extra["baseline"] = True
                store.save(position)
                report(f"baseline: {mirror.stats.summary()} in {time.monotonic() - started:.1f}s")
            if args.once:
                batch = await follower.poller.poll(position.watermark) if follower.poller else []
                await mirror.apply([e for e in batch if position.accept(e)])
                store.save(position)
            else:
                with contextlib.suppress(asyncio.CancelledError):  # SIGTERM/SIGINT: stop
                    async for batch in follower.batches():
                        await mirror.apply(batch)
        finally:
            await follower.close()
            report(f"summary: {mirror.stats.summary()} in {time.monotonic() - started:.1f}s")
    return 1 if mirror.stats.rejected or mirror.stats.failed else 0


async def _resync(mirror: Mirror, documents: Poller, interval: float) -> None:
    """Resource List polling: a baseline every ``interval`` s (start to start) until stopped."""
    with contextlib.suppress(asyncio.CancelledError):  # SIGTERM/SIGINT: stop
        while True:
            began = time.monotonic()
            await mirror.baseline(documents.resources())
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - began)))
