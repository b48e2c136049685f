"""``rshub token``: mint a short-lived signed read token (JWT) for some topics; revoke a
token, lift a revocation, or list them, through the hub's admin API.

The key comes from ``--key`` or ``RSHUB_JWT_KEY`` (the hub's); the token goes to stdout
alone, so ``TOKEN=$(rshub token --topic news --ttl 1h)`` works.

``rshub token revoke TOKEN [--topic T]`` (and ``lift``) fingerprints the token here and
sends the hub only its SHA-256 (``POST``/``DELETE /admin/revocations``): the token never
leaves this machine. ``-`` reads it from stdin, out of the process list's sight.
``rshub token revocations`` lists those in force. These talk to the hub with the standard
library's HTTP client: no server library is imported.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from datetime import UTC, datetime
from typing import Any

from hub.core.exceptions import BadRequest
from hub.core.read_tokens import DEFAULT_MAX_TTL_SECONDS, check_jti, mint
from hub.core.revocations import FINGERPRINT, fingerprint, token_expiry
from hub.core.topic_patterns import check_pattern
from rsclient import admin_api
from rsclient.options import DEFAULT_HUB, env_default

_TTL = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
#: Seconds an admin API request may take.
_TIMEOUT = 30.0


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
        "it expires; the hub accepts it when started with the same RSHUB_JWT_KEY. With a "
        "verb: revoke a token, lift a revocation, or list the revocations (the hub's admin "
        "API).",
    )
    parser.add_argument(
        "--topic",
        action="append",
        help="a topic it may read, or a name prefix and '*' (pri*: every topic starting "
        "pri) (repeatable)",
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
    parser.add_argument(
        "--jti", help="the token's id, by which it can be revoked (default: 16 random hex digits)"
    )
    parser.set_defaults(run=run_token)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, text in (
        ("revoke", "revoke a token: the hub refuses it and ends its streams and subscriptions"),
        ("lift", "lift a revocation: the hub accepts the token again"),
    ):
        sub = verbs.add_parser(
            verb,
            help=text,
            description=f"{text[0].upper()}{text[1:]}. The token is fingerprinted here "
            "(SHA-256): only its fingerprint is sent.",
        )
        sub.add_argument(
            "token", nargs="?", help="the token ('-': read it from stdin, out of ps's sight)"
        )
        sub.add_argument("--fingerprint", help="the token's SHA-256 (hex) instead of the token")
        sub.add_argument("--jti", help="a signed read token's id (jti) instead of the token")
        sub.add_argument("--topic", help="that topic only (its grant); default: every topic")
        if verb == "revoke":
            sub.add_argument(
                "--expires",
                help="when the revocation ends, ISO 8601 with its offset "
                "(2027-01-01T00:00:00Z); default: a signed read token's own expiry, else never",
            )
        _admin_flags(sub)
        sub.set_defaults(run=run_revocation)
    listing = verbs.add_parser(
        "revocations",
        help="list the revocations in force (fingerprint or jti, topic, when)",
        description="List the revocations in force, one per line, tab-separated: kind, "
        "fingerprint or jti, topic ('*': every topic), when (UTC), and when it ends "
        "('never', or UTC).",
    )
    _admin_flags(listing)
    listing.set_defaults(run=run_revocations)


def _admin_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hub",
        default=env_default("hub", DEFAULT_HUB),
        help="hub base URL (RSHUB_HUB, default %(default)s)",
    )
    parser.add_argument(
        "--admin-token",
        default=env_default("admin-token"),
        help="bearer token of the hub's /admin API (RSHUB_ADMIN_TOKEN; prefer it)",
    )


def run_token(args: argparse.Namespace) -> int:
    if not args.topic:
        print(
            "rshub token: --topic is required to mint a token "
            "(or give a verb: revoke, lift, revocations)",
            file=sys.stderr,
        )
        return 2
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
            check_pattern(name)  # a topic, or a name prefix and '*'
        print(mint(key, args.topic, args.ttl, jti=args.jti))
    except (ValueError, BadRequest) as exc:
        print(f"rshub token: {exc}", file=sys.stderr)
        return 2
    return 0


class _Failed(Exception):
    """The hub refused or could not be reached: the message says which."""


class _Usage(_Failed):
    """The arguments name no token, or name it wrong (exit status 2)."""


def _call(args: argparse.Namespace, method: str, body: dict[str, str] | None) -> dict[str, Any]:
    try:
        return admin_api.call(
            args.hub, args.admin_token, method, "/admin/revocations", body, timeout=_TIMEOUT
        )
    except admin_api.AdminApiError as exc:
        raise _Failed(str(exc)) from None


def _named(args: argparse.Namespace) -> dict[str, str]:
    """The request's fields: the token's fingerprint (never the token), or the jti."""
    given = [name for name in ("token", "fingerprint", "jti") if getattr(args, name)]
    if len(given) != 1:
        raise _Usage("name the token by exactly one of TOKEN, --fingerprint or --jti")
    if args.token is not None:
        token = sys.stdin.readline().strip() if args.token == "-" else args.token.strip()
        if not token:
            raise _Usage("no token on stdin")
        body = {"fingerprint": fingerprint(token)}
        # The hub sees only the fingerprint: a signed token's end is read here.
        ends = token_expiry(token) if getattr(args, "expires", None) is None else None
        if ends is not None:
            body["expires"] = datetime.fromtimestamp(ends, UTC).isoformat()
    elif args.fingerprint is not None:
        value = args.fingerprint.strip().lower()
        if not FINGERPRINT.fullmatch(value):
            raise _Usage("--fingerprint: a SHA-256 in hex is 64 hex digits")
        body = {"fingerprint": value}
    else:
        try:
            body = {"jti": check_jti(args.jti)}
        except ValueError as exc:
            raise _Usage(f"--jti: {exc}") from None
    if args.topic is not None:
        body["topic"] = args.topic
    if getattr(args, "expires", None) is not None:
        body["expires"] = args.expires
    return body


def _line(record: dict[str, Any]) -> str:
    kind = "fingerprint" if record.get("fingerprint") else "jti"
    where = record.get("topic") or "*"
    at = record.get("revoked_at")
    when = datetime.fromtimestamp(float(at), UTC).isoformat(timespec="seconds") if at else ""
    ends = record.get("expires_at")
    until = datetime.fromtimestamp(float(ends), UTC).isoformat(timespec="seconds") if ends else ""
    return "\t".join((kind, str(record.get(kind)), str(where), when, until or "never"))


def run_revocation(args: argparse.Namespace) -> int:
    try:
        body = _named(args)
        if args.verb == "revoke":
            done = _call(args, "POST", body)
            print(("revoked\t" if done.get("new") else "revoked already\t") + _line(done))
        else:
            done = _call(args, "DELETE", body)
            print("lifted\t" + _line(done))
    except _Failed as exc:
        print(f"rshub token {args.verb}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, _Usage) else 1
    return 0


def run_revocations(args: argparse.Namespace) -> int:
    try:
        listed = _call(args, "GET", None)
    except _Failed as exc:
        print(f"rshub token revocations: {exc}", file=sys.stderr)
        return 1
    for record in listed.get("revocations", []):
        print(_line(record))
    return 0
