"""``rshub token``: mint a short-lived signed read token (JWT) for some topics.

The key comes from ``--key`` or ``RSHUB_JWT_KEY`` (the hub's); the token goes to stdout
alone, so ``TOKEN=$(rshub token --topic news --ttl 1h)`` works.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from hub.core.exceptions import BadRequest
from hub.core.read_tokens import DEFAULT_MAX_TTL_SECONDS, mint
from hub.core.topics import check_name

_TTL = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def ttl_seconds(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``1h`` or ``2d`` in seconds."""
    match = _TTL.fullmatch(text.strip().lower())
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a lifetime like 90s, 15m, 1h or 2d")
    return float(match.group(1)) * _UNIT[match.group(2)]


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "token",
        help="mint a short-lived read token (JWT) for private topics",
        description="Print a signed read token (JWT, HS256) that reads the given topics until "
        "it expires; the hub accepts it when started with the same RSHUB_JWT_KEY.",
    )
    parser.add_argument(
        "--topic", action="append", required=True, help="a topic it may read (repeatable)"
    )
    parser.add_argument(
        "--ttl",
        type=ttl_seconds,
        default=3600.0,
        help="lifetime: 90s, 15m, 1h (default), 1d; at most the hub's RSHUB_JWT_MAX_TTL (1d)",
    )
    parser.add_argument(
        "--key", help="signing key, at least 32 bytes (default: RSHUB_JWT_KEY; prefer it)"
    )
    parser.set_defaults(run=run_token)


def run_token(args: argparse.Namespace) -> int:
    key = args.key or os.environ.get("RSHUB_JWT_KEY")
    if not key:
        print("rshub token: no key: pass --key or set RSHUB_JWT_KEY", file=sys.stderr)
        return 2
    try:
        limit = float(os.environ.get("RSHUB_JWT_MAX_TTL", "").strip() or DEFAULT_MAX_TTL_SECONDS)
    except ValueError:
        print("rshub token: RSHUB_JWT_MAX_TTL must be a number of seconds", file=sys.stderr)
        return 2
    try:
        if args.ttl > limit:  # the hub would refuse it (401)
            raise ValueError(
                f"--ttl of {args.ttl:g} s is longer than the hub accepts "
                f"(RSHUB_JWT_MAX_TTL: {limit:g} s)"
            )
        for name in args.topic:
            check_name(name)
        print(mint(key, args.topic, args.ttl))
    except (ValueError, BadRequest) as exc:
        print(f"rshub token: {exc}", file=sys.stderr)
        return 2
    return 0
