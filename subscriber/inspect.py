"""``rshub inspect``: a WebSub subscription's record, as the hub keeps it.

State, cursor and lag, last success, last error and the last delivery attempts
(``GET /admin/subscriptions/{id}``). The subscription is named by its id, or by its topic
and callback (the id is computed here with the hub's own function,
:func:`rsclient.subscription_identity.subscription_id`). A subscriber reads its own record
with ``--secret`` (its ``hub.secret``: the request is signed, see docs/hub.md); an
operator with ``--admin-token``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from rsclient.options import DEFAULT_HUB, env_default
from rsclient.subscription_identity import signed_headers, subscription_id

_TIMEOUT = 30.0


def add_parsers(subparsers: Any) -> None:
    text = "print a WebSub subscription's record: state, lag, last success, last attempts"
    parser = subparsers.add_parser(
        "inspect",
        help=text,
        description=f"{text}. Name it with --id, or with --topic and --callback.",
    )
    parser.add_argument(
        "--hub",
        default=env_default("hub", DEFAULT_HUB),
        help="hub base URL (RSHUB_HUB, default %(default)s)",
    )
    parser.add_argument("--topic", help="the subscription's topic name (with --callback)")
    parser.add_argument("--callback", help="the subscription's callback URL (with --topic)")
    parser.add_argument(
        "--id", dest="sub_id", help="the subscription id (X-RSHub-Subscription of a delivery)"
    )
    parser.add_argument(
        "--secret",
        default=env_default("secret"),
        help="the subscription's hub.secret: sign the request (RSHUB_SECRET)",
    )
    parser.add_argument(
        "--admin-token",
        default=env_default("admin_token"),
        help="the hub's admin token (RSHUB_ADMIN_TOKEN)",
    )
    parser.add_argument("--json", action="store_true", help="print the record as JSON")
    parser.set_defaults(run=run_inspect)


def _target(args: argparse.Namespace) -> str | None:
    if args.sub_id:
        return str(args.sub_id)
    if args.topic and args.callback:
        return subscription_id(args.topic, args.callback)
    return None


def run_inspect(args: argparse.Namespace) -> int:
    sub_id = _target(args)
    if sub_id is None:
        print("rshub inspect: give --id, or --topic and --callback", file=sys.stderr)
        return 2
    url = f"{args.hub.rstrip('/')}/admin/subscriptions/{sub_id}"
    headers = {"Accept": "application/json"}
    if args.admin_token:
        headers["Authorization"] = f"Bearer {args.admin_token}"
    if args.secret:
        headers.update(signed_headers(args.secret, int(time.time()), urlsplit(url).path))
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=_TIMEOUT
        ) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        print(f"rshub inspect: {exc.code}: {_error(exc.read())}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"rshub inspect: cannot reach {args.hub}: {exc}", file=sys.stderr)
        return 1
    try:
        record = json.loads(body)
        text = json.dumps(record, indent=2) if args.json else human(record)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        # Not the hub's record (another server at --hub, an older hub): a traceback before.
        print(
            f"rshub inspect: {url} answered what is not a subscription record "
            f"({type(exc).__name__}: {str(exc)[:120]}): {body[:120]!r}",
            file=sys.stderr,
        )
        return 1
    print(text)
    return 0


def _error(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")[:300]


def _when(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def human(record: dict[str, Any]) -> str:
    """The record as a person reads it: facts first, then the attempts, newest first."""
    lag = f"{record['lag_events']}{'+' if record['lag_capped'] else ''} events"
    success = record.get("last_success")
    failures = f"{record['failures']} failures in a row"
    failed_at = max((a["at"] for a in record["attempts"] if a["error"]), default=0.0)
    if success and record["failures"] and success["at"] > failed_at:
        # A POST outside the delivery's turn (a dead-letter replay) got through since:
        # the count is the delivery's, which has not tried again yet.
        failures += " before the last success"
    lines = [
        f"subscription {record['id']}",
        f"  topic         {record['topic']} ({record['topic_url']})",
        f"  callback      {record['callback']}",
        f"  state         {record['state']}",
        f"  cursor        {record['cursor'] or '-'} (last event {record['last_id'] or '-'})",
        f"  lag           {lag}, {record['lag_seconds']:.1f} s",
        "  last success  "
        + (f"{_when(success['at'])} through {success['event_id']}" if success else "never"),
        f"  last error    {record['last_error'] or '-'} ({failures})",
        f"  expires       {_when(record['expires_at'])}",
    ]
    failed = record.get("failed_verification")
    if failed:  # a renewal (or unsubscription) the callback did not confirm
        lines.append(
            f"  verification  {failed['mode']} failed {_when(failed['at'])}: {failed['reason']}"
        )
    lines += [
        "",
        f"last {len(record['attempts'])} attempts, newest first:",
    ]
    for a in record["attempts"]:
        status = a["status"] if a["status"] is not None else "---"
        lines.append(
            f"  {_when(a['at'])}  {status}  {a['latency_ms']:9.1f} ms  "
            f"{a['events']:4d} events {a['first_event_id']}..{a['last_event_id']}"
            + (f"  {a['error']}" if a["error"] else "")
        )
    if not record["attempts"]:
        lines.append("  (none yet)")
    return "\n".join(lines)
