"""``rshub publish``, ``rshub wikipedia`` and ``rshub bridge``.

Exit codes: 0 done, 1 the hub or the feed/Source failed, 2 bad usage or bad input,
130 interrupted (after flushing what was queued and saving the position).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import AsyncIterator, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tqdm import tqdm

from resourcesync import ChangeList, ChangeListNotification, DocumentError, Link, parse
from rsclient import interrupt
from rsclient.host_names import url_host_problem
from rsclient.hub_token import HubToken, TokenMask
from rsclient.options import (
    add_client_options,
    count,
    env_default,
    interval,
    non_negative,
    whole,
)
from rsclient.progress import add_progress_options, progress_bar

from .batching import BatchPolicy
from .changes import make_change
from .client import Publisher
from .exceptions import PublisherError, UsageError
from .retry import RetryPolicy
from .state import StateFile

log = logging.getLogger("rshub")

_CHANGES = ("created", "updated", "deleted")

#: Seconds an interrupted command gets to send what it holds before it is stopped.
_GRACE = 0.5

#: What no URI holds (RFC 3986): whitespace and control characters.
_SPACE = re.compile(r"[\x00-\x20\x7f]")

#: Seconds ``rshub publish`` retries a failing hub (5xx, 429, timeouts) by default.
_RETRY_FOR = 5.0
#: Attempts ``rshub publish`` makes by default at a hub that refuses connections: one
#: quick retry, then the reason. A hub that is down is not coming back within seconds,
#: and waiting out ``_RETRY_FOR`` only delayed the news (``--retry-for`` waits longer).
_UNREACHABLE_ATTEMPTS = 2


def add_parsers(subparsers: Any) -> None:
    _add_publish(subparsers)
    _add_wikipedia(subparsers)
    _add_bridge(subparsers)


# -- rshub publish -------------------------------------------------------------------------


def _add_publish(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="send a change notification to a topic",
        description="Send one change (from flags) or a change notification / Change List "
        "(XML file, or - for stdin) to a topic; print the event ids assigned.",
    )
    add_client_options(parser)
    parser.add_argument("file", nargs="?", help="notification or Change List XML ('-': stdin)")
    parser.add_argument("--loc", help="URI of the changed resource")
    parser.add_argument(
        "--change",
        choices=_CHANGES,
        default="updated",
        help="nature of the change (default %(default)s)",
    )
    parser.add_argument("--lastmod", help="W3C datetime of the change (default: now)")
    parser.add_argument("--hash", help="e.g. md5:... or sha-256:...")
    parser.add_argument("--length", type=whole, help="length in bytes")
    parser.add_argument("--type", help="media type")
    parser.add_argument(
        "--link",
        nargs=2,
        action="append",
        metavar=("REL", "HREF"),
        default=[],
        help="an rs:ln link (repeatable)",
    )
    parser.add_argument(
        "--retry-for",
        type=non_negative,
        metavar="SECONDS",
        help="keep retrying an unreachable or failing hub this long, then give up "
        f"(default: a hub that cannot be connected to gets one quick retry, one that "
        f"fails gets {_RETRY_FOR:g}s)",
    )
    parser.add_argument(
        "--batch-size",
        type=count,
        default=1000,
        help="changes per notification when sending a file (default %(default)s)",
    )
    add_progress_options(parser)
    parser.set_defaults(run=run_publish)


def _entries_from_args(args: argparse.Namespace) -> list[Any]:
    if args.file and args.loc:
        raise UsageError("give either a file or --loc, not both")
    if args.loc:
        from resourcesync import parse_datetime

        loc = urlsplit(args.loc)
        if loc.scheme not in ("http", "https") or not loc.netloc or _SPACE.search(args.loc):
            raise UsageError(f"--loc must be an absolute http(s) URL, got {args.loc!r}")

        try:
            when = parse_datetime(args.lastmod) if args.lastmod else datetime.now(UTC)
        except ValueError as exc:
            raise UsageError(f"--lastmod: {exc}") from None
        links = [Link(rel=rel, href=href) for rel, href in args.link]
        return [
            make_change(
                args.loc,
                args.change,
                when,
                hash=args.hash,
                length=args.length,
                type=args.type,
                links=links,
            )
        ]
    if not args.file:
        raise UsageError("nothing to publish: give --loc (one change) or a file ('-': stdin)")
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc}") from None
    try:
        doc = parse(data)
    except DocumentError as exc:
        raise UsageError(f"{args.file}: {exc}") from None
    if not isinstance(doc, ChangeListNotification | ChangeList) or doc.is_index:
        raise UsageError(
            f"{args.file}: a changelist-notification or Change List is needed, "
            f"not a {type(doc).__name__}"
        )
    if not doc.entries:
        raise UsageError(f"{args.file}: the document lists no changes")
    return list(doc.entries)


def _retry_policy(retry_for: float | None) -> RetryPolicy:
    if retry_for is None:
        return RetryPolicy(give_up_after=_RETRY_FOR, unreachable_attempts=_UNREACHABLE_ATTEMPTS)
    return RetryPolicy(give_up_after=retry_for)


async def _publish(args: argparse.Namespace) -> list[str]:
    entries = _entries_from_args(args)
    pub = Publisher(
        args.hub,
        args.topic,
        token=args.token,
        batching=BatchPolicy(max_changes=max(1, min(args.batch_size, 50_000)), max_wait=0),
        retry=_retry_policy(args.retry_for),
        max_queued=max(len(entries), 1),
        close_timeout=None,
    )
    await pub.start()
    bar = progress_bar("published", total=len(entries), enabled=args.progress, unit="changes")
    try:
        if len(entries) <= args.batch_size:
            ids = await pub.publish(entries)
            bar.update(len(ids))
            return ids
        ids = []
        for start in range(0, len(entries), args.batch_size):  # one notification at a time
            ids += await pub.publish(entries[start : start + args.batch_size])
            bar.update(len(ids) - bar.n)
        return ids
    finally:
        bar.close()
        # Interrupted: what the hub has not stored within the grace is reported unsent.
        await pub.close(timeout=_GRACE if interrupt.winding_up() else None)


def run_publish(args: argparse.Namespace) -> int:
    _logging("WARNING")
    # One-shot: the command's last line says what failed; the client's report of the same
    # failure would only repeat it. Told to wait longer than the default, it says once
    # that it is waiting.
    client_log = logging.getLogger(Publisher.__module__)
    level = client_log.level
    waits_long = args.retry_for is not None and args.retry_for > _RETRY_FOR
    client_log.setLevel(logging.WARNING if waits_long else logging.CRITICAL)
    client_log.addFilter(_below_error)
    try:
        code, ids = _run("publish", _publish(args), args)
    finally:  # as it was (tests run commands in-process)
        client_log.removeFilter(_below_error)
        client_log.setLevel(level)
    for event_id in ids or []:
        print(event_id)
    return code


def _below_error(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


# -- rshub wikipedia -----------------------------------------------------------------------


def _add_wikipedia(subparsers: Any) -> None:
    from .editfeed import DEFAULT_STREAM

    parser = subparsers.add_parser(
        "wikipedia",
        help="publish the edits of a Wikimedia EventStreams feed",
        description="Follow a Wikimedia EventStreams recentchange feed (or replay a recorded "
        "one) and publish each page change as a ResourceSync change.",
    )
    add_client_options(parser, topic_required=False)
    parser.add_argument(
        "--stream",
        default=env_default("stream", DEFAULT_STREAM),
        help="SSE URL of a recentchange stream (default %(default)s)",
    )
    parser.add_argument(
        "--replay",
        metavar="FILE",
        help="replay a recorded feed instead ('sample': the generated sample shipped with rshub)",
    )
    parser.add_argument(
        "--rate",
        type=non_negative,
        default=0.0,
        help="replay this many events per second (default: as fast as possible)",
    )
    parser.add_argument(
        "--wiki",
        action="append",
        default=[],
        help="only this wiki, e.g. enwiki or en.wikipedia.org (repeatable)",
    )
    parser.add_argument(
        "--namespace",
        action="append",
        type=int,
        default=[],
        help="only this namespace number, e.g. 0 (repeatable)",
    )
    parser.add_argument(
        "--bots",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="publish bot edits too (default: yes; --no-bots to skip them)",
    )
    parser.add_argument(
        "--categorize",
        action="store_true",
        help="publish category membership changes as category page updates",
    )
    parser.add_argument(
        "--state",
        default=env_default("state", "rshub-wikipedia.state.json"),
        help="file keeping the last published event id (default %(default)s)",
    )
    parser.add_argument("--from-start", action="store_true", help="ignore the saved position")
    parser.add_argument("--limit", type=count, help="stop after reading this many events")
    parser.add_argument("--log-level", default="INFO")
    add_progress_options(parser)
    parser.set_defaults(run=run_wikipedia)


async def _wikipedia(args: argparse.Namespace) -> int:
    from .editfeed import follow, read_recording, replay, sample_path, saved_position, stream
    from .wikipedia import EditFilter

    path = None
    if args.replay:
        path = sample_path() if args.replay == "sample" else Path(args.replay)
        if not path.exists():
            raise UsageError(f"--replay: no such file {path}")
    elif (problem := url_host_problem(args.stream)) is not None:
        raise UsageError(f"--stream {args.stream[:200]!r}: {problem}")
    source = str(path) if path else args.stream
    topic = args.topic or "wikipedia"
    # The position is the feed's as published to this topic: another topic (new filters,
    # say) starts afresh instead of resuming where the first one left off.
    feed = f"{source} -> {args.hub.rstrip('/')}/topics/{topic}"
    state = StateFile(args.state) if args.state else None
    position = "" if args.from_start else saved_position(state, feed)
    if position:
        log.info("resuming %s after event %s", source, position[:120])
    events = (
        replay(path, rate=args.rate, after=position)
        if path
        else stream(args.stream, after=position)
    )
    bar = progress_bar("events read", enabled=args.progress, unit="events")
    if path is not None:
        bar.reset(total=sum(1 for _ in read_recording(path)))
    events = _counted(events, bar)
    async with Publisher(
        args.hub, topic, token=args.token, batching=BatchPolicy(max_changes=500, max_wait=0.2)
    ) as pub:
        log.info("publishing %s to %s/topics/%s", source, pub.hub, topic)
        stats = await follow(
            events,
            pub,
            edit_filter=EditFilter.of(args.wiki, args.namespace, args.bots),
            state=state,
            source=feed,
            categorize=args.categorize,
            limit=args.limit,
            position=position,
        )
    bar.close()
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(stats.by_change.items())) or "none"
    log.info(
        "read %d events (%d filtered out, %d without a page change); published %d changes: %s",
        stats.read,
        stats.filtered,
        stats.unmapped,
        stats.changes,
        counts,
    )
    return 0


async def _counted(events: AsyncIterator[Any], bar: tqdm[Any]) -> AsyncIterator[Any]:
    async for event in events:
        bar.update(1)
        yield event


def run_wikipedia(args: argparse.Namespace) -> int:
    _logging(args.log_level)
    code, _ = _run("wikipedia", _wikipedia(args), args)
    return code


# -- rshub bridge --------------------------------------------------------------------------


def _add_bridge(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bridge",
        help="push the new changes of a pull-only ResourceSync Source",
        description="Poll a pull-only ResourceSync Source (its Source Description, Capability "
        "List, Change List Index or Change List URL) and publish its new changes.",
    )
    add_client_options(parser)
    parser.add_argument("--source", required=True, help="URL of the Source's document")
    parser.add_argument(
        "--interval",
        type=interval,
        default=60.0,
        help="seconds between polls (default %(default)s)",
    )
    parser.add_argument(
        "--state",
        default=env_default("state", "rshub-bridge.state.json"),
        help="file keeping the position per Change List (default %(default)s)",
    )
    parser.add_argument(
        "--since",
        help="on the first run, skip changes before this W3C "
        "datetime ('now': skip those listed at the first poll)",
    )
    parser.add_argument("--once", action="store_true", help="poll once and exit")
    parser.add_argument("--log-level", default="INFO")
    add_progress_options(parser)
    parser.set_defaults(run=run_bridge)


async def _bridge(args: argparse.Namespace) -> int:
    from .bridge import Bridge

    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    async with Publisher(args.hub, args.topic, token=args.token) as pub:
        bar = progress_bar("changes published", enabled=args.progress, unit="changes")
        bridge = Bridge(
            args.source,
            pub,
            state=StateFile(args.state) if args.state else None,
            since=args.since,
            progress=bar,
        )
        log.info("bridging %s to %s every %.0fs", args.source, pub.url, args.interval)
        if args.once:  # one poll, whose failure is the command's
            result = await bridge.poll()
            log.info("published %d new changes", result.published)
        else:
            await bridge.run(args.interval)
    return 0


def run_bridge(args: argparse.Namespace) -> int:
    _logging(args.log_level)
    code, _ = _run("bridge", _bridge(args), args)
    return code


# -- shared --------------------------------------------------------------------------------


def _logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _run(command: str, coro: Coroutine[Any, Any, Any], args: argparse.Namespace) -> tuple[int, Any]:
    """Run ``coro``; map errors to a message on stderr and an exit code. SIGINT and SIGTERM
    stop the command within about a second (:mod:`rsclient.interrupt`): what is queued
    gets that long to be sent, the position is saved, the rest is reported unsent. The
    token is masked in whatever it logs or says, since a server may quote it back."""
    token = HubToken.of(args.hub, args.token)
    mask = TokenMask(token) if token is not None else None
    if mask is not None:
        mask.install()

    def say(exc: Exception) -> None:
        text = f"rshub {command}: {exc}"
        print(token.mask(text) if token else text, file=sys.stderr)

    try:
        return 0, interrupt.run(coro, grace=_GRACE)
    except interrupt.Interrupted as exc:
        say(exc)
        return interrupt.EXIT_INTERRUPTED, None
    except UsageError as exc:
        say(exc)
        return 2, None
    except PublisherError as exc:  # PublishFailed among them
        say(exc)
        return 1, None
    finally:
        if mask is not None:
            mask.uninstall()
