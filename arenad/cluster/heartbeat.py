"""Each node's heartbeat in the ``<stream>_nodes`` bucket, and what ``arenad cluster status`` reads.

Every node puts one small JSON document under its own name about once a second: its role, the
stream position it has applied (a replica) or published to (an ingest), its lag behind the
stream, whether it holds the leader lease, its version. The bucket's TTL (``link.NODE_TTL``)
removes a node that stopped beating; ``status`` lists what is there, with the lease holder and
the stream's own state, so an operator sees the whole cluster from any machine that reaches NATS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import nats.errors
import nats.js.errors
import structlog

from arenad import __version__
from arenad.cluster.link import Link, lease_bucket, nodes_bucket
from arenad.daemon.config_cluster import ClusterSettings

log = structlog.get_logger("arenad.cluster")

#: Seconds between two heartbeats.
BEAT = 1.0


async def beat(link: Link, role: str, figures: Callable[[], dict[str, Any]], stop: asyncio.Event) -> None:
    """Put this node's document every ``BEAT`` seconds until ``stop``; errors only skip a beat."""
    while not stop.is_set():
        kv = link.nodes_kv
        if kv is not None:
            doc = {"node": link.name, "role": role, "version": __version__, "time": time.time(), **figures()}
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
                await kv.put(link.name, json.dumps(doc).encode())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), BEAT)


async def status(settings: ClusterSettings, timeout: float = 10.0) -> dict[str, Any]:
    """The cluster as its heartbeats, its lease and its stream describe it (``arenad cluster status``)."""
    link = Link(settings, "status")
    await link.open(timeout, create=False)  # a typo in the stream's name must not make a new one
    try:
        assert link.js is not None and link.nodes_kv is not None and link.lease_kv is not None
        info = await link.js.stream_info(settings.stream)
        last = int(info.state.last_seq)
        nodes: list[dict[str, Any]] = []
        with contextlib.suppress(nats.js.errors.NoKeysError):
            for key in sorted(await link.nodes_kv.keys()):
                with contextlib.suppress(nats.js.errors.KeyNotFoundError, ValueError):
                    entry = await link.nodes_kv.get(key)
                    if entry.value:
                        doc = json.loads(entry.value)
                        if "position" in doc:
                            doc["lag"] = max(0, last - int(doc["position"]))
                        doc["age"] = round(time.time() - float(doc.get("time", 0)), 1)
                        nodes.append(doc)
        holder = None
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            entry = await link.lease_kv.get("leader")
            holder = entry.value.decode() if entry.value else None
        cluster = info.cluster
        return {
            "stream": {
                "name": settings.stream,
                "messages": int(info.state.messages),
                "first_seq": int(info.state.first_seq),
                "last_seq": last,
                "bytes": int(info.state.bytes),
                "leader": cluster.leader if cluster else None,
                "replicas": [
                    {"name": r.name, "current": r.current, "lag": r.lag} for r in (cluster.replicas or [])
                ]
                if cluster
                else [],
            },
            "lease": {"bucket": lease_bucket(settings), "holder": holder},
            "nodes": nodes,
            "nodes_bucket": nodes_bucket(settings),
        }
    finally:
        await link.close()


def format_status(doc: dict[str, Any]) -> str:
    """``status``'s answer as the table ``arenad cluster status`` prints."""
    st = doc["stream"]
    lines = [
        f"stream {st['name']}: {st['messages']} messages, seq {st['first_seq']}..{st['last_seq']}, "
        f"{st['bytes']} bytes; stream leader {st['leader']}",
    ]
    for r in st["replicas"]:
        lines.append(f"  stream replica {r['name']}: current={r['current']} lag={r['lag']}")
    lines.append(f"leader lease: {doc['lease']['holder'] or '(none)'}")
    lines.append(f"{'node':<24} {'role':<8} {'position':>10} {'lag':>8} {'leader':>6} {'age s':>6}")
    for n in doc["nodes"]:
        lines.append(
            f"{n['node']:<24} {n['role']:<8} {n.get('position', ''):>10} {n.get('lag', ''):>8} "
            f"{'yes' if n.get('leader') else '':>6} {n['age']:>6}"
        )
    return "\n".join(lines)
