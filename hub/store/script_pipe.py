"""A lean, pipelined connection for the hub's Lua scripts (the hot one: the publish).

Why not redis-py's pipeline: profiling single-change publishes under load showed about a
quarter of the hub's own work in redis-py's per-command machinery (argument encoding,
pipeline bookkeeping, response callbacks) for a command whose arguments are already bytes.
Here every concurrent ``EVALSHA`` is packed by hiredis, written in one ``write`` per batch
on one TCP connection, and the replies are read in order with a hiredis reader. On a Redis
Cluster there is one such connection per primary, and each call goes to the primary of its
first key's hash slot (a ``MOVED``/``ASK`` reply, during resharding, is retried through
redis-py, which follows it). It speaks to Redis however redis-py's connection class for the
URL would: plain TCP, TLS (the context redis-py builds from the URL's ``ssl_*`` options, made
once, in a thread) or a unix socket (:class:`Dial`).

A connection Redis closed (it restarted, say) is replaced before a batch is written, never
after: see :meth:`_Link.sound`. A batch that fails once written is not re-sent, since Redis
may have run it (an append twice would store its changes twice); its callers get the error.

Failover: behind Sentinel a new connection goes to the master Sentinel names at that moment,
and one answered ``READONLY`` (its server was demoted) is dropped; on a Cluster a connection
failure makes the next batch re-read the slot map (redis-py's own commands do the same).
A call made with ``replicated=True`` is followed, on the same connection, by the
:class:`hub.store.replicas.ReplicaWait` ``WAIT`` (one per batch and connection). A ``WAIT``
holds up every reply behind it until it is answered, so a pipe with one carries nothing
that must not wait (:class:`hub.store.event_store.EventStore` keeps two).

On a Cluster a batch is split by primary, and a primary that fails (killed, say) fails only
its own share: the others' calls ran, and are answered with their replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import hiredis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    RedisSSLContext,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.sentinel import (
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hub.store.replicas import ReplicaWait
from hub.store.scripts import Script

log = logging.getLogger(__name__)


def _reply_error(message: str) -> ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return ResponseError(message)


#: redis-py's connection classes whose way of connecting :class:`Dial` repeats.
_DIALLED: tuple[type[AbstractConnection], ...] = (
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)


class Dial:
    """How redis-py's connection class for the hub's Redis URL reaches it: TCP, TLS over
    TCP, or a unix socket; :class:`_Link` connects the same way.

    The TLS context is the one redis-py builds from the URL's ``ssl_*`` options (by its own
    class, so every option it knows is honoured), made at the first connection and in a
    thread: loading CA files blocks.
    """

    def __init__(self, path: str | None = None, tls: RedisSSLContext | None = None) -> None:
        #: The unix socket's path; None for TCP.
        self.path = path
        self._tls = tls

    @classmethod
    def of(cls, connection_class: type[AbstractConnection], kwargs: dict[str, Any]) -> Dial | None:
        """The dial of a redis-py pool's (or Cluster's) connection class and keyword
        arguments; None for a class the pipe does not know (its calls then go through
        redis-py)."""
        if connection_class not in _DIALLED:
            return None
        if issubclass(connection_class, UnixDomainSocketConnection):
            return cls(path=str(kwargs.get("path", "")))
        if issubclass(connection_class, SSLConnection):
            options = {k: v for k, v in kwargs.items() if k.startswith("ssl_")}
            return cls(tls=SSLConnection(**options).ssl_context)
        return cls()

    async def tls(self) -> ssl.SSLContext | None:
        """The TLS context to connect with; None for plain TCP and unix sockets."""
        if self._tls is None:
            return None
        if self._tls.context is None:
            return await asyncio.to_thread(self._tls.get)
        return self._tls.get()


class _Link(asyncio.Protocol):
    """One connection to Redis speaking RESP2, requests answered in order.

    A protocol rather than a stream reader and writer: each reply is parsed where the loop
    hands over the bytes, and a batch's waiter is woken once with all its replies (profile
    of the publish path: the stream reader's per-read futures and the per-batch timeout
    context were a tenth of the append's own time).
    """

    def __init__(self) -> None:
        self.parser = hiredis.Reader(replyError=_reply_error)
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[list[Any]] | None = None
        #: In :meth:`send`'s mode: called once with the batch's replies or its error.
        self._done: Callable[[list[Any] | Exception], None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._replies: list[Any] = []
        self._expected = 0
        #: Why the connection cannot be used any longer (closed, reset), once it cannot.
        self._lost: Exception | None = None
        #: Redis sent something nobody asked for: the connection is out of step.
        self._unasked = False
        #: Called with a :meth:`run`'s replies where they arrive, before its caller
        #: resumes (:mod:`hub.store.stream_tail`: the feed's fan-out, without a task hop).
        self.on_replies: Callable[[list[Any]], None] | None = None
        #: Once set, what Redis sends unasked (pub/sub messages) goes to it, reply by reply
        #: (:mod:`hub.store.tail_notices`); and :attr:`on_lost` learns of the end.
        self.on_push: Callable[[Any], None] | None = None
        self.on_lost: Callable[[Exception], None] | None = None

    @classmethod
    async def open(cls, options: dict[str, Any], timeout: float, dial: Dial) -> _Link:
        loop = asyncio.get_running_loop()
        host, port = options.get("host", "127.0.0.1"), options.get("port", 6379)
        async with asyncio.timeout(timeout):  # keeps a cancel that 3.11's wait_for may lose
            if dial.path is not None:
                _, link = await loop.create_unix_connection(cls, dial.path)
            else:
                _, link = await loop.create_connection(cls, host, port, ssl=await dial.tls())
        setup: list[tuple[Any, ...]] = []
        if options.get("password"):
            user = options.get("username")
            setup.append(
                ("AUTH", user, options["password"]) if user else ("AUTH", options["password"])
            )
        if options.get("db"):
            setup.append(("SELECT", options["db"]))
        if setup:
            for reply in await link.run([hiredis.pack_command(c) for c in setup], timeout):
                if isinstance(reply, Exception):
                    link.close()
                    raise reply
        return link

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.parser.feed(data)
        waiter = self._waiter
        if waiter is None and self._done is None:
            push = self.on_push
            if push is None:
                self._unasked = True
                return
            while (reply := self.parser.gets()) is not False:
                push(reply)
            return
        replies = self._replies
        while len(replies) < self._expected:
            reply = self.parser.gets()
            if reply is False:
                return
            replies.append(reply)
        if waiter is None:
            self._finish(replies)
            return
        self._waiter = None
        if waiter.done():
            return
        hook = self.on_replies
        if hook is not None:
            try:
                hook(replies)
            except Exception:  # the caller gets the replies all the same, and goes on
                log.exception("handling a Redis reply where it arrived failed")
        waiter.set_result(replies)
        push = self.on_push
        if push is not None:  # what came right behind the replies (a subscription's first)
            while (reply := self.parser.gets()) is not False:
                push(reply)

    def eof_received(self) -> bool:
        self._fail(RedisConnectionError("Redis closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"the connection to Redis was lost ({exc or 'closed'})"))

    def _fail(self, exc: Exception) -> None:
        if self._lost is None:
            self._lost = exc
            lost = self.on_lost
            if lost is not None:
                lost(exc)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self._finish(exc)

    def _finish(self, outcome: list[Any] | Exception) -> None:
        done, self._done = self._done, None
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if done is not None:
            done(outcome)

    def send(
        self, commands: list[bytes], timeout: float, done: Callable[[list[Any] | Exception], None]
    ) -> None:
        """:meth:`run` without a coroutine: ``done`` is called with the replies, or with
        the error (a lost connection, ``TimeoutError`` after ``timeout``), from the loop's
        own callbacks. (On the publish path: no task, future or frame per batch.)"""
        assert self.transport is not None and self._waiter is None and self._done is None
        self._done = done
        self._replies, self._expected = [], len(commands)
        self._timer = asyncio.get_running_loop().call_later(timeout, self._finish, TimeoutError())
        self.transport.write(b"".join(commands))

    async def run(self, commands: list[bytes], timeout: float) -> list[Any]:
        if self._lost is not None:
            raise self._lost
        assert self.transport is not None and self._waiter is None and self._done is None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[list[Any]] = loop.create_future()
        self._waiter = waiter
        self._replies, self._expected = [], len(commands)
        self.transport.write(b"".join(commands))
        timer = loop.call_later(timeout, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            if self._waiter is waiter:
                self._waiter = None

    def alive(self) -> bool:
        """False once the loop saw the connection end (or Redis send on it unasked): what
        :meth:`sound` knows without a poll."""
        transport = self.transport
        return not (transport is None or transport.is_closing() or self._lost or self._unasked)

    def sound(self) -> bool:
        """True unless Redis closed this idle connection (or sent on it unasked).

        Between batches nothing is owed on the connection, so anything to read (an end of
        file above all: a Redis that was killed or restarted) means it is unusable; as
        nothing was written on it yet, a fresh connection can take the batch safely. The
        poll also sees what the event loop has not read yet.
        """
        if not self.alive():
            return False
        assert self.transport is not None
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return True
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[list[Any]]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def _as_store_error(exc: Exception) -> Exception:
    """What a batch's callers get when it failed as a whole."""
    if isinstance(exc, TimeoutError):
        return RedisTimeoutError("Redis did not answer in time")
    if isinstance(exc, (OSError, EOFError)):
        return RedisConnectionError(str(exc))
    return exc


def _hand_out(
    batch: list[tuple[tuple[Any, ...], asyncio.Future[Any], bool]], results: list[Any]
) -> None:
    for (_, future, _), result in zip(batch, results, strict=True):
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)


def _as_they_are(replies: list[Any]) -> list[Any]:
    return replies


def _demoted(replies: list[Any]) -> bool:
    """Whether a reply says its server is a replica now (a script's write refused too)."""
    return any(isinstance(r, ResponseError) and "READONLY" in str(r) for r in replies)


class ScriptPipe:
    """Sends concurrent script calls together: one round trip per batch.

    Calls that arrive while a batch is in flight wait for the next one. Each script still
    runs atomically on its own; only the round trips are shared.
    """

    def __init__(
        self, redis: Redis | RedisCluster, timeout: float = 10.0, wait: ReplicaWait | None = None
    ) -> None:
        self.redis = redis
        self.wait = wait
        #: A batch's answer may take the ``WAIT`` timeout on top of the usual one.
        self.timeout = timeout + (wait.timeout_ms / 1000 if wait else 0.0)
        #: Where a new connection goes: the master Sentinel names now, if behind Sentinel.
        self._master: Callable[[], Awaitable[Any]] | None = None
        #: Checked once: ``isinstance`` against redis-py's Cluster class runs
        #: ``typing``'s protocol check in Python (a per-batch cost).
        self._cluster = isinstance(redis, RedisCluster)
        if isinstance(redis, RedisCluster):
            self._options = dict(redis.get_connection_kwargs())
            connection_class: type[AbstractConnection] = (
                self._options.pop("connection_class", None) or Connection
            )
        else:
            pool = redis.connection_pool
            self._options = dict(pool.connection_kwargs)
            connection_class = pool.connection_class
            if isinstance(pool, SentinelConnectionPool):
                self._master = pool.get_master_address
        self._dial = Dial.of(connection_class, self._options)
        self._raw = self._dial is not None
        self._link: _Link | None = None
        self._node_links: dict[tuple[str, int], _Link] = {}
        self._reread_slots = False
        self._pending: list[tuple[tuple[Any, ...], asyncio.Future[Any], bool]] = []
        self._task: asyncio.Task[None] | None = None
        #: A batch is on its way by :meth:`_direct` (its link calls back), or a start of
        #: one is scheduled.
        self._direct_busy = False
        self._direct_idle: asyncio.Future[None] | None = None

    async def open_link(self, timeout: float) -> _Link | None:
        """A new connection of the same kind, for a caller's own use (a blocking read:
        :mod:`hub.store.stream_tail`); None where calls go through redis-py (an unknown
        connection class) and on a Cluster."""
        if self._dial is None or self._cluster:
            return None
        options = self._options
        if self._master is not None:
            host, port = await self._master()
            options = {**options, "host": host, "port": port}
        return await _Link.open(options, timeout, self._dial)

    async def run(
        self, script: Script, keys: Sequence[str], args: list[Any], *, replicated: bool = False
    ) -> Any:
        """Run ``script`` (by its SHA; loaded first on a fresh or flushed Redis);
        ``replicated``: answer only once :attr:`wait` is met (else NotReplicated)."""
        try:
            return await self.call_script(script, keys, args, replicated=replicated)
        except NoScriptError:
            await self.redis.script_load(script.source)
            return await self.call_script(script, keys, args, replicated=replicated)

    def call_script(
        self, script: Script, keys: Sequence[str], args: list[Any], *, replicated: bool = False
    ) -> asyncio.Future[Any]:
        """One ``EVALSHA`` of ``script``, as :meth:`run` but not loading it: the future
        fails with ``NoScriptError`` on a Redis that has not loaded it (nothing ran)."""
        return self.call("EVALSHA", script.sha, len(keys), *keys, *args, replicated=replicated)

    def call(self, *args: Any, replicated: bool = False) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((args, future, replicated and self.wait is not None))
        if self._task is None and not self._direct_busy:
            # Next loop pass, as the task started before: calls made meanwhile join.
            self._direct_busy = True
            loop.call_soon(self._direct)
        return future

    def _direct(self) -> None:
        """Send the pending calls as one batch on the sound connection there is, its
        replies handed out by the link's callback (:meth:`_answered`); anything else (no
        connection yet, one to replace, a Cluster, redis-py's path) goes to :meth:`_flush`'s
        task as before. One batch at a time either way."""
        link = self._link
        if not self._pending or self._task is not None:
            self._direct_idle_now()
            return
        if self._cluster or not self._raw or link is None or not link.sound():
            self._direct_idle_now()
            self._task = asyncio.create_task(self._flush())
            return
        batch, self._pending = self._pending, []
        flags = [flag for _, _, flag in batch]
        commands, read = self._waited([args for args, _, _ in batch], flags)
        try:
            link.send(
                [hiredis.pack_command(a) for a in commands],
                self.timeout,
                lambda outcome: self._answered(link, batch, read, outcome),
            )
        except Exception as exc:  # e.g. an argument hiredis cannot pack: nothing was sent
            link.close()
            self._link = None
            self._answered(link, batch, read, exc)

    def _answered(
        self,
        link: _Link,
        batch: list[tuple[tuple[Any, ...], asyncio.Future[Any], bool]],
        read: Callable[[list[Any]], list[Any]],
        outcome: list[Any] | Exception,
    ) -> None:
        if isinstance(outcome, Exception):
            link.close()  # replies may be out of step: never reuse this connection
            if self._link is link:
                self._link = None
            results = [_as_store_error(outcome)] * len(batch)
        else:
            if _demoted(outcome):  # a master turned replica: Sentinel names another
                link.close()
                if self._link is link:
                    self._link = None
            results = read(outcome)
        _hand_out(batch, results)
        self._direct_busy = False
        if self._pending:
            self._direct_busy = True
            self._direct()
        else:
            self._direct_idle_now()

    def _direct_idle_now(self) -> None:
        self._direct_busy = False
        idle, self._direct_idle = self._direct_idle, None
        if idle is not None and not idle.done():
            idle.set_result(None)

    def _waited(
        self, batch: list[tuple[Any, ...]], flags: list[bool]
    ) -> tuple[list[tuple[Any, ...]], Callable[[list[Any]], list[Any]]]:
        """``batch`` with the ``WAIT`` that its replicated calls need (if any), and how
        to read the replies of what is sent over one connection."""
        wait = self.wait
        if wait is None or not any(flags):
            return batch, _as_they_are

        def read(replies: list[Any]) -> list[Any]:
            *replies, acked = replies
            short = wait.shortfall(acked)
            if short is None:
                return replies
            return [
                short if flag and not isinstance(reply, Exception) else reply
                for reply, flag in zip(replies, flags, strict=True)
            ]

        return [*batch, wait.command()], read

    async def _send(
        self,
        batch: list[tuple[Any, ...]],
        flags: list[bool],
        answered: Callable[[list[int], list[Any]], None] | None = None,
    ) -> list[Any]:
        if self._cluster and self._raw:
            return await self._send_by_slot(cast(RedisCluster, self.redis), batch, flags, answered)
        commands, read = self._waited(batch, flags)
        if not self._raw:
            async with self.redis.pipeline(transaction=False) as pipe:
                for args in commands:
                    pipe.execute_command(*args)
                return read(list(await pipe.execute(raise_on_error=False)))
        if self._link is not None and not self._link.sound():
            self._link.close()
            self._link = None
        if self._link is None:
            self._link = await self.open_link(self.timeout)
            assert self._link is not None  # raw, and not a Cluster: see open_link
        try:
            replies = await self._link.run(
                [hiredis.pack_command(a) for a in commands], self.timeout
            )
        except BaseException:
            self._link.close()  # replies may be out of step: never reuse this connection
            self._link = None
            raise
        if _demoted(replies):  # a master turned replica: Sentinel names another
            self._link.close()
            self._link = None
        return read(replies)

    async def _send_by_slot(
        self,
        cluster: RedisCluster,
        batch: list[tuple[Any, ...]],
        flags: list[bool],
        answered: Callable[[list[int], list[Any]], None] | None = None,
    ) -> list[Any]:
        """The batch's replies, each call sent to the primary of its first key's slot.
        ``answered`` is called with each primary's share (indexes and their replies) as
        soon as that share is answered: a share that waits (a ``WAIT`` on a primary that a
        failover left without replicas) holds up no other primary's callers."""
        if self._reread_slots:  # a node failed: its slots may have a new primary
            self._reread_slots = False
            await cluster.nodes_manager.initialize()
        results: list[Any] = [None] * len(batch)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, args in enumerate(batch):
            try:
                node = cluster.get_node_from_key(args[3] if int(args[2]) else "")
            except Exception as exc:  # a slot without a primary (mid-failover): not sent
                node, results[i] = None, _as_store_error(exc)
            if node is None:
                if results[i] is None:
                    results[i] = RedisConnectionError("no Redis Cluster node serves that hash slot")
                self._reread_slots = True
                continue
            groups.setdefault((str(node.host), int(node.port)), []).append(i)

        async def run(address: tuple[str, int], indexes: list[int]) -> None:
            """One primary's share of the batch. Its failure is its calls' alone: the
            other primaries ran theirs (a publish there was stored and must be answered
            so, not with this node's error)."""
            try:
                await exchange(address, indexes)
            except Exception as exc:
                failed = _as_store_error(exc)
                for i in indexes:
                    results[i] = failed
            for i in indexes:
                reply = results[i]
                if isinstance(reply, ResponseError) and str(reply).startswith(("MOVED", "ASK")):
                    try:
                        results[i] = await cluster.execute_command(*batch[i])
                    except Exception as exc:  # handed to the caller like any reply error
                        results[i] = exc
                    else:
                        if flags[i] and self.wait is not None:  # WAIT went to the old owner
                            results[i] = self.wait.shortfall(None)
            if answered is not None:
                answered(indexes, [results[i] for i in indexes])

        async def exchange(address: tuple[str, int], indexes: list[int]) -> None:
            commands, read = self._waited([batch[i] for i in indexes], [flags[i] for i in indexes])
            try:
                link = self._node_links.get(address)
                if link is not None and not link.sound():
                    link.close()
                    link = None
                if link is None:
                    options = {**self._options, "host": address[0], "port": address[1]}
                    assert self._dial is not None  # raw: see _send
                    link = self._node_links[address] = await _Link.open(
                        options, self.timeout, self._dial
                    )
                try:
                    replies = await link.run(
                        [hiredis.pack_command(c) for c in commands], self.timeout
                    )
                except BaseException:
                    link.close()
                    self._node_links.pop(address, None)
                    raise
            except (OSError, EOFError, TimeoutError, RedisConnectionError):
                self._reread_slots = True
                raise
            if _demoted(replies):
                self._reread_slots = True
            for i, reply in zip(indexes, read(replies), strict=True):
                results[i] = reply

        await asyncio.gather(*(run(a, idx) for a, idx in groups.items()))
        return results

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []

                def answered(
                    indexes: list[int],
                    replies: list[Any],
                    batch: list[tuple[tuple[Any, ...], asyncio.Future[Any], bool]] = batch,
                ) -> None:
                    _hand_out([batch[i] for i in indexes], replies)

                try:
                    results = await self._send(
                        [args for args, _, _ in batch], [flag for _, _, flag in batch], answered
                    )
                except Exception as exc:  # handed to every waiting caller
                    results = [_as_store_error(exc)] * len(batch)
                _hand_out(batch, results)
        finally:
            self._task = None

    async def close(self) -> None:
        if self._direct_busy:
            loop = asyncio.get_running_loop()
            idle = self._direct_idle = self._direct_idle or loop.create_future()
            with contextlib.suppress(Exception):
                await idle
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        if self._link is not None:
            self._link.close()
            self._link = None
        for link in self._node_links.values():
            link.close()
        self._node_links.clear()
