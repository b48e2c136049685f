"""``rshub`` sub-command dispatch.

Each package owns its sub-commands in its own ``cli`` module, exposing
``add_parsers(subparsers)``; this module only wires them together. Flags default from
``RSHUB_*`` environment variables (see :func:`env_default`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from rsclient.options import hub_url_problem
from rsclient.topic_names import topic_name_problem

#: package.cli modules that contribute sub-commands, in help order.
_COMMAND_MODULES = (
    "hub.serve.cli",
    "hub.serve.token_cli",
    "publisher.cli",
    "subscriber.cli",
    "subscriber.inspect",
    "rshub.dead_letters",
    "source.cli",
)
#: ``rshub serve`` builds only its own parser: importing the client commands (and
#: ``importlib.metadata``, ``shtab``) delayed a restarted hub's first answer.
_SERVE_ONLY = ("hub.serve.cli",)
#: Each sub-command, the module that adds it, and its line in ``rshub --help``. A command
#: builds only its own module's parser, and ``--help`` and ``--version`` build none: the
#: client modules import aiohttp and redis, which took a second to start ``rshub
#: --version`` (tests check that this table says what the modules say).
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("hub.serve.cli", "run the hub"),
    "token": ("hub.serve.token_cli", "mint a short-lived read token (JWT) for private topics"),
    "publish": ("publisher.cli", "send a change notification to a topic"),
    "wikipedia": ("publisher.cli", "publish the edits of a Wikimedia EventStreams feed"),
    "bridge": ("publisher.cli", "push the new changes of a pull-only ResourceSync Source"),
    "subscribe": ("subscriber.cli", "print a topic's changes as JSON lines"),
    "sync": (
        "subscriber.cli",
        "keep a local directory mirrored from a topic (or a ResourceSync Source)",
    ),
    "inspect": (
        "subscriber.inspect",
        "print a WebSub subscription's record: state, lag, last success, last attempts",
    ),
    "dead-letters": (
        "rshub.dead_letters",
        "list a WebSub subscription's dead letters, or replay them (--replay)",
    ),
    "source": (
        "source.cli",
        "serve a directory as a ResourceSync Source, pushing its changes to a hub",
    ),
    "completion": ("", "print a shell completion script"),
}


def package_version() -> str:
    """The installed distribution's version (what a bug report should quote)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rshub")
    except PackageNotFoundError:  # running from a source tree that was never installed
        from hub import __version__

        return __version__


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog} {package_version()}")
        parser.exit()


def build_parser(modules: Sequence[str] | None = _COMMAND_MODULES) -> argparse.ArgumentParser:
    """The parser of the commands of ``modules``; ``None``: of no module, each command then
    named with its help line only (enough for ``--help``, ``--version`` and a usage error)."""
    parser = argparse.ArgumentParser(
        prog="rshub",
        description="ResourceSync change-notification hub, publisher and subscriber.",
    )
    parser.add_argument(
        "--version", action=_VersionAction, help="show program's version number and exit"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    if modules is None:
        for command, (_module, text) in COMMANDS.items():
            subparsers.add_parser(command, help=text)
        return parser
    for name in modules:
        module = importlib.import_module(name)
        module.add_parsers(subparsers)
    if tuple(modules) == _COMMAND_MODULES:
        _add_completion(subparsers)
    return parser


def _modules_for(given: Sequence[str]) -> Sequence[str] | None:
    """The modules whose parsers ``rshub GIVEN`` needs (``None``: none)."""
    module = COMMANDS.get(given[0], ("", ""))[0] if given else ""
    if given[:1] == ["completion"]:
        return _COMMAND_MODULES
    return (module,) if module else None


def _add_completion(subparsers: Any) -> None:
    import shtab

    parser = subparsers.add_parser(
        "completion",
        help=COMMANDS["completion"][1],
        description="Print the completion script for SHELL, e.g. "
        "'rshub completion bash > /etc/bash_completion.d/rshub' or, for zsh, "
        "'rshub completion zsh > \"${fpath[1]}/_rshub\"'.",
    )
    parser.add_argument("shell", choices=shtab.SUPPORTED_SHELLS)
    parser.set_defaults(run=_print_completion)


def _print_completion(args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    serving = given[:1] == ["serve"]
    if serving:  # until the hub's imports are done (hub.serve.cli tunes and resumes it)
        from hub.core import collector

        collector.pause()
    try:
        return _run(given, serving)
    finally:
        if serving:
            collector.resume()


def _run(given: list[str], serving: bool) -> int:
    parser = build_parser(_SERVE_ONLY if serving else _modules_for(given))
    args = parser.parse_args(given)
    hub = getattr(args, "hub", None)
    problem = hub_url_problem(hub) if isinstance(hub, str) else None
    topic = getattr(args, "topic", None)
    if problem is None and isinstance(topic, str):
        # The hub has no route for a name with "/" in it: its 404 would not say why.
        problem = topic_name_problem(topic)
        problem = None if problem is None else f"--topic: {problem}"
    if problem is not None:  # a usage error: one line, before anything is tried
        print(f"rshub {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        result = args.run(args)
    except KeyboardInterrupt:
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
