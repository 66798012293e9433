"""A replica's source: the stream, from its checkpoint's position on, into the engine queue.

``StreamSource`` is a ``Source`` (``daemon/sources/ports.py``) like UDP or MQTT, so a replica is
the daemon with this one source. It consumes the records' stream with an ordered consumer
(ephemeral, flow-controlled, restarted by the client from the last delivered sequence when a
server goes away) starting after ``positions["stream"]``, the stream sequence the checkpoint
holds. Each message becomes one ``Batch`` of checked rows (``Batch.rows``) with its stream
sequence as the batch's position: the engine task numbers, journals and applies the rows as
every replica does, in stream order, and the position moves with what was journaled.

A message no replica can apply (``wire.decode_records`` refuses it: garbage, another schema) is
counted by reason, logged at most once per reason and ``REJECT_LOG_INTERVAL``, and passed as an
empty batch, so the position moves on and the consumer never stops on it. Chat lines go to the
in-game commands, on the lease holder only. Control records published by an admin operation on
this replica tell that operation when they are applied (``publish_control``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from arenad.cluster.link import ClusterError, Link, headers
from arenad.cluster.wire import (
    ON_CONTROL,
    ON_KILLS,
    REJECT_REASONS,
    WireReject,
    decode_chat,
    decode_rows,
    encode_records,
    subject_matches,
)
from arenad.daemon.config_cluster import ClusterSettings
from arenad.daemon.sources.ports import SourceContext, _Quiet
from arenad.daemon.types import Batch, ControlRequest
from arenad.records import KIND_CONTROL, ControlRecord

log = structlog.get_logger("arenad.cluster")

#: Seconds between two warnings about refused stream messages of one reason.
REJECT_LOG_INTERVAL = 10.0
#: Position key of the stream in the checkpoint's ``positions``.
POSITION = "stream"


def stream_position(positions: dict[str, dict[str, Any]]) -> int:
    return int(positions.get(POSITION, {}).get("seq", 0))


class StreamSource(_Quiet):
    """The records' stream as a source (see the module docstring)."""

    name = "stream"

    def __init__(
        self,
        settings: ClusterSettings,
        link: Link,
        chat_gate: Callable[[], bool],
        on_recompute: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.settings = settings
        self.link = link
        self.chat_gate = chat_gate
        self.on_recompute = on_recompute
        self.dropped: Counter[str] = Counter()  # never: the consumer waits for queue space
        self.rejected: Counter[str] = Counter(dict.fromkeys(REJECT_REASONS, 0))
        self.position = 0  # the stream sequence of the last message queued
        self.stream_end = 0  # the stream's last sequence as last seen (lag = stream_end - applied)
        self.messages = 0
        self._waiters: dict[str, asyncio.Future[int]] = {}
        self._warned: dict[str, float] = {}
        filters: tuple[str, ...] = tuple(settings.filter)
        self.local: tuple[str, ...] = ()
        # One filter: the server sends only what matches (the control subject must match it
        # too, or control records would be missing: then the filter is applied here).
        control = settings.control_subject
        if len(filters) == 1 and subject_matches(control, filters[0]):
            self.subject, self.local = filters[0], ()
        elif filters:
            self.subject, self.local = f"{settings.subject_prefix}.>", filters
        else:
            self.subject, self.local = f"{settings.subject_prefix}.>", ()

    def check(self) -> None:
        return None

    @property
    def current(self) -> bool:
        """The stream's messages as last seen are all queued (what a lease candidate waits for)."""
        return self.stream_end <= self.position

    async def open(self, ctx: SourceContext) -> dict[str, Any]:
        self.position = stream_position(ctx.positions)
        assert self.link.js is not None
        info = await self.link.js.stream_info(self.settings.stream)
        first = int(info.state.first_seq)
        self.stream_end = int(info.state.last_seq)
        if self.stream_end < self.position:
            raise ClusterError(
                f"this replica's state is at stream sequence {self.position}, but stream "
                f"{self.settings.stream} ends at {self.stream_end}: it was deleted and made again; "
                'copy the state directory of a replica that is current (docs/operations.md "Cluster")'
            )
        # first_seq is 0 for a stream never written, last_seq + 1 once every message aged out.
        if first > self.position + 1:
            raise ClusterError(
                f"this replica's state is at stream sequence {self.position}, but stream "
                f"{self.settings.stream} starts at {first} (older messages aged out, [cluster] max_age): "
                'copy the state directory of a replica that is current (docs/operations.md "Cluster")'
            )
        return {}

    async def run(self, ctx: SourceContext) -> None:
        js = self.link.js
        assert js is not None
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.position + 1
        )
        sub = await js.subscribe(
            self.subject, stream=self.settings.stream, ordered_consumer=True, config=config
        )
        try:
            while not ctx.stop.is_set():
                try:
                    msg = await sub.next_msg(timeout=0.5)
                except nats.errors.TimeoutError:
                    continue
                await self._take(msg, ctx)
        finally:
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
                await sub.unsubscribe()

    # ------------------------------------------------------------------ one message
    async def _take(self, msg: Msg, ctx: SourceContext) -> None:
        meta = msg.metadata
        seq = int(meta.sequence.stream)
        if seq <= self.position:
            return  # delivered again after the consumer was recreated
        if seq != self.position + 1 and self.subject == f"{self.settings.subject_prefix}.>":
            # Unfiltered, every sequence number comes: a gap is history lost (aged out while this
            # replica was behind, or dropped by the client). Stopping keeps the replicas equal;
            # a restart resumes from the checkpoint, or refuses and says why.
            raise ClusterError(
                f"stream {self.settings.stream} skipped from {self.position} to {seq}: messages are "
                "missing (aged out, [cluster] max_age?); stopping rather than apply a different history"
            )
        self.stream_end = max(self.stream_end, seq + int(meta.num_pending or 0))
        self.messages += 1
        subject = msg.subject
        control = subject == self.settings.control_subject
        rows: list[tuple[int, Any]] = []
        batch = Batch(source="stream", items=[], rows=rows, position=(POSITION, {"seq": seq}))
        if self.local and not control and not any(subject_matches(subject, f) for f in self.local):
            pass  # another scope's: only the position moves
        elif control or subject.endswith(".kills"):
            decoded = decode_rows(msg.data, ON_CONTROL if control else ON_KILLS)
            if isinstance(decoded, WireReject):
                self._reject(decoded, seq, subject)
            else:
                rows.extend(decoded)
                if control:
                    waiter = self._waiters.pop((msg.headers or {}).get("Nats-Msg-Id", ""), None)
                    batch.done = self._applied(batch, waiter)
        elif subject.endswith(".chat"):
            line = decode_chat(msg.data)
            if isinstance(line, WireReject):
                self._reject(line, seq, subject)
            elif ctx.chat is not None and self.chat_gate():
                ctx.chat(line)
        else:
            self._reject(WireReject("subject", f"no records on {subject!r}"), seq, subject)
        self.position = seq
        await ctx.queue.put(batch)

    def _applied(self, batch: Batch, waiter: asyncio.Future[int] | None) -> Callable[[], None] | None:
        """A control batch's ``done`` (it runs once the records are applied): a recompute
        request goes to this replica's recomputer, and the admin operation that published the
        batch here learns its sequence number."""
        recompute = [
            row[2] for kind, row in batch.rows or () if kind == KIND_CONTROL and row[1] == "recompute"
        ]
        if waiter is None and not (recompute and self.on_recompute is not None):
            return None

        def done() -> None:
            if self.on_recompute is not None:
                for args in recompute:
                    self.on_recompute(args)
            if waiter is not None and not waiter.done():
                waiter.set_result(batch.last_seq)

        return done

    def _reject(self, reject: WireReject, seq: int, subject: str) -> None:
        self.rejected[reject.reason] += 1
        now = time.monotonic()
        if now - self._warned.get(reject.reason, -math.inf) >= REJECT_LOG_INTERVAL:
            self._warned[reject.reason] = now
            log.warning(
                "stream_message_rejected",
                reason=reject.reason,
                detail=reject.detail,
                stream_seq=seq,
                subject=subject,
                total=self.rejected[reject.reason],
            )

    # ------------------------------------------------------------------ admin operations
    async def publish_control(self, request: ControlRequest, timeout: float = 60.0) -> None:
        """Publish ``request`` as a control record into the stream; return once this replica has
        applied it (its ``seq`` set), as the single node's admin operations do."""
        js = self.link.js
        if js is None:
            raise ClusterError("not connected to NATS")
        msg_id = uuid.uuid4().hex
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters[msg_id] = waiter
        body = encode_records([ControlRecord(0, request.t, request.op, request.args)])
        try:
            await js.publish(
                self.settings.control_subject,
                body,
                headers=headers(msg_id),
                timeout=self.settings.publish_timeout,
            )
            request.seq = await asyncio.wait_for(waiter, timeout)
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
            raise ClusterError(f"control record {request.op} not applied: {e!r}") from e
        finally:
            self._waiters.pop(msg_id, None)
