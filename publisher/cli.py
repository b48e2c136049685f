"""``rshub publish``, ``rshub wikipedia`` and ``rshub bridge``."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _not_yet(args: argparse.Namespace) -> int:
    print(f"rshub {args.command}: not yet implemented", file=sys.stderr)
    return 2


def add_parsers(subparsers: Any) -> None:
    for name, text in (
        ("publish", "send a change notification to a topic"),
        ("wikipedia", "publish the edits of a Wikimedia EventStreams feed"),
        ("bridge", "push the new changes of a pull-only ResourceSync Source"),
    ):
        parser = subparsers.add_parser(name, help=text, description=text)
        parser.set_defaults(run=_not_yet)
