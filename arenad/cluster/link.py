"""The one connection a node keeps to the NATS cluster, and the JetStream objects it needs.

``Link.open`` connects (nats-py reconnects by itself from then on, to any server of the list)
and makes sure the objects exist, creating those that do not, with retries while JetStream
elects its meta leader:

* the records' stream ``[cluster] stream`` on ``<prefix>.>`` (R ``stream_replicas``, file
  storage, ``duplicate_window``, ``max_age``): the cluster's journal;
* the notifications' stream ``<stream>_NOTIFY`` on ``<prefix>-notify.>``: what the leader
  publishes, deduplicated by message id;
* two key-value buckets: ``<stream>_lease`` (the leader lease; its TTL is ``lease_ttl``) and
  ``<stream>_nodes`` (each node's heartbeat for ``arenad cluster status``). Named after the
  stream, so two clusters sharing NATS servers (a test and a production one) never share a lease.

Two nodes that create the same object at once get the same object: JetStream answers a create
of an identical configuration with the existing one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from typing import Any

import nats
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.kv import KeyValue

from arenad.daemon.config_cluster import ClusterSettings
from arenad.errors import ArenadError

log = structlog.get_logger("arenad.cluster")

#: Seconds a node's heartbeat stays in ``arenad_nodes`` after it stops beating.
NODE_TTL = 30.0
#: How long ``open`` keeps trying before it gives up (a cluster still electing, a node down).
OPEN_TIMEOUT = 60.0


class ClusterError(ArenadError):
    """The NATS cluster cannot be reached or refused an operation."""


def node_name(settings: ClusterSettings) -> str:
    return settings.node or f"{socket.gethostname()}-{os.getpid()}"


def notify_prefix(settings: ClusterSettings) -> str:
    return f"{settings.subject_prefix}-notify"


def lease_bucket(settings: ClusterSettings) -> str:
    return f"{settings.stream}_lease"


def nodes_bucket(settings: ClusterSettings) -> str:
    return f"{settings.stream}_nodes"


class Link:
    """A connection, its JetStream context, and the cluster's stream and buckets."""

    def __init__(self, settings: ClusterSettings, name: str) -> None:
        self.settings = settings
        self.name = name
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self.lease_kv: KeyValue | None = None
        self.nodes_kv: KeyValue | None = None
        self.connected = False
        self.reconnects = 0
        self._closing = False
        self._create = True

    async def open(self, timeout: float = OPEN_TIMEOUT, *, create: bool = True) -> None:
        """Connect and find (``create``: make) the stream and buckets; ``ClusterError`` when
        NATS does not answer in ``timeout`` or an existing object contradicts the settings."""
        s = self.settings
        self._create = create

        async def disconnected() -> None:
            self.connected = False
            if not self._closing:
                log.warning("nats_disconnected", node=self.name)

        async def reconnected() -> None:
            self.connected = True
            self.reconnects += 1
            log.info("nats_reconnected", node=self.name, server=str(self.nc.connected_url) if self.nc else "")

        async def error(e: Exception) -> None:
            log.debug("nats_error", node=self.name, error=str(e))

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while self.nc is None:
            try:
                self.nc = await nats.connect(
                    servers=list(s.servers),
                    name=f"arenad-{self.name}",
                    connect_timeout=2,
                    reconnect_time_wait=0.5,
                    max_reconnect_attempts=-1,
                    ping_interval=5,
                    max_outstanding_pings=3,
                    disconnected_cb=disconnected,
                    reconnected_cb=reconnected,
                    error_cb=error,
                )
            except (OSError, nats.errors.Error) as e:
                last = e
                if time.monotonic() > deadline:
                    raise ClusterError(f"no NATS server of {list(s.servers)} answers: {e}") from e
                await asyncio.sleep(0.5)
        self.connected = True
        self.js = self.nc.jetstream(timeout=s.publish_timeout)
        while True:
            try:
                await self._objects()
                return
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
                last = e
                if time.monotonic() > deadline:
                    raise ClusterError(f"JetStream is not available: {last}") from e
                await asyncio.sleep(0.5)

    async def _objects(self) -> None:
        s = self.settings
        assert self.js is not None
        # The records' stream and the notifications' stream, alike but for name and subjects.
        for name, prefix in ((s.stream, s.subject_prefix), (f"{s.stream}_NOTIFY", notify_prefix(s))):
            await self._stream(
                StreamConfig(
                    name=name,
                    subjects=[f"{prefix}.>"],
                    retention=RetentionPolicy.LIMITS,
                    storage=StorageType.FILE,
                    num_replicas=s.stream_replicas,
                    duplicate_window=s.duplicate_window,
                    max_age=s.max_age or None,
                )
            )
        self.lease_kv = await self._bucket(lease_bucket(s), s.lease_ttl)
        self.nodes_kv = await self._bucket(nodes_bucket(s), NODE_TTL)
        # The lease's TTL is the bucket's, fixed when it was made: a holder renewing on another
        # TTL than the bucket's could see its key lapse while it still acts (two leaders).
        ttl = (await self.lease_kv.status()).ttl
        if ttl is not None and abs(float(ttl) - s.lease_ttl) > 1e-3:
            raise ClusterError(
                f"[cluster] lease_ttl is {s.lease_ttl} s but bucket {lease_bucket(s)} lapses keys after "
                f"{ttl} s: give every replica the same lease_ttl, or delete the bucket to make it anew"
            )

    async def _stream(self, config: StreamConfig) -> None:
        assert self.js is not None
        try:
            await self.js.stream_info(str(config.name))
        except nats.js.errors.NotFoundError:
            if not self._create:
                raise ClusterError(f"no stream {config.name} on {list(self.settings.servers)}") from None
            with contextlib.suppress(nats.js.errors.BadRequestError):  # created meanwhile by a peer
                await self.js.add_stream(config)
            await self.js.stream_info(str(config.name))

    async def _bucket(self, name: str, ttl: float) -> KeyValue:
        assert self.js is not None
        try:
            return await self.js.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            if not self._create:
                raise ClusterError(f"no bucket {name} on {list(self.settings.servers)}") from None
            with contextlib.suppress(nats.js.errors.BadRequestError):
                await self.js.create_key_value(
                    KeyValueConfig(
                        bucket=name, history=1, ttl=ttl, replicas=min(3, self.settings.stream_replicas)
                    )
                )
            return await self.js.key_value(name)

    async def stream_last_seq(self) -> int:
        """The records stream's last sequence number (what a replica's lag is measured to)."""
        assert self.js is not None
        info = await self.js.stream_info(self.settings.stream)
        return int(info.state.last_seq)

    async def close(self) -> None:
        self._closing = True
        if self.nc is not None:
            with contextlib.suppress(Exception):  # closing a connection already lost
                await self.nc.drain()
            self.nc = None
            self.connected = False


def headers(msg_id: str) -> dict[str, Any]:
    return {"Nats-Msg-Id": msg_id}
