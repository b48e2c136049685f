"""Flags shared by the client commands, each defaulting from an ``RSHUB_*`` variable."""

from __future__ import annotations

import argparse
import os

DEFAULT_HUB = "http://127.0.0.1:8080"


def env_default(name: str, default: str | None = None) -> str | None:
    """``RSHUB_<NAME>`` if set, else ``default``."""
    return os.environ.get(f"RSHUB_{name.upper().replace('-', '_')}", default)


def add_client_options(parser: argparse.ArgumentParser, *, topic_required: bool = True) -> None:
    """``--hub``, ``--topic`` and ``--token``, shared by every client command."""
    parser.add_argument(
        "--hub",
        default=env_default("hub", DEFAULT_HUB),
        help="hub base URL (RSHUB_HUB, default %(default)s)",
    )
    topic = env_default("topic")
    parser.add_argument(
        "--topic",
        default=topic,
        required=topic_required and topic is None,
        help="topic name (RSHUB_TOPIC)",
    )
    parser.add_argument(
        "--token", default=env_default("token"), help="bearer token for publishing (RSHUB_TOKEN)"
    )
