"""Each subscription's last delivery attempts and its last success, kept in Redis, bounded.

For the subscriber and the operator who ask why deliveries stall
(``GET /admin/subscriptions/{id}``): time, status, latency, error and event ids of the last
``attempt_log_size`` POSTs, newest first, and the time and event id of the last 2xx. The
delivery path never waits for them: :meth:`AttemptWriter.record` only queues, and a
round of writes (one script call per topic, however many attempts) goes out in the
background, like :class:`hub.store.subscriptions.CursorWriter`'s. A log is removed with its
subscription (``delete_subscription.lua``) and its topic; a batch that arrives after the
deletion adds nothing (``record_attempts.lua`` checks the subscription exists).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import Any, NamedTuple

import orjson
from redis.exceptions import RedisError

from hub.core import metrics
from hub.core.placement import subscription_id
from hub.core.retrying import STORE_OUTAGE, retrying
from hub.core.tasks import Tasks, cancel_and_wait
from hub.store import keys, scripts
from hub.store.redis_connection import Client
from hub.store.script_pipe import ScriptPipe

log = logging.getLogger(__name__)


class Attempt(NamedTuple):
    """One POST. A tuple, stored as a JSON array: it is made and written for every POST,
    and a dataclass's creation and ``asdict`` were most of the log's cost per POST."""

    #: When the POST was sent (epoch seconds).
    at: float
    #: The callback's HTTP status; None when no answer came (``error`` says why).
    status: int | None
    #: From sending the POST to its answer or failure, in milliseconds.
    latency_ms: float
    #: Why it did not succeed (None for a 2xx).
    error: str | None
    first_event_id: str
    last_event_id: str
    events: int

    @property
    def succeeded(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Success(NamedTuple):
    """The last 2xx: when, and the last event id it delivered."""

    at: float
    event_id: str


@lru_cache(maxsize=65_536)
def _log_key(topic: str, callback: str) -> str:
    return keys.attempts(topic, subscription_id(topic, callback))


class AttemptStore:
    def __init__(self, redis: Client, script_pipe: ScriptPipe, keep: int = 50) -> None:
        self.redis = redis
        self.scripts = script_pipe
        self.keep = keep

    async def read(self, topic: str, callback: str) -> tuple[list[Attempt], Success | None]:
        """The subscription's logged attempts (newest first) and its last success."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lrange(_log_key(topic, callback), 0, self.keep - 1)
            pipe.hget(keys.last_successes(topic), callback)
            rows, success = await pipe.execute()
        attempts = [a for a in map(_attempt, rows or ()) if a is not None]
        last = _attempt(success) if success else None
        return attempts, None if last is None else Success(last.at, last.last_event_id)

    async def last_successes(self, topic: str) -> dict[str, Success]:
        """Callback -> its last success, for every subscription of ``topic`` (one read)."""
        rows: dict[Any, Any] = await self.redis.hgetall(keys.last_successes(topic))
        out: dict[str, Success] = {}
        for callback, row in rows.items():
            last = _attempt(row)
            if last is not None:
                name = callback.decode() if isinstance(callback, bytes) else str(callback)
                out[name] = Success(last.at, last.last_event_id)
        return out

    async def write(self, topic: str, logs: dict[str, list[Attempt]]) -> None:
        """Append ``logs`` (callback -> attempts, oldest first); the newest 2xx of each is
        its last success. Three script arguments per subscription, whatever it logs: the
        arguments' encoding was most of a round's cost."""
        keys_: list[str] = [keys.subscriptions(topic), keys.last_successes(topic)]
        args: list[Any] = [self.keep]
        for callback, attempts in logs.items():
            keys_.append(_log_key(topic, callback))
            success = 0
            for i in range(len(attempts), 0, -1):
                if attempts[i - 1].succeeded:
                    success = i
                    break
            blob = b"\n".join([orjson.dumps(tuple(a)) for a in attempts])
            args.extend((callback, success, blob))
        await self.scripts.run(scripts.RECORD_ATTEMPTS, keys_, args)


def _attempt(row: bytes | str) -> Attempt | None:
    """A stored attempt; None for one a newer hub wrote in a shape this one cannot read."""
    try:
        return Attempt(*orjson.loads(row))
    except (orjson.JSONDecodeError, TypeError):
        return None


#: Attempts one script call of a round writes at most: a round that waited for a quiet
#: moment (see :class:`AttemptWriter`) goes out in several calls, none holding Redis long.
CALL_ATTEMPTS = 256


class AttemptWriter:
    """Queues attempts and writes them in rounds, off the delivery path.

    What waits for a round is bounded: at most ``store.keep`` attempts per subscription
    (older ones would be trimmed anyway). While Redis is away they stay queued and the
    round is retried; they are dropped at shutdown if it is still away.

    A round also waits (at most ``patience`` seconds) for the deliveries in flight to be
    answered (``quiet``): a round of 100 attempts is ~1 ms of Redis, and 50 ms after one
    publish's answers it fell, at 20 publishes/s, in the middle of the next publish's append
    and fan-out (bench/hub.py figure 4's p99).
    """

    def __init__(
        self,
        store: AttemptStore,
        tasks: Tasks,
        gather_seconds: float = 0.05,
        quiet: Callable[[float], Awaitable[None]] | None = None,
        patience: float = 0.25,
    ) -> None:
        self.store = store
        self.tasks = tasks
        #: How long a round waits for more attempts before it goes out (a publish's
        #: fan-out answers within milliseconds: one round for all of them).
        self.gather_seconds = gather_seconds
        #: Returns once no delivery is in flight, or after the seconds it is given.
        self.quiet = quiet
        self.patience = patience
        self._logs: dict[tuple[str, str], list[Attempt]] = {}
        self._task: asyncio.Task[None] | None = None
        #: Rounds written so far (each one script call per topic).
        self.rounds = 0

    def record(self, topic: str, callback: str, attempt: Attempt) -> None:
        """Queue ``attempt`` (never waits; dropped once the writer is closing)."""
        if self.tasks.stopping.is_set():
            return
        queued = self._logs.get((topic, callback))
        if queued is None:
            self._logs[(topic, callback)] = [attempt]
        else:
            queued.append(attempt)
            if len(queued) > self.store.keep:
                del queued[0]
        if self._task is None:
            self._task = self.tasks.spawn("attempt-writer", self._commit())

    async def _commit(self) -> None:
        try:
            while self._logs:
                if self.gather_seconds:
                    await asyncio.sleep(self.gather_seconds)
                if self.quiet is not None:
                    await self.quiet(self.patience)
                await retrying(
                    self._write_round,
                    STORE_OUTAGE,
                    retry_on=RedisError,
                    log=log,
                    what="attempt log write",
                    failed=lambda _error, _delay: metrics.redis_error(),
                )
        finally:
            self._task = None

    async def _write_round(self) -> None:
        logs, self._logs = self._logs, {}
        # One script call per topic, or more: CALL_ATTEMPTS attempts each at most (unless
        # one subscription's alone are more).
        calls: list[tuple[str, dict[str, list[Attempt]]]] = []
        filling: dict[str, tuple[dict[str, list[Attempt]], int]] = {}
        for (topic, callback), attempts in logs.items():
            chunk, size = filling.get(topic, (None, 0))
            if chunk is None or size + len(attempts) > CALL_ATTEMPTS:
                chunk, size = {}, 0
                calls.append((topic, chunk))
            chunk[callback] = attempts
            filling[topic] = (chunk, size + len(attempts))
        done: set[tuple[str, str]] = set()
        self.rounds += 1
        try:
            for topic, chunk in calls:
                await self.store.write(topic, chunk)
                done.update((topic, callback) for callback in chunk)
        except RedisError:
            for (topic, callback), attempts in logs.items():  # keep them, before newer ones
                if (topic, callback) not in done:
                    newer = self._logs.get((topic, callback), [])
                    self._logs[(topic, callback)] = (attempts + newer)[-self.store.keep :]
            raise

    async def settle(self, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout``) until the attempts queued now are written."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)

    async def close(self) -> None:
        await self.settle(2.0)
        await cancel_and_wait([self._task])
        await self.tasks.stop()
