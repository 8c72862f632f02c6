"""Throwaway Redis Cluster and Sentinel sets for the test suite and the benchmark.

- `RedisCluster`: 3 masters and 3 replicas (``redis-server --cluster-enabled yes``, joined by
  ``redis-cli --cluster create ... --cluster-replicas 1``), a short ``cluster-node-timeout`` so
  that a killed master's replica takes over within a second or two.
- `SentinelSet`: one master, one replica and three sentinels (``redis-server --sentinel``)
  watching it under the name ``mymaster``, quorum 2.

Every process listens on 127.0.0.1 on a free port (a cluster node's bus port, its port + 10000,
free too), in a temporary directory, persistence off. One of each is shared by the session
(`cluster`, `sentinels`; each test's store on a key prefix of its own); a test that kills a
master starts its own set. Waits are on conditions (the cluster's state, the master the
sentinels report), each bounded.
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from . import redis_server

SKIP_REASON = (
    "redis-server / redis-cli not found; install the Debian package `redis-server` (.ci/run "
    "does) to run the Redis Cluster and Sentinel tests"
)
_WAIT_SECONDS = 30.0
MASTER_NAME = "mymaster"


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(bus: bool = False) -> int:
    """A free loopback port; with ``bus``, one whose port + 10000 (a cluster node's bus) is free
    too.

    A cluster node's pair is drawn below the kernel's ephemeral range (32768 and up): a port
    the kernel hands out to an outgoing connection, or to another test's ``bind(0)``, can then
    never take a node's bus port between this check and the node's start.
    """
    for _ in range(200):
        if bus:
            port = random.randrange(12000, 22700)
            if _bindable(port) and _bindable(port + 10000):
                return port
            continue
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            found: int = s.getsockname()[1]
        return found
    raise RuntimeError("no free port pair for a cluster node")


def wait_for(condition: Callable[[], bool], what: str, seconds: float = _WAIT_SECONDS) -> None:
    """Return once ``condition()`` holds (checked every 20 ms); raise after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _executables() -> tuple[str, str]:
    server, cli = redis_server.binary(), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.skip(SKIP_REASON)
    return server, cli


def _ask(port: int, *command: str) -> Any:
    """One command's reply from the server on ``port`` (``None`` when it does not answer)."""
    import redis

    client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
    try:
        return client.execute_command(*command)
    except redis.RedisError:
        return None
    finally:
        client.close()


def _replication(port: int) -> dict[str, Any]:
    """``INFO replication`` of the server on ``port``, parsed (empty when it does not answer)."""
    reply = _ask(port, "INFO", "replication")
    return reply if isinstance(reply, dict) else {}


class _Process:
    """One ``redis-server`` process (a node, a master, a replica or a sentinel)."""

    def __init__(self, executable: str, root: Path, args: list[str], port: int) -> None:
        self.executable, self.root, self.args, self.port = executable, root, args, port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [self.executable, *self.args],
            cwd=self.root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, f"redis on port {self.port}", 10)

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            log = self.root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"redis on port {self.port} exited:\n{tail}")
        return _ask(self.port, "PING") is True

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None


def _common(port: int, root: Path) -> list[str]:
    return [
        "--bind", "127.0.0.1", "--port", str(port), "--dir", str(root),
        "--save", "", "--appendonly", "no", "--daemonize", "no",
        "--logfile", str(root / "log"),
        "--repl-diskless-sync-delay", "0",  # a replica syncs at once, not after 5 s
    ]  # fmt: skip


class RedisCluster:
    """3 masters and 3 replicas on loopback; `start`, `kill_master`, `stop`."""

    def __init__(self) -> None:
        server, self.cli = _executables()
        self.root = Path(tempfile.mkdtemp(prefix="failover-cluster-"))
        self.nodes: list[_Process] = []
        for i in range(6):
            port = free_port(bus=True)
            root = self.root / f"n{i}"
            args = [
                *_common(port, root),
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(root / "nodes.conf"),
                "--cluster-node-timeout", "1000",
                # A replica takes over however long ago it last heard from its master.
                "--cluster-replica-validity-factor", "0",
            ]  # fmt: skip
            self.nodes.append(_Process(server, root, args, port))
        self.ports = [n.port for n in self.nodes]
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:3])

    def start(self) -> RedisCluster:
        """Start the nodes, join them (each master gets a replica), and wait for every slot."""
        for node in self.nodes:
            node.start()
        done = subprocess.run(
            [self.cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}")
        wait_for(self._settled, "the cluster to cover every slot, a replica per master")
        return self

    def _settled(self) -> bool:
        alive = [n.port for n in self.nodes if n.process is not None]
        for port in alive:
            info = _ask(port, "CLUSTER", "INFO")
            if info is None or b"cluster_state:ok" not in info:
                return False
        return len(self.masters()) == 3 and all(self.replicas_of(m) for m in self.masters())

    def _nodes(self) -> list[list[str]]:
        for node in self.nodes:
            if node.process is not None:
                reply = _ask(node.port, "CLUSTER", "NODES")
                if reply is not None:
                    text = reply.decode() if isinstance(reply, bytes) else str(reply)
                    return [line.split() for line in text.splitlines() if line.strip()]
        return []

    def masters(self) -> list[int]:
        """The ports of the masters serving slots, as `CLUSTER NODES` reports them."""
        return sorted(
            int(f[1].split("@")[0].rsplit(":", 1)[1])
            for f in self._nodes()
            if "master" in f[2] and "fail" not in f[2] and len(f) > 8
        )

    def replicas_of(self, port: int) -> list[int]:
        """The ports of the live replicas of the master on ``port``."""
        fields = self._nodes()
        ids = {int(f[1].split("@")[0].rsplit(":", 1)[1]): f[0] for f in fields}
        return [
            int(f[1].split("@")[0].rsplit(":", 1)[1])
            for f in fields
            if "slave" in f[2] and "fail" not in f[2] and f[3] == ids.get(port)
        ]

    def kill_master(self, port: int | None = None) -> tuple[int, int]:
        """Kill a master (``SIGKILL``) and wait until its replica has taken its slots over and
        every live node says the cluster is whole; the old and the new master's ports."""
        old = port if port is not None else self.masters()[0]
        successors = self.replicas_of(old)
        self.node(old).kill()
        wait_for(
            lambda: any(s in self.masters() for s in successors) and self._whole(),
            "a replica to take over the killed master's slots",
        )
        new = next(s for s in successors if s in self.masters())
        return old, new

    def _whole(self) -> bool:
        return all(
            b"cluster_state:ok" in (_ask(n.port, "CLUSTER", "INFO") or b"")
            for n in self.nodes
            if n.process is not None
        )

    def node(self, port: int) -> _Process:
        """The node on ``port``."""
        return next(n for n in self.nodes if n.port == port)

    def stop(self) -> None:
        """Kill every node and remove the directory."""
        try:
            for node in self.nodes:
                node.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class SentinelSet:
    """A master, its replica and three sentinels watching it (quorum 2); `start`,
    `kill_master`, `stop`."""

    def __init__(self) -> None:
        server, _ = _executables()
        self.root = Path(tempfile.mkdtemp(prefix="failover-sentinel-"))
        master_port, replica_port = free_port(), free_port()
        self.master = _Process(
            server, self.root / "master", _common(master_port, self.root / "master"), master_port
        )
        replica_args = [
            *_common(replica_port, self.root / "replica"),
            "--replicaof", "127.0.0.1", str(master_port),
        ]  # fmt: skip
        self.replica = _Process(server, self.root / "replica", replica_args, replica_port)
        self.sentinels: list[_Process] = []
        for i in range(3):
            port = free_port()
            root = self.root / f"s{i}"
            root.mkdir(parents=True)
            config = root / "sentinel.conf"  # a sentinel rewrites its configuration file
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {root}\nlogfile {root / 'log'}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                f"sentinel failover-timeout {MASTER_NAME} 2000\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            self.sentinels.append(_Process(server, root, [str(config), "--sentinel"], port))
        self.url = (
            "redis+sentinel://"
            + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
            + f"/{MASTER_NAME}"
        )

    def start(self) -> SentinelSet:
        """Start the master, the replica (waiting until it is in sync) and the sentinels
        (waiting until each knows the replica and the other sentinels)."""
        self.master.start()
        self.replica.start()
        wait_for(
            lambda: _replication(self.replica.port).get("master_link_status") == "up",
            "the replica to sync",
        )
        for sentinel in self.sentinels:
            sentinel.start()
        wait_for(self._watching, "the sentinels to know the replica and each other")
        return self

    def _watching(self) -> bool:
        for sentinel in self.sentinels:
            reply = _ask(sentinel.port, "SENTINEL", "MASTER", MASTER_NAME)
            if not isinstance(reply, dict):  # redis-py parses the reply
                return False
            fields = {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
            if (
                int(fields.get("num-slaves", 0)) < 1
                or int(fields.get("num-other-sentinels", 0)) < 2
            ):
                return False
        return True

    def master_port(self) -> int | None:
        """The master's port as a majority of the live sentinels report it."""
        seen: dict[int, int] = {}
        for sentinel in self.sentinels:
            reply = _ask(sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
            if reply:
                port = int(reply[1])
                seen[port] = seen.get(port, 0) + 1
        best = max(seen.items(), key=lambda item: item[1], default=None)
        return best[0] if best is not None and best[1] >= 2 else None

    def kill_master(self) -> tuple[int, int]:
        """Kill the master (``SIGKILL``) and wait until the sentinels report the replica as the
        master and it accepts writes; the old and the new master's ports."""
        old = self.master.port
        self.master.kill()
        new = self.replica.port
        wait_for(
            lambda: self.master_port() == new and _replication(new).get("role") == "master",
            "the sentinels to promote the replica",
        )
        return old, new

    def stop(self) -> None:
        """Kill every process and remove the directory."""
        try:
            for process in [*self.sentinels, self.replica, self.master]:
                process.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


_lock = threading.Lock()
_shared: dict[str, Any] = {}


def _session(kind: str, make: Callable[[], Any]) -> Any:
    with _lock:
        if kind not in _shared:
            started = make()
            try:
                started.start()
            except BaseException:
                started.stop()
                raise
            _shared[kind] = started
        return _shared[kind]


def cluster() -> RedisCluster:
    """The session's cluster, started on first use; skips the calling test without binaries."""
    found: RedisCluster = _session("cluster", RedisCluster)
    return found


def sentinels() -> SentinelSet:
    """The session's sentinel set, started on first use; skips without binaries."""
    found: SentinelSet = _session("sentinel", SentinelSet)
    return found


def stop() -> None:
    """Stop the session's cluster and sentinel set, if they were started."""
    with _lock:
        for started in _shared.values():
            started.stop()
        _shared.clear()
