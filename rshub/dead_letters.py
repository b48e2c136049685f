"""``rshub dead-letters``: list or replay a WebSub subscription's dead letters.

A thin client of ``GET /admin/subscriptions/{id}/dead-letters`` (paged through to the end)
and ``POST .../dead-letters/replay``. One line per dead letter, tab-separated: event id,
change, loc, when it was dead-lettered (UTC), the batch's last error.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from rsclient import admin_api
from rsclient.options import DEFAULT_HUB, env_default

#: Entries asked for per page (the API's largest page).
_PAGE = 1000
#: Seconds a request may take (a replay POSTs every dead letter before it answers).
_TIMEOUT = 600.0


class _Failed(Exception):
    """The hub refused or could not be reached: the message says which."""


def add_parsers(subparsers: Any) -> None:
    text = "list a WebSub subscription's dead letters, or replay them (--replay)"
    parser = subparsers.add_parser(
        "dead-letters",
        help=text,
        description="List a WebSub subscription's dead letters (events not delivered within "
        "RSHUB_RETRY_WINDOW_SECONDS), one per line, or replay them (--replay). The id is the "
        "one GET /admin/subscriptions shows. Replayed events arrive marked "
        "X-RSHub-Replay: dead-letter, after later ones.",
    )
    parser.add_argument(
        "--hub",
        default=env_default("hub", DEFAULT_HUB),
        help="hub base URL (RSHUB_HUB, default %(default)s)",
    )
    parser.add_argument("--id", required=True, help="the subscription's id (12 hex digits)")
    parser.add_argument(
        "--replay", action="store_true", help="re-deliver them now instead of listing them"
    )
    parser.add_argument(
        "--admin-token",
        default=env_default("admin-token"),
        help="bearer token of the hub's /admin API (RSHUB_ADMIN_TOKEN)",
    )
    parser.set_defaults(run=run)


def _call(args: argparse.Namespace, method: str, path: str) -> dict[str, Any]:
    try:
        return admin_api.call(args.hub, args.admin_token, method, path, timeout=_TIMEOUT)
    except admin_api.AdminApiError as exc:
        raise _Failed(str(exc)) from None


def _line(letter: dict[str, Any]) -> str:
    at = datetime.fromtimestamp(float(letter.get("dead_lettered_at") or 0), UTC)
    fields = (
        letter.get("id"),
        letter.get("change"),
        letter.get("loc"),
        at.isoformat(timespec="seconds"),
        letter.get("error"),
    )
    return "\t".join(str(f) for f in fields)


def run(args: argparse.Namespace) -> int:
    base = f"/admin/subscriptions/{quote(args.id, safe='')}/dead-letters"
    try:
        if args.replay:
            done = _call(args, "POST", base + "/replay")
            print(f"replayed {done['replayed']}, remaining {done['remaining']}")
            if done.get("error"):
                print(f"rshub dead-letters: replay stopped: {done['error']}", file=sys.stderr)
                return 1
            return 0
        after: str | None = None
        while True:  # each page starts after the last one's last entry
            query = {"limit": _PAGE, **({"after": after} if after else {})}
            page = _call(args, "GET", f"{base}?{urlencode(query)}")
            letters = page["dead_letters"]
            for letter in letters:
                print(_line(letter))
            if len(letters) < _PAGE:
                return 0
            after = letters[-1]["entry"]
    except _Failed as exc:
        print(f"rshub dead-letters: {exc}", file=sys.stderr)
        return 1
