"""The ingest node's step: what the sources accepted goes into the stream, not into a journal.

``IngestPipeline`` is the daemon's ``Pipeline`` (the same decoding, the same wall-clock and
duplicate checks, the same held step and retries) with one difference: a step is made durable
by ``Publisher.publish`` — every record in a JetStream message, each message acknowledged by the
stream's quorum — and nothing is applied here. A source is told its batch is done (MQTT PUBACK)
only after the publish acks: the local journal's promise, now on R3.

A publish that fails (no quorum, no ack within ``publish_timeout``) holds the step as a full
disk does: intake pauses, the same records are published again every second with the same
message ids, so whatever the stream did store meanwhile is not stored twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import nats.errors
import nats.js.errors
import structlog

from arenad.cluster.link import ClusterError, Link, headers
from arenad.cluster.wire import encode_records, kills_subject, message_id
from arenad.daemon.config_cluster import ClusterSettings
from arenad.daemon.pipeline import Pipeline
from arenad.daemon.types import Batch
from arenad.records import ControlRecord, JournalRecord, record_seq

log = structlog.get_logger("arenad.cluster")

#: Records per message at most: a message stays far below NATS' 1 MiB payload limit.
MAX_MESSAGE_RECORDS = 2048


#: The run key of control records (a feed's alias, a merge): they go to the control subject.
CONTROL = ("control",)


def _server(rec: JournalRecord) -> str | tuple[str] | None:
    if isinstance(rec, tuple):
        return rec[4]
    return CONTROL if isinstance(rec, ControlRecord) else rec.server


def runs(
    records: Sequence[JournalRecord], ends: Sequence[int] = ()
) -> list[tuple[str | tuple[str] | None, Sequence[JournalRecord]]]:
    """Consecutive records of one server and one source batch, in order, at most
    ``MAX_MESSAGE_RECORDS`` each: one message each, so the stream holds the records in the order
    the ingest accepted them. ``ends`` are the sequence numbers at which source batches end.

    A message never spans two source batches: an MQTT message redelivered after an ingest
    restart becomes the same stream message again, whatever else shares its step then, so its
    message id is the same and the stream keeps it once.
    """
    out: list[tuple[str | tuple[str] | None, Sequence[JournalRecord]]] = []
    cut = set(ends)
    start = 0
    for k in range(1, len(records) + 1):
        if (
            k == len(records)
            or _server(records[k]) != _server(records[start])
            or k - start >= MAX_MESSAGE_RECORDS
            or record_seq(records[k - 1]) in cut
        ):
            out.append((_server(records[start]), records[start:k]))
            start = k
    return out


class Publisher:
    """Publishes records as messages and waits for every publish ack."""

    def __init__(
        self, link: Link, settings: ClusterSettings, observe: Callable[[float], None] | None = None
    ) -> None:
        self.link = link
        self.settings = settings
        self.observe = observe
        self.messages = 0
        self.duplicates = 0  # publishes the stream had already (a retry, a redelivery)

    async def publish(self, records: Sequence[JournalRecord], ends: Sequence[int] = ()) -> None:
        """Every record into the stream (``runs``: ``ends`` where source batches end); returns
        once all are acknowledged, else ``ClusterError``."""
        js = self.link.js
        if js is None:
            raise ClusterError("not connected to NATS")
        prefix = self.settings.subject_prefix
        started = time.perf_counter()
        futures: list[asyncio.Future[Any]] = []
        try:
            for server, part in runs(records, ends):
                body = encode_records(part)
                named: str | None
                if isinstance(server, tuple):  # control records: every replica, scoped or not
                    subject, named = self.settings.control_subject, "control"
                else:
                    subject, named = kills_subject(prefix, server), server
                futures.append(
                    await js.publish_async(
                        subject,
                        body,
                        headers=headers(message_id(named, part, body)),
                        wait_stall=self.settings.publish_timeout,
                    )
                )
            acks = await asyncio.wait_for(asyncio.gather(*futures), self.settings.publish_timeout)
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
            for f in futures:
                f.cancel()
            raise ClusterError(f"publish of events {record_seq(records[0])}.. not acknowledged: {e!r}") from e
        self.messages += len(acks)
        self.duplicates += sum(1 for a in acks if getattr(a, "duplicate", False))
        if self.observe is not None:
            self.observe(time.perf_counter() - started)


class IngestPipeline(Pipeline):
    """``Pipeline`` whose steps are made durable by the stream; see the module docstring."""

    durable_op = "stream"
    applies = False
    publisher: Publisher
    #: Saves ``ingest.state`` (``IngestNode.save``): after every step that moved a log
    #: follower's position, so a restarted ingest does not read lines again that it published
    #: (re-read lines would form other messages, with other ids, than the first time).
    save_positions: Callable[[], Awaitable[None]] | None = None

    async def commit(self, records: list[JournalRecord], batches: list[Batch], mark: int) -> bool:
        if not await super().commit(records, batches, mark):
            return False
        if self.state.positions_moved and self.save_positions is not None:
            await self.save_positions()
        return True

    async def persist(self, records: list[JournalRecord], batches: list[Batch], mark: int) -> bool:
        try:
            await self.publisher.publish(records, [b.last_seq for b in batches])
        except ClusterError as e:
            self.faults.failed("stream", e, seq=record_seq(records[0]), events=len(records))
            return False
        return True
