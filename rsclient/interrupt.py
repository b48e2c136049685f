"""Running a command so that Ctrl-C (SIGINT) or SIGTERM stops it within a bounded time.

The first signal cancels the command, which gets ``grace`` seconds to wind up (send what
is queued, unsubscribe, save its position). If it still runs then, it is cancelled again
every 0.1 s until it stops, so no retry loop, back-off sleep or connect timeout can keep
it alive. A second signal ends the grace at once. Whatever the command returned or raised
while winding up, the caller gets :class:`Interrupted` and exits :data:`EXIT_INTERRUPTED`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

from .exceptions import RsClientError

__all__ = ["EXIT_INTERRUPTED", "Interrupted", "run", "winding_up"]

#: The shell's code for "ended by SIGINT".
EXIT_INTERRUPTED = 130

T = TypeVar("T")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(RsClientError):
    """The command was stopped by a signal; ``error`` is what its wind-up raised, if any."""

    def __init__(self, signum: int, error: BaseException | None = None) -> None:
        name = signal.Signals(signum).name
        detail = "" if error is None or isinstance(error, asyncio.CancelledError) else str(error)
        super().__init__(f"interrupted ({name}){'; ' + detail if detail else ''}")
        self.signum = signum
        self.error = error


def winding_up() -> bool:
    """Whether the current task was asked to stop (its ``finally`` blocks should hurry)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def run(main: Coroutine[Any, Any, T], *, grace: float = 1.0) -> T:
    """Run ``main`` to completion, or stop it on SIGINT/SIGTERM.

    Raises:
        Interrupted: a signal arrived (from the first one on, the result is dropped).
    """
    return asyncio.run(_supervise(main, grace))


async def _supervise(main: Coroutine[Any, Any, T], grace: float) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    received: list[int] = []

    def stop() -> None:
        if not task.done():
            task.cancel()
            loop.call_later(0.1, stop)

    def on_signal(signum: int) -> None:
        received.append(signum)
        if len(received) == 1:
            task.cancel()
            loop.call_later(grace, stop)
        else:
            stop()

    installed = []
    for signum in _SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
    try:
        result = await task
    except BaseException as exc:
        if received:
            raise Interrupted(received[0], exc) from None
        raise
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
    if received:
        raise Interrupted(received[0])
    return result
