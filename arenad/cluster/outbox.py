"""The cluster's notifications: every replica computes them, only the leader publishes them.

Every replica applies the same records, so every replica sees the same rating changes, with the
same journal sequence numbers. Each keeps the newest ``[cluster] outbox`` of them (chosen by
``[notify]``'s ``changes`` and ``scopes``); the lease holder publishes them into the
``<stream>_NOTIFY`` stream on ``<prefix>-notify.<server>`` with the message id
``<seq>:<scope>:<player>``. When a replica takes the lease it publishes its whole outbox again:
whatever the old leader had published already has the same id, and JetStream keeps it once
(within ``duplicate_window``), so a takeover loses none of the changes that fell between the old
leader's last publish and its death, and publishes none twice. The payload is the MQTT
notifier's (``arenad.daemon.notify.payload_of``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

import nats.errors
import nats.js.errors
import structlog

from arenad.cluster.link import Link, headers, notify_prefix
from arenad.cluster.wire import server_token
from arenad.daemon.config_cluster import ClusterSettings
from arenad.daemon.config_sources import NotifySettings
from arenad.daemon.notify import ChangeFilter, RatingChange, payload_of

log = structlog.get_logger("arenad.cluster")

#: Publishes in flight at once.
WINDOW = 256

Out = tuple[str, str, bytes, float]  # message id, subject, payload, time.monotonic() when offered


class Outbox:
    """``offer`` on the engine task (O(1), never raises); ``run`` publishes while leader."""

    def __init__(
        self,
        link: Link,
        settings: ClusterSettings,
        notify: NotifySettings,
        leader: Callable[[], bool],
    ) -> None:
        self.link = link
        self.settings = settings
        self.filter = ChangeFilter(notify, True)
        self.leader = leader
        self.kept: deque[Out] = deque(maxlen=settings.outbox)  # the newest, for a takeover
        self.pending: deque[Out] = deque(maxlen=settings.outbox)  # not yet published by this node
        self.published = 0  # publishes the stream stored
        self.duplicates = 0  # publishes the stream already had (a takeover's replay)
        self.failures = 0
        self._wake = asyncio.Event()

    def offer(self, change: RatingChange) -> None:
        if not self.filter.wants(change):
            return
        item = (
            f"{change.seq}:{change.scope}:{change.player}",
            f"{notify_prefix(self.settings)}.{server_token(change.server)}",
            payload_of(change),
            time.monotonic(),
        )
        self.kept.append(item)
        if self.leader():
            self.pending.append(item)
            self._wake.set()

    def took_lease(self, held: bool) -> None:
        """The lease changed hands: a new leader publishes everything it kept."""
        if held:
            # Only what the stream can still recognise: an id older than the duplicate window
            # would be stored again.
            horizon = time.monotonic() - self.settings.duplicate_window
            self.pending = deque((o for o in self.kept if o[3] >= horizon), maxlen=self.settings.outbox)
            self._wake.set()
        else:
            self.pending.clear()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not self.pending:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
                continue
            await self._send()

    async def _send(self) -> None:
        js = self.link.js
        if js is None:
            return
        if not self.leader():  # fenced or lost since offered: the next holder publishes them
            self.pending.clear()
            return
        batch = [self.pending.popleft() for _ in range(min(WINDOW, len(self.pending)))]
        try:
            futures = [
                await js.publish_async(subject, payload, headers=headers(msg_id))
                for msg_id, subject, payload, _at in batch
            ]
            acks = await asyncio.wait_for(asyncio.gather(*futures), self.settings.publish_timeout)
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
            self.failures += 1
            log.warning("notify_publish_failed", error=repr(e), changes=len(batch))
            if self.leader():
                self.pending.extendleft(reversed(batch))  # again, with the same ids
            await asyncio.sleep(0.5)
            return
        dup = sum(1 for a in acks if getattr(a, "duplicate", False))
        self.duplicates += dup
        self.published += len(acks) - dup
