"""``rshub subscribe`` and ``rshub sync``."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _not_yet(args: argparse.Namespace) -> int:
    print(f"rshub {args.command}: not yet implemented", file=sys.stderr)
    return 2


def add_parsers(subparsers: Any) -> None:
    for name, text in (
        ("subscribe", "print a topic's changes as JSON lines"),
        ("sync", "keep a local directory mirrored from a topic"),
    ):
        parser = subparsers.add_parser(name, help=text, description=text)
        parser.set_defaults(run=_not_yet)
