"""``rshub subscribe`` of several topics over one connection.

``--topic a --topic b`` (repeated) and ``--topic-prefix p`` (repeatable; every topic whose
name starts with it, those first published later included) follow all of them on one hub
stream (:class:`subscriber.topics_stream.TopicsStream`, ``--via ws`` or ``sse``), each
change printed as a JSON line naming its topic. ``--state`` keeps the stream's composite
resume id (the cursor's ``event_id``), saved after each message is printed: a restart, even
after a kill, resumes every topic where the last save stopped (at least once across a kill,
exactly once otherwise). ``--since`` takes such an id, an event id or a time.

Push only: ``--via poll`` and ``webhook`` follow one topic (the hub's Change Lists and
subscriptions are per topic), so several topics with them are a usage error, as is ``rshub
sync`` of several (a mirror follows one topic).
"""

from __future__ import annotations

import argparse
import sys

import aiohttp

from rsclient.options import env_default
from rsclient.topic_names import topic_name_problem

from .filters import MAX_PREFIXES, ChangeFilter
from .position import EventCursor, EventCursorFile
from .topics_stream import TopicsStream

__all__ = ["MAX_TOPIC_PREFIXES", "several", "subscribe_topics", "topics_problem"]

#: ``--topic-prefix`` given at most this often (the hub's own limit on ``topic_prefix=``).
MAX_TOPIC_PREFIXES = 32


def topics_problem(args: argparse.Namespace) -> str | None:
    """Check ``--topic`` (repeated) and ``--topic-prefix``; set ``args.topic`` to the one
    topic when one is given alone (the single-topic path), else None."""
    topics: list[str] = args.topics or ([t] if (t := env_default("topic")) else [])
    args.topics = list(dict.fromkeys(topics))
    prefixes: list[str] = getattr(args, "topic_prefix", None) or []
    for name in args.topics:
        problem = topic_name_problem(name)
        if problem is not None:
            return f"--topic: {problem}"
    for prefix in prefixes:
        if not prefix or topic_name_problem(prefix + "0") is not None:
            return f"--topic-prefix: {prefix[:140]!r} cannot start a topic name"
    if len(prefixes) > MAX_TOPIC_PREFIXES:
        return f"--topic-prefix: at most {MAX_TOPIC_PREFIXES}"
    args.topic = args.topics[0] if len(args.topics) == 1 and not prefixes else None
    if not several(args):
        return None  # the one-topic path checks the rest
    try:
        args.event_filter = ChangeFilter.of(
            None if args.change is None else args.change.split(","), args.prefix
        )
    except ValueError as exc:
        return f"--change: {exc}"
    if len(args.prefix) > MAX_PREFIXES:
        return f"--prefix: at most {MAX_PREFIXES}"
    if args.via not in ("ws", "sse") or args.source is not None:
        return (
            "several topics (--topic repeated, --topic-prefix) are followed on one hub "
            "stream: use --via ws or --via sse, without --source"
        )
    return None


def several(args: argparse.Namespace) -> bool:
    """Whether the command follows several topics (or a prefix) on one stream."""
    return len(args.topics) > 1 or bool(getattr(args, "topic_prefix", None))


async def subscribe_topics(args: argparse.Namespace) -> int:
    """Print every change of the topics followed, saving the resume id after each message."""
    store = EventCursorFile(args.state) if args.state else None
    position = store.load() if store else EventCursor()
    if args.since:
        position.event_id = args.since
    count, limit = 0, args.limit
    out = sys.stdout.buffer
    async with aiohttp.ClientSession() as session:
        stream = TopicsStream(
            session,
            args.hub,
            topics=args.topics,
            prefixes=args.topic_prefix or [],
            transport=args.via,
            since=position.event_id,
            token=args.token,
            event_filter=args.event_filter,
        )
        async for delivery in stream.deliveries():
            if delivery.deleted is not None:
                print(
                    f"rshub subscribe: topic {delivery.deleted} was deleted; following the others",
                    file=sys.stderr,
                    flush=True,
                )
            events = delivery.events if limit is None else delivery.events[: limit - count]
            for event in events:
                out.write(event.dumps() + b"\n")
            out.flush()
            if len(events) == len(delivery.events):  # else the rest is yet to be printed
                position.event_id = delivery.resume_id
                if store is not None:
                    store.save(position)
            count += len(events)
            if limit is not None and count >= limit:
                return 0
    return 0
