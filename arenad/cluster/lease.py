"""The leader lease: one key in the ``<stream>_lease`` bucket, held by at most one replica.

The bucket's TTL is ``[cluster] lease_ttl``: a key not written again within it lapses. The
holder writes it again every third of the TTL with a compare-and-set on its own revision
(``update(last=rev)``), so a holder that lost the key (it lapsed while the holder was cut off, and
another took it) learns so at its next write instead of overwriting the new holder. A candidate
takes a free key with ``create``, which succeeds for exactly one of several at once.

Fencing by time: a holder that could not renew for ``FENCE`` of the TTL stops acting as leader
before the key can lapse on the servers, so two replicas never both act for longer than the
clocks' drift. A replica stopping cleanly deletes its key at once (``release``): the next one
takes over at its next try instead of after the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable

import nats.errors
import nats.js.errors
import structlog

from arenad.cluster.link import Link

log = structlog.get_logger("arenad.cluster")

KEY = "leader"
#: Share of the TTL after the last renewal at which a holder stops acting as leader.
FENCE = 0.8


class Lease:
    """This node's view of the leader lease; ``run`` keeps trying to hold it."""

    def __init__(
        self,
        link: Link,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.link = link
        #: Whether this node may take a free lease: a replica that is still catching up would
        #: announce stale changes (and answer stale chat) over rcon, which cannot deduplicate.
        self.ready = ready
        self.ttl = ttl
        self.clock = clock
        self.on_change = on_change
        self.changes = 0  # times this node took or lost the lease
        self._held = False
        self._rev: int | None = None
        self._renewed = -math.inf

    @property
    def leader(self) -> bool:
        """Whether this node may act as the leader now (held, and renewed within the fence)."""
        return self._held and self.clock() - self._renewed < FENCE * self.ttl

    def _set(self, held: bool) -> None:
        if held != self._held:
            self._held = held
            self.changes += 1
            log.info("lease_taken" if held else "lease_lost", node=self.link.name)
            if self.on_change is not None:
                self.on_change(held)

    async def step(self) -> None:
        """One attempt to renew (holding) or take (not holding) the lease."""
        kv = self.link.lease_kv
        if kv is None:
            return
        name = self.link.name.encode()
        now = self.clock()
        try:
            if self._rev is not None:
                try:
                    self._rev = await kv.update(KEY, name, last=self._rev)
                    self._renewed = now
                    self._set(True)
                    return
                except nats.js.errors.KeyWrongLastSequenceError:
                    self._rev = None  # it lapsed and someone else took it
                    self._set(False)
            if not self.ready():
                return
            try:
                self._rev = await kv.create(KEY, name)
                self._renewed = now
                self._set(True)
            except nats.js.errors.KeyWrongLastSequenceError:
                entry = await kv.get(KEY)  # held: by this node (a renewal whose ack was lost, a restart)?
                if entry.value == name and entry.revision is not None:
                    self._rev = await kv.update(KEY, name, last=int(entry.revision))
                    self._renewed = now
                    self._set(True)
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
            log.debug("lease_step_failed", node=self.link.name, error=repr(e))
        if self._held and not self.leader:
            self._set(False)  # fenced: not renewed in time

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                await self.step()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.ttl / 3)
        finally:
            await self.release()

    async def release(self) -> None:
        """Give the lease up at once (a clean stop), so another replica need not wait the TTL."""
        kv = self.link.lease_kv
        if self._held and self._rev is not None and kv is not None:
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError):
                await kv.delete(KEY, last=self._rev)
        self._rev = None
        self._set(False)
