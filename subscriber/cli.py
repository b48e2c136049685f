"""``rshub subscribe`` and ``rshub sync``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

import rsclient.exceptions
from resourcesync import Entry, PackageError, format_datetime
from rsclient import interrupt
from rsclient.hub_token import HubToken, TokenMask
from rsclient.options import add_client_options, count, env_default, interval, non_negative
from rsclient.progress import add_progress_options, progress_bar

from .audit import audit, repair
from .change_dumps import catch_up_after_gap
from .dumps import baseline_from_dump
from .events import Gap, published_lastmod
from .exceptions import (
    DiscoveryError,
    HubRefused,
    IntegrityError,
    SourceError,
    SubscriberError,
)
from .filters import MAX_PREFIXES, ChangeFilter
from .follower import Follower, Mode
from .mirror import Mirror
from .poller import Poller
from .position import EventCursor, EventCursorFile
from .refusal import unknown_topic
from .retries import FailedFetches
from .several_topics import several, subscribe_topics, topics_problem

log = logging.getLogger("rshub.subscriber")

_VIA = ("ws", "sse", "webhook", "poll")

#: Seconds an interrupted command gets to unsubscribe and save before it is stopped.
_GRACE = 1.5


def _add_follow_options(parser: argparse.ArgumentParser, *, several_topics: bool = False) -> None:
    add_client_options(
        parser,
        topic_required=False,
        several_topics=several_topics,
        token_help="read token of a private topic, sent with every request to the hub, and "
        "to no other server (RSHUB_TOKEN)",
    )
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
        type=interval,
        default=env_default("interval", "5"),  # a string: argparse checks it as given
        help="polling interval in seconds (default %(default)s)",
    )
    parser.add_argument(
        "--push-retry",
        type=interval,
        default=10.0,
        help="while polling, retry push every N seconds (default %(default)s)",
    )
    parser.add_argument(
        "--overlap",
        type=non_negative,
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
    parser.add_argument(
        "--signature",
        choices=("websub", "standard-webhooks"),
        default=env_default("signature", "websub"),
        help="how the hub signs deliveries to the WebSub callback (--via webhook; "
        "RSHUB_SIGNATURE, default %(default)s)",
    )
    parser.add_argument(
        "--change",
        default=None,
        metavar="TYPES",
        help="only these change types, comma-separated: created,updated,deleted",
    )
    parser.add_argument(
        "--prefix",
        action="append",
        default=[],
        metavar="URI",
        help="only changes whose URI starts with URI (repeatable: any of them)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log transport switches")


def add_parsers(subparsers: Any) -> None:
    text = "print a topic's changes as JSON lines"
    sub = subparsers.add_parser("subscribe", help=text, description=text)
    _add_follow_options(sub, several_topics=True)
    sub.add_argument(
        "--topic-prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help="every topic whose name starts with PREFIX, those first published later too "
        "(repeatable; with --topic repeated: several topics on one --via ws/sse connection)",
    )
    sub.add_argument("--since", default=None, help="resume after this event id")
    sub.add_argument(
        "--state", default=None, help="keep the position in this file and resume from it"
    )
    sub.add_argument("--limit", type=count, default=None, help="exit after N changes")
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
        "--repair",
        action="store_true",
        help="with --audit: fetch what is missing or different, delete what is extra",
    )
    sync.add_argument(
        "--once",
        action="store_true",
        help="baseline if needed, catch up by polling once, then exit",
    )
    sync.add_argument(
        "--concurrency", type=count, default=16, help="parallel fetches (default %(default)s)"
    )
    add_progress_options(sync)
    sync.add_argument(
        "--resourcelist-interval",
        type=interval,
        default=None,
        metavar="SECONDS",
        help="baseline synchronization only: every SECONDS re-read the whole Resource "
        "List and fetch what differs, instead of following changes",
    )
    sync.set_defaults(run=run_sync)


def _setup_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="rshub %(levelname)s %(message)s",
    )


def _hub_token(args: argparse.Namespace) -> HubToken | None:
    """``--token`` for the hub (the parser checked it); ``None`` without one."""
    return HubToken.of(args.hub, args.token)


def _check_target(args: argparse.Namespace) -> str | None:
    if args.source is None and args.topic is None:
        return "give --topic (and --hub), or --source"
    if args.topic is None:
        args.via = "poll"  # a plain Source: nothing to push
    if args.via != "poll" and args.topic is None:
        return "push needs --topic; use --via poll with --source alone"
    try:
        args.event_filter = ChangeFilter.of(
            None if args.change is None else args.change.split(","), args.prefix
        )
    except ValueError as exc:
        return f"--change: {exc}"
    if len(args.prefix) > MAX_PREFIXES:
        return f"--prefix: at most {MAX_PREFIXES}"
    return None


def _follower(
    args: argparse.Namespace,
    session: aiohttp.ClientSession,
    position: EventCursor,
    save: Callable[[EventCursor], None] | None,
    *,
    start_at_end: bool = False,
    on_gap: Callable[[Gap], Awaitable[None]] | None = None,
    latest: bool = False,
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
        waits=not getattr(args, "once", False),  # a one-shot run says the hub is down, and ends
        on_mode=on_mode,
        start_at_end=start_at_end,
        on_gap=on_gap,
        event_filter=args.event_filter,
        signature=args.signature,
        latest=latest,
    )


def _run(command: str, main: Coroutine[Any, Any, int], token: HubToken | None) -> int:
    """Run ``main``; SIGINT and SIGTERM stop it within :data:`_GRACE` seconds, after it
    saved its position, unsubscribed and summarised (exit 130). The token is masked in
    whatever it logs or says, since a server may quote it back."""
    mask = TokenMask(token) if token is not None else None
    if mask is not None:
        mask.install()
    try:
        return interrupt.run(main, grace=_GRACE)
    except interrupt.Interrupted:
        return interrupt.EXIT_INTERRUPTED
    except HubRefused as exc:
        _say(command, str(exc), token)
        return 2
    except SubscriberError as exc:
        _say(command, str(exc), token)
        return 1
    finally:
        if mask is not None:
            mask.uninstall()


def _say(command: str, text: str, token: HubToken | None) -> None:
    print(f"rshub {command}: {token.mask(text) if token else text}", file=sys.stderr, flush=True)


def run_subscribe(args: argparse.Namespace) -> int:
    _setup_logging(args)
    problem = topics_problem(args)
    if problem is None and several(args):
        return _run("subscribe", subscribe_topics(args), _hub_token(args))
    problem = problem or _check_target(args)
    if problem:
        print(f"rshub subscribe: {problem}", file=sys.stderr)
        return 2
    store = EventCursorFile(args.state) if args.state else None
    try:
        position = store.load() if store else EventCursor()
    except SubscriberError as exc:  # a corrupt --state: one line, as from sync
        print(f"rshub subscribe: {exc}", file=sys.stderr)
        return 1
    if args.since:
        position.event_id = args.since

    async def main() -> int:
        count = 0
        async with aiohttp.ClientSession() as session:
            follower = _follower(
                args, session, position, store.save if store else None, start_at_end=True
            )
            async with follower:
                async for event in follower.events():
                    sys.stdout.buffer.write(event.dumps() + b"\n")
                    sys.stdout.flush()
                    count += 1
                    if args.limit is not None and count >= args.limit:
                        return 0
        return 0

    return _run("subscribe", main(), _hub_token(args))


def run_sync(args: argparse.Namespace) -> int:
    _setup_logging(args)
    problem = _check_target(args) or _dest_problem(Path(args.dest))
    if problem:
        print(f"rshub sync: {problem}", file=sys.stderr)
        return 2
    return _run("sync", _sync(args), _hub_token(args))


def _dest_problem(dest: Path) -> str | None:
    """Why ``dest`` cannot be the mirror directory (made if missing), or None: said before
    any request, where a file there (``/dev/null``) was a traceback."""
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--dest {str(dest)!r} cannot be the mirror directory: {exc.strerror or exc}"
    if not os.access(dest, os.W_OK | os.X_OK):
        return f"--dest {str(dest)!r} cannot be the mirror directory: not writable"
    return None


def _identity(args: argparse.Namespace) -> str:
    return args.source or f"{args.hub.rstrip('/')}/topics/{args.topic}"


async def _sync(args: argparse.Namespace) -> int:
    dest = Path(args.dest)
    token = _hub_token(args)

    def report(text: str) -> None:
        _say("sync", text, token)

    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        mirror = Mirror(dest, session, concurrency=args.concurrency, report=report, token=token)
        start = args.source or (
            f"{args.hub.rstrip('/')}/topics/{args.topic}/capabilitylist.xml"
            if args.topic
            else f"{args.hub.rstrip('/')}/.well-known/resourcesync"
        )
        documents = Poller(session, start, topic=args.topic, token=token)
        if args.audit:
            return await _audit(mirror, documents, repairs=args.repair, report=report)

        store = EventCursorFile(mirror.state_dir / "state.json")
        position = store.load()
        known = position.extra.get("identity")
        if known is not None and known != _identity(args):
            report(f"{dest} mirrors {known}, not {_identity(args)}; use another --dest")
            return 2
        position.extra["identity"] = _identity(args)
        mirror.failed = FailedFetches.from_json(position.extra.get("failed"))
        if args.resourcelist_interval:
            await _resync(mirror, documents, args.resourcelist_interval)
            report(f"summary: {mirror.stats.summary()} in {time.monotonic() - started:.1f}s")
            return 1 if mirror.stats.rejected or mirror.failed else 0

        def save(position: EventCursor) -> None:
            position.extra["failed"] = mirror.failed.to_json()
            store.save(position)

        async def rebaseline(gap: Gap) -> None:
            """The hub lost changes before delivering them: the Source's Change Dump when
            it covers them (:mod:`subscriber.change_dumps`), else the Resource List again."""
            prefixes, skew = tuple(args.prefix), _clocks(args)[1]
            if await catch_up_after_gap(
                mirror, documents, position, gap, skew=skew, prefixes=prefixes, report=report
            ):
                save(position)
                return
            if gap.unlisted:
                report(
                    f"the hub no longer lists changes through {gap.trimmed_through}, which "
                    "this mirror has not applied; re-baselining from its Resource List"
                )
            else:
                report(
                    f"the hub trimmed changes through {gap.trimmed_through} before "
                    "delivering them; re-baselining from its Resource List"
                )
            began = time.monotonic()
            await _baseline(
                mirror,
                documents,
                position,
                save,
                progress=False,
                prefixes=tuple(args.prefix),
                report=report,
                clocks=_clocks(args),
            )
            report(f"re-baseline: {mirror.stats.summary()} in {time.monotonic() - began:.1f}s")

        if args.once:
            args.via = "poll"
        follower = _follower(args, session, position, save, on_gap=rebaseline, latest=True)
        try:
            await follower.start()
            if not position.extra.get("baseline"):
                await _when_reachable(
                    lambda: _baseline(
                        mirror,
                        documents,
                        position,
                        save,
                        progress=args.progress,
                        prefixes=tuple(args.prefix),
                        report=report,
                        clocks=_clocks(args),
                    ),
                    report,
                    None if args.once else args.interval,
                    said=follower.unreachable is not None,
                )
                report(f"baseline: {mirror.stats.summary()} in {time.monotonic() - started:.1f}s")
            if args.once:
                batch = await follower.catch_up()
                wanted = args.event_filter.accepts if args.event_filter else None
                await mirror.apply(
                    [e for e in batch if position.accept(e) and (not wanted or wanted(e))]
                )
                if mirror.failed:  # a later run is a later round: retry them all
                    await mirror.retry_failed(all=True)
                save(position)
            else:
                retrying = asyncio.create_task(_retry_failed(mirror, position, save))
                try:
                    with contextlib.suppress(asyncio.CancelledError):  # SIGTERM/SIGINT: stop
                        async for batch in follower.batches():
                            await mirror.apply(batch)
                finally:
                    retrying.cancel()
        finally:
            await follower.close()
            report(f"summary: {mirror.stats.summary()} in {time.monotonic() - started:.1f}s")
    return 1 if mirror.stats.rejected or mirror.failed else 0


async def _audit(
    mirror: Mirror, documents: Poller, *, repairs: bool, report: Callable[[str], None]
) -> int:
    """``--audit`` (and ``--repair``): what differs on stdout, one line each, and what the
    repair did; the counts on stderr. Exit 1 unless every file was checked and the same."""
    found = await audit(mirror, documents.resources())
    for line in found.lines():
        print(line, flush=True)
    report(f"audit: {found.summary()}")
    if found.ok or not repairs or not found.differences:
        return 0 if found.ok else 1
    done = await repair(mirror, found)
    for line in done.lines():
        print(line, flush=True)
    after = await audit(mirror, documents.resources())
    left = f"{after.differences} differences left"
    if after.unchecked:
        left += f", {len(after.unchecked)} unchecked"
    report(f"repair: {done.summary()}; {left}")
    return 0 if after.ok else 1


async def _when_reachable(
    work: Callable[[], Awaitable[None]],
    report: Callable[[str], None],
    interval: float | None,
    *,
    said: bool = False,
) -> None:
    """``work()``, again every ``interval`` s while the hub or Source cannot be reached
    (said once; a one-shot run, ``interval`` None, fails instead). A refusal, or an answer
    that is not ResourceSync, is a mistake that waiting cannot fix: it is raised. ``said``:
    the follower already said that the hub cannot be reached."""
    while True:
        try:
            await work()
            return
        except HubRefused as exc:
            if interval is None or not unknown_topic(exc.status, exc.message):
                raise
            # A topic not published to yet (the follower said so): its first publish.
            log.info("no changes yet: %s", exc)
        except DiscoveryError:
            raise
        except SourceError as exc:
            unusable = isinstance(exc.__cause__, rsclient.exceptions.NotResourceSync)
            if interval is None or unusable or (exc.status is not None and exc.status < 500):
                raise
            if not said:
                report(f"{exc}; waiting for it (retrying quietly every {interval:g}s)")
                said = True
            else:
                log.info("still unreachable: %s", exc)
        await asyncio.sleep(interval)


def _clocks(args: argparse.Namespace) -> tuple[bool, timedelta]:
    """For :func:`_baseline`: whether the Resource List is the hub's (its ``at`` on the
    clock of the hub's event ids), and the skew tolerated between another clock and it."""
    return args.source is None, timedelta(seconds=args.overlap)


async def _baseline(
    mirror: Mirror,
    documents: Poller,
    position: EventCursor,
    save: Callable[[EventCursor], None],
    *,
    progress: bool,
    clocks: tuple[bool, timedelta],
    prefixes: tuple[str, ...] = (),
    report: Callable[[str], None] | None = None,
) -> None:
    """Make the mirror equal to the Source's Resource Dump when its Capability List offers
    one (:mod:`subscriber.dumps`), else, or when the dump fails, to its Resource List (the
    first time, and after a gap); with ``prefixes`` (``--prefix``), the part of it under
    them.

    The position learns the instant before which the baseline holds every change the hub
    received (:attr:`EventCursor.baseline_at`): the hub's Resource List's ``at`` as it is
    (``clocks[0]``: the hub's Redis time, that of its event ids); a Resource Dump's (the
    Source's document) or a Source's Resource List's less the skew tolerated (``clocks[1]``,
    ``--overlap``), since that clock is not the hub's; none without an ``at``.
    """
    before = datetime.now(UTC)
    hub_lists, skew = clocks

    def remember(entry: Entry) -> None:
        # What the baseline holds need not come again from a Change List.
        try:
            lastmod = published_lastmod(entry)
        except ValueError:  # the hub's extension unreadable: no key to remember
            lastmod = None
        if lastmod is not None:
            position.remember(entry.loc, format_datetime(lastmod))

    dumped, at = await _from_dump(mirror, documents, remember, prefixes, report)
    covered = None if at is None else at - skew
    if not dumped:
        bar = progress_bar("baseline", enabled=progress, unit="files")

        async def listed() -> AsyncIterator[tuple[Entry, datetime | None]]:
            async for entry, at in documents.resources():
                if prefixes and not entry.loc.startswith(prefixes):
                    continue
                remember(entry)
                yield entry, at

        at = await mirror.baseline(listed(), progress=bar)
        covered = None if at is None else at if hub_lists else at - skew
    if position.watermark is None:
        position.watermark = min(at or before, before)
    position.baselined(covered)
    position.extra["baseline"] = True
    save(position)


async def _from_dump(
    mirror: Mirror,
    documents: Poller,
    remember: Callable[[Entry], None],
    prefixes: tuple[str, ...],
    report: Callable[[str], None] | None,
) -> tuple[bool, datetime | None]:
    """The baseline from the Source's Resource Dump, if it offers one: whether it was
    made, and the dump's ``at`` (None: it gives none); not made when there is none or it
    failed (said), for the Resource List to do the baseline."""
    found = await documents.discover()
    if found.resourcedump is None:
        return False, None
    try:
        at = await baseline_from_dump(
            mirror, documents, found.resourcedump, remember=remember, prefixes=prefixes
        )
    except (PackageError, IntegrityError, SourceError) as exc:
        text = f"the Resource Dump failed ({exc}); one GET per resource instead"
        if report is not None:
            report(text)
        else:
            log.warning("%s", text)
        return False, None
    return True, at


async def _retry_failed(
    mirror: Mirror, position: EventCursor, save: Callable[[EventCursor], None]
) -> None:
    """Retry failed fetches as they come due (back-off in :mod:`subscriber.retries`)."""
    while True:
        due = mirror.failed.next_due()
        await asyncio.sleep(1.0 if due is None else min(5.0, max(0.05, due - time.time())))
        if mirror.failed.due():
            left = await mirror.retry_failed()
            log.info("retried failed fetches; %d still failing", left)
            save(position)


async def _resync(mirror: Mirror, documents: Poller, interval: float) -> None:
    """Resource List polling: a baseline every ``interval`` s (start to start) until stopped."""
    while True:
        began = time.monotonic()
        await mirror.baseline(documents.resources())
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - began)))
