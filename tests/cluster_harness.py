"""arenad nodes of a cluster (ingest, replicas) as real processes, and reading the stream back.

``Nodes`` writes each node's
``[cluster]`` config (one stream and subject prefix per test) and starts ``arenad run`` processes
on it; ``stream_records`` reads the whole stream back with nats-py, decoded with the replicas'
own decoder, for the checks against ``arenad replay``. Every process and server is stopped when
the test ends, whatever happened.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
from daemon_harness import DaemonProcess
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats_cluster import NatsCluster

from arenad.cluster.wire import WireReject, decode_records


class Nodes:
    """arenad processes of one cluster; ``close`` kills whatever still runs."""

    def __init__(self, root: Path, cluster: NatsCluster) -> None:
        self.root = root
        self.cluster = cluster
        tag = uuid.uuid4().hex[:8]
        self.stream = f"T{tag}"
        self.prefix = f"t{tag}"
        self.procs: list[DaemonProcess] = []

    def config(
        self, name: str, role: str, extra: str = "", cluster: str = "", checkpoint: float = 1.0
    ) -> Path:
        path = self.root / f"{name}.toml"
        path.write_text(
            f"""[cluster]
role = "{role}"
servers = {json.dumps(self.cluster.urls)}
node = "{name}"
stream = "{self.stream}"
subject_prefix = "{self.prefix}"
lease_ttl = 3.0
publish_timeout = 3.0
{cluster}
[daemon]
checkpoint_interval = {checkpoint}
{extra}
""",
            encoding="utf-8",
        )
        return path

    def start(
        self,
        name: str,
        role: str,
        *,
        extra: str = "",
        cluster: str = "",
        mqtt: str | None = None,
        checkpoint: float = 1.0,
    ) -> DaemonProcess:
        proc = DaemonProcess(self.root / name, self.config(name, role, extra, cluster, checkpoint))
        self.procs.append(proc)
        return proc.start(udp="127.0.0.1:0" if role == "ingest" else "off", mqtt=mqtt)

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()


def stream_messages(
    urls: list[str], stream: str, timeout: float = 45.0
) -> list[tuple[str, bytes, dict[str, str]]]:
    """Every message of ``stream`` in order: (subject, body, headers). ``timeout`` bounds the
    whole read; a JetStream request that times out costs 5 s of it, and after a server is
    stopped the leaders' election took over 20 s on a loaded 2-core machine."""

    async def read() -> list[tuple[str, bytes, dict[str, str]]]:
        nc = await nats.connect(servers=urls, connect_timeout=5)
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + timeout
            while True:  # after a server died, JetStream answers again once it has elected leaders
                try:
                    info = await js.stream_info(stream)
                    sub = await js.pull_subscribe(
                        ">", stream=stream, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
                    )
                    break
                except (nats.errors.TimeoutError, nats.js.errors.Error):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            last = int(info.state.last_seq)
            out: list[tuple[str, bytes, dict[str, str]]] = []
            if last == 0:
                return out
            seen = 0
            while seen < last and time.monotonic() < deadline:
                try:
                    batch = await sub.fetch(500, timeout=5)
                except nats.errors.TimeoutError:
                    continue  # a stream leader being elected: ask again
                for msg in batch:
                    seen = int(msg.metadata.sequence.stream)
                    out.append((msg.subject, msg.data, dict(msg.headers or {})))
            assert seen >= last, f"read {seen} of {last} messages of {stream} in {timeout} s"
            return out
        finally:
            await nc.close()

    return asyncio.run(read())


def stream_leader(urls: list[str], stream: str) -> str:
    """The name of the NATS server leading ``stream`` now."""

    async def ask() -> str:
        nc = await nats.connect(servers=urls, connect_timeout=5)
        try:
            info = await nc.jetstream().stream_info(stream)
            assert info.cluster is not None and info.cluster.leader
            return str(info.cluster.leader)
        finally:
            await nc.close()

    return asyncio.run(ask())


def stream_kills(urls: list[str], stream: str) -> list[dict[str, Any]]:
    """The kills in the stream, in stream order, as the JSON-lines events ``arenad replay`` reads."""
    kills: list[dict[str, Any]] = []
    for subject, body, _headers in stream_messages(urls, stream):
        if not subject.endswith(".kills"):
            continue
        records = decode_records(body)
        if isinstance(records, WireReject):
            continue
        for rec in records:
            assert isinstance(rec, tuple)
            _seq, t, attacker, victim, server, event_id = rec
            kills.append({"t": t, "attacker": attacker, "victim": victim, "server": server, "id": event_id})
    return kills


def offline_ladder(tmp_path: Path, evs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``arenad replay`` of ``evs``: player -> state row."""
    src = tmp_path / f"replay-{time.monotonic_ns()}.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in evs))
    out = src.with_suffix(".state")
    subprocess.run(
        [sys.executable, "-m", "arenad", "replay", "--out", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return {row["player"]: row for row in map(json.loads, out.read_text().splitlines())}


def assert_ladder_equals_replay(replica: DaemonProcess, offline: dict[str, dict[str, Any]]) -> None:
    rows = replica.ladder()
    assert {r["player"] for r in rows} == set(offline)
    for row in rows:
        ref = offline[row["player"]]
        assert row["mu"] == ref["mu"], row["player"]  # the same records in the same order: exact
        assert row["sigma"] == ref["sigma"], row["player"]
        assert row["tier"] == ref["tier"], row["player"]


def newest_checkpoint(state_dir: Path) -> Path:
    found = sorted(state_dir.glob("checkpoint-*.ckpt"))
    assert found, f"no checkpoint in {state_dir}"
    return found[-1]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` (bounded); returns the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def settled(replica: DaemonProcess, events: int) -> Callable[[], bool]:
    """The replica has decided on ``events`` kills (applied or filtered)."""

    def done() -> bool:
        s = replica.stats()
        got = int(s["applied"]) + int(s["filtered"])
        if not replica.alive():
            raise AssertionError(f"{replica.state_dir.name} exited:\n" + "\n".join(replica.log_lines[-30:]))
        return got >= events

    return done
