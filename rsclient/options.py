"""Flags shared by the client commands, each defaulting from an ``RSHUB_*`` variable."""

from __future__ import annotations

import argparse
import math
import os
from urllib.parse import urlsplit

from rsclient.host_names import host_problem
from rsclient.hub_token import token_problem

DEFAULT_HUB = "http://127.0.0.1:8080"


def env_default(name: str, default: str | None = None) -> str | None:
    """``RSHUB_<NAME>`` if set, else ``default``."""
    return os.environ.get(f"RSHUB_{name.upper().replace('-', '_')}", default)


def hub_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a hub base URL (``None``: nothing), said before any
    request, since a URL that cannot work would otherwise be retried for nothing."""
    example = "e.g. http://127.0.0.1:8080"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port out of range)
    except ValueError as exc:
        return f"--hub {url!r} is not a URL ({exc}); {example}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"--hub {url!r} needs http:// or https:// and a host, {example}"
    problem = host_problem(parts.hostname)
    if problem is not None:
        return f"--hub {url[:200]!r}: its host is not a valid host name ({problem}), {example}"
    if parts.query or parts.fragment:
        return f"--hub {url!r}: the hub's base URL has no query or fragment, {example}"
    segments = parts.path.split("/")
    if "topics" in segments or ".well-known" in segments:
        base = url.split("/topics", 1)[0].split("/.well-known", 1)[0]
        return (
            f"--hub {url!r} is a URL of one of the hub's documents, not its base URL: "
            f"give --hub {base} (and the topic with --topic)"
        )
    return None


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: at least {least}")
    return value


def count(text: str) -> int:
    """An argparse type: a whole number of at least 1 (changes, events, parallel fetches).
    Zero or less made a command hang (``--concurrency 0``) or fail with a traceback."""
    return _whole(text, 1)


def whole(text: str) -> int:
    """An argparse type: a whole number of zero or more (a length in bytes)."""
    return _whole(text, 0)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def non_negative(text: str) -> float:
    """An argparse type: a finite number of zero or more (seconds, a rate)."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: not negative")
    return value


def interval(text: str) -> float:
    """An argparse type: a finite interval of more than zero seconds (a poll loop of 0 s,
    or of a negative or NaN one, asked the hub or Source again at once, without end)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: more than 0 seconds")
    return value


def bearer_token(text: str) -> str | None:
    """An argparse type: a bearer token (visible ASCII), or ``None`` for an empty one (an
    empty ``RSHUB_TOKEN``). A newline in it made aiohttp refuse the header with a traceback;
    the refusal never quotes the token."""
    if not text:
        return None
    problem = token_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def add_client_options(
    parser: argparse.ArgumentParser,
    *,
    topic_required: bool = True,
    token_help: str | None = None,
    several_topics: bool = False,
) -> None:
    """``--hub``, ``--topic`` and ``--token``, shared by every client command.
    ``several_topics``: ``--topic`` may be repeated, into ``topics`` (None: not given; the
    command then takes RSHUB_TOPIC, :func:`env_default`)."""
    parser.add_argument(
        "--hub",
        default=env_default("hub", DEFAULT_HUB),
        help="hub base URL (RSHUB_HUB, default %(default)s)",
    )
    topic = env_default("topic")
    if several_topics:
        # An append's default would be appended to: the command reads RSHUB_TOPIC itself.
        parser.add_argument(
            "--topic",
            dest="topics",
            action="append",
            default=None,
            help="topic name (RSHUB_TOPIC); repeat it to follow several topics",
        )
    else:
        parser.add_argument(
            "--topic",
            default=topic,
            required=topic_required and topic is None,
            help="topic name (RSHUB_TOPIC)",
        )
    parser.add_argument(
        "--token",
        type=bearer_token,
        default=env_default("token"),
        help=token_help or "bearer token for publishing (RSHUB_TOKEN)",
    )
