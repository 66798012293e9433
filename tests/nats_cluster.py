"""A real 3-node ``nats-server`` cluster with JetStream on free loopback ports, for the cluster tests.

Each node is its own process with its own store directory, client port and route port; the routes
name every other node, so the three form one cluster (``arena``) and elect a JetStream meta
leader. ``start`` returns once every node answers its monitoring ``/healthz?js-enabled-only=true``
and the meta leader is known; ``stop_node`` / ``start_node`` take one node down and bring it back
on the same ports and store (the fault tests); ``close`` stops every node, bounded in time.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
START_TIMEOUT = 30.0


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bound together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Node:
    name: str
    port: int
    cluster_port: int
    http_port: int
    store: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


@dataclass
class NatsCluster:
    root: Path
    size: int = 3
    nodes: list[Node] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def start(self) -> NatsCluster:
        if not Path(NATS_SERVER).exists():
            raise RuntimeError("nats-server is not installed (scripts/test installs Debian's nats-server)")
        ports = free_ports(3 * self.size)
        for k in range(self.size):
            self.nodes.append(
                Node(
                    name=f"n{k + 1}",
                    port=ports[3 * k],
                    cluster_port=ports[3 * k + 1],
                    http_port=ports[3 * k + 2],
                    store=self.root / f"n{k + 1}",
                    log=self.root / f"n{k + 1}.log",
                )
            )
        for node in self.nodes:
            self.start_node(node, wait=False)
        for node in self.nodes:
            self._wait_healthy(node)
        return self

    def start_node(self, node: Node, *, wait: bool = True) -> None:
        node.store.mkdir(parents=True, exist_ok=True)
        routes = ",".join(f"nats://127.0.0.1:{n.cluster_port}" for n in self.nodes if n is not node)
        args = [
            NATS_SERVER,
            "-a", "127.0.0.1",
            "-p", str(node.port),
            "-m", str(node.http_port),
            "-n", node.name,
            "-js",
            "-sd", str(node.store),
        ]  # fmt: skip
        if self.size > 1:  # one node alone is a plain JetStream server (the unit tests')
            args += [
                "--cluster_name",
                "arena",
                "--cluster",
                f"nats://127.0.0.1:{node.cluster_port}",
                "--routes",
                routes,
            ]
        with node.log.open("ab") as out:
            node.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        if wait:
            self._wait_healthy(node)

    def _wait_healthy(self, node: Node) -> None:
        """Until the node's JetStream answers healthy (it has a meta leader), bounded."""
        deadline = time.monotonic() + START_TIMEOUT
        url = f"http://127.0.0.1:{node.http_port}/healthz?js-enabled-only=true"
        last = ""
        while time.monotonic() < deadline:
            assert node.proc is not None
            if node.proc.poll() is not None:
                raise RuntimeError(f"nats-server {node.name} exited:\n{node.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200 and (self.size == 1 or self._meta_leader(node)):
                        return
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.1)
        raise RuntimeError(f"nats-server {node.name} not healthy in {START_TIMEOUT} s ({last})")

    @staticmethod
    def _meta_leader(node: Node) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/jsz", timeout=2) as r:
                info = json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return False
        return bool((info.get("meta_cluster") or {}).get("leader"))

    def stop_node(self, node: Node, *, kill: bool = False) -> None:
        if node.proc is not None and node.proc.poll() is None:
            if kill:
                node.proc.kill()
            else:
                node.proc.terminate()
            try:
                node.proc.wait(15)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(5)
        node.proc = None

    def close(self) -> None:
        for node in self.nodes:
            self.stop_node(node)
