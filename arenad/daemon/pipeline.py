"""The engine task's step: intake, journal, apply, acknowledge, notify, shadows, storage faults.

::

    queue of Batches ─> decode + Intake.check_rows ─> Journal.append + fsync ─> Applier.run
                                                                             ─> Batch.done (acks)
                                                                             ─> notifications
                                                                             ─> shadow models

One ``Pipeline`` per daemon. Its ``run`` loop is the only writer of the ``LiveState``: it takes
what the sources queued (group commit: one step at most every ``[daemon] commit_interval``),
and every ``checkpoint_interval`` hands over to the checkpointer (``recovery.py``). An event is
journaled and fsynced before it is applied and before its source is told it is done, so
everything a source was told is done survives ``kill -9``. A journal write that fails (a full
disk) holds the step: intake pauses, the step is retried every ``STORAGE_RETRY`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import structlog

from arenad.core.engine import Engine
from arenad.core.events import Reject
from arenad.core.params import TIER_NAMES
from arenad.daemon import sdnotify
from arenad.daemon.applier import SLICE, Applier, Rated, RecalibrationDue, SliceEnd
from arenad.daemon.clock import DaemonClock
from arenad.daemon.live import LiveState, StorageFaults
from arenad.daemon.logs import RejectWarnings
from arenad.daemon.metrics import Metrics
from arenad.daemon.notify import Notifier, RatingChange
from arenad.daemon.shadows import ModelSet, adr_prediction
from arenad.daemon.state import ControlRecord, Journal, JournalRecord, PlacementRecord, Record, record_seq
from arenad.daemon.types import Batch
from arenad.decode import DecodedRow, decode_msgpack_rows
from arenad.records import record_from_row
from arenad.scopes import ScopeSet

log = structlog.get_logger("arenad")

#: Slices of ADR's work the shadow models take at a time, one shadow after the other (each slice
#: still followed by a yield): switching between models every slice costs cache misses.
SHADOW_SLICES = 4
#: Events taken from the queue per engine step (one journal write and one fsync cover them).
MAX_STEP_EVENTS = 4096
#: Seconds between attempts to journal a held batch while the state directory refuses writes.
STORAGE_RETRY = 1.0
#: Most seconds between two checkpoint attempts after a failed one (the interval, if shorter).
CHECKPOINT_RETRY = 10.0


def daemon_applier(
    scopes: ScopeSet,
    models: ModelSet,
    *,
    observe: Callable[[float], None] | None = None,
    notify: bool = False,
    sample: int = 0,
    slice_events: int = 0,
) -> Applier:
    """The record applier with the daemon's reading of exclusion rules (from their journaled
    point on) and, when shadows are configured, the primary's scoring: what the live step and
    recovery both drive, so a restart applies the journal exactly as it was applied live."""
    score_kill: Callable[[Engine, str, str], None] | None = None
    score_placement: Callable[[Engine, PlacementRecord], None] | None = None
    if models.scoring:
        window = models.primary

        def score_kill(eng: Engine, attacker: str, victim: str) -> None:
            window.add(adr_prediction(eng, attacker, victim))

        score_placement = models.score_primary_placement
    return Applier(
        scopes,
        rules="journal",
        notify=notify,
        score_kill=score_kill,
        score_placement=score_placement,
        observe=observe,
        timer=time.perf_counter if observe is not None else None,
        sample=sample,
        slice_events=slice_events,
    )


class Pipeline:
    """Journals, applies and acknowledges what the sources queued; see the module docstring."""

    def __init__(
        self,
        state: LiveState,
        queue: asyncio.Queue[Batch],
        journal: Journal,
        *,
        models: ModelSet,
        metrics: Metrics,
        clock: DaemonClock,
        faults: StorageFaults,
        reject_warnings: RejectWarnings,
        notifier: Notifier | None = None,
        on_change: Callable[[RatingChange], None] | None = None,
    ) -> None:
        self.state = state
        self.queue = queue
        self.journal = journal
        self.models = models
        self.metrics = metrics
        self.clock = clock
        self.faults = faults
        self.reject_warnings = reject_warnings
        self.notifier = notifier if notifier is not None and notifier.enabled else None
        #: A second consumer of the same changes (the in-game announcements); O(1), never raises.
        self.on_change = on_change
        #: Events given up at stop while the journal still failed (UDP only: MQTT redelivers).
        self.dropped: Counter[str] = Counter()
        #: When each source last delivered events (the daemon's wall clock), for status pages.
        self.last_event: dict[str, float] = {}
        # The one engine step that waits for the journal (records, batches, the journal size to
        # cut back to) while intake is paused.
        self.held: tuple[list[JournalRecord], list[Batch], int] | None = None
        self.unjournaled_ids = False  # a held step was given up at stop (no checkpoint after)
        self._step_started = -math.inf  # time.monotonic() of the last engine step (group commit)
        self._sample = 0  # the applier's timing phase, carried across steps
        self._observe_update = self._update_observer()

    def _update_observer(self) -> Callable[[float], None]:
        update = self.metrics.update_seconds.observe
        primary = self.models.observers.get(self.models.primary_name)  # set only when scoring
        if primary is None:
            return update

        def observe(seconds: float) -> None:
            update(seconds)
            primary(seconds)

        return observe

    # ------------------------------------------------------------------ one step
    async def process(self, batches: list[Batch]) -> None:
        """Decode and check ``batches``, then journal, apply and acknowledge them (``commit``);
        a step the journal refuses is held for ``retry_held``."""
        st = self.state
        now = self.clock.now()
        records: list[JournalRecord] = []
        rejects: list[Reject] = []
        check_rows = st.intake.check_rows
        count_reject = self.count_reject
        # Decoding and checking an event costs a fraction of applying it: yield to queries and
        # sources after about as much work as one of apply's slices.
        slice_events = 2 * SLICE
        seq = st.seq
        work = 0
        taken = 0  # events decoded in this step, rejects included (arenad_engine_step_events)
        # UDP datagrams decoded here straight into rows (no batch.items kept): if the step cannot
        # be journaled, their payloads go back so an abandoned batch still counts its events.
        consumed: list[tuple[Batch, bytes]] = []
        for batch in batches:
            control = batch.control
            if control is not None:  # an admin operation (admin.py), journaled like an event
                seq += 1
                control.seq = seq
                records.append(ControlRecord(seq, control.t, control.op, control.args))
                batch.last_seq = seq
            rows = batch.rows
            if rows is not None:  # a cluster replica's records from the stream, checked already
                for kind, row in rows:
                    seq += 1
                    records.append(record_from_row(kind, seq, row))
                batch.last_seq = seq
                if rows:
                    st.received[batch.source] += len(rows)
                    self.last_event[batch.source] = now
                    taken += len(rows)
                continue
            payload = batch.payload
            items: Sequence[DecodedRow]
            if payload is not None and batch.decode is None:
                batch.payload = None
                consumed.append((batch, payload))
                items = decode_msgpack_rows(payload)
            else:
                items = batch.decoded()
            n = len(items)
            if not n:
                continue
            source = batch.source
            st.received[source] += n
            self.last_event[source] = now
            taken += n
            for k in range(0, n, slice_events):
                part = items if n <= slice_events else items[k : k + slice_events]
                seq = check_rows(part, batch.server, now, seq, records=records, rejects=rejects)
                if rejects:
                    for reject in rejects:
                        count_reject(reject, source)
                    rejects.clear()
                work += len(part)
                if work >= slice_events:
                    work = 0
                    await asyncio.sleep(0)  # let queries and sources run between slices
            batch.last_seq = seq
        self.metrics.step_events.observe(taken)
        mark = self.journal.size
        if not await self.commit(records, batches, mark):
            # Not journaled: nothing applied, nothing acknowledged. The engine loop retries this
            # step every STORAGE_RETRY seconds and reads no more of the queue meanwhile.
            for batch, payload in consumed:
                batch.payload = payload
            self.held = (records, batches, mark)

    async def commit(self, records: list[JournalRecord], batches: list[Batch], mark: int) -> bool:
        """Journal and fsync ``records``, then apply them and tell their batches they are done.

        ``mark`` is the journal size before this step. If a write or the fsync fails (a full
        disk, an I/O error), the journal is cut back to ``mark`` — no partial or unsynced record
        is left for a retry to follow, and sequence numbers stay contiguous — and ``False`` is
        returned with nothing applied or acknowledged.
        """
        st = self.state
        if records:
            if not await self.persist(records, batches, mark):
                return False
            st.seq = record_seq(records[-1])
        self.faults.recovered(self.durable_op)
        for batch in batches:
            if batch.position is not None:  # what this batch held is journaled: resume after it
                st.positions[batch.position[0]] = batch.position[1]
                st.positions_moved = True
        if self.applies:
            await self.apply(list(records))
        for batch in batches:
            if batch.done is not None:
                try:
                    batch.done()
                except Exception as e:  # a source's ack failing must not stop the engine
                    log.warning("ack_failed", source=batch.source, error=str(e))
        return True

    #: What makes a step durable (``arenad_storage_errors_total{op}``) and whether this pipeline
    #: applies what it made durable: the journal and yes here; the cluster's ingest publishes to
    #: the stream and applies nothing (``arenad.cluster.ingest``).
    durable_op = "journal"
    applies = True

    async def persist(self, records: list[JournalRecord], batches: list[Batch], mark: int) -> bool:
        """Journal and fsync ``records`` (of ``batches``); on a failure cut the journal back to
        ``mark``, count the fault and return ``False``."""
        try:
            if self.journal.size != mark:
                self.journal.rewind(mark)  # a cut that failed last time
            # Chunks of 128 records: well under 0.1 ms of encoding each, one write and one yield.
            chunk = 4 * SLICE
            for k in range(0, len(records), chunk):
                self.journal.append(records[k : k + chunk] if len(records) > chunk else records)
                await asyncio.sleep(0)
            # fsync off the event loop; nothing is applied or acknowledged before it returns.
            await asyncio.to_thread(self.journal.sync)
        except OSError as e:
            self.faults.failed("journal", e, seq=record_seq(records[0]), events=len(records))
            try:
                self.journal.rewind(mark)
            except OSError as cut:
                log.error("journal_rewind_failed", error=str(cut), errno=cut.errno)
            return False
        return True

    async def apply(self, records: list[JournalRecord | None]) -> None:
        # ``records`` is the engine task's own copy: the applier sets a skipped record to None.
        """Score and apply journaled records in slices; the shadows follow every few slices.

        The records go through the applier (``applier.py``), the same rule as recovery, rebuild
        and replay; this driver carries out its commands: a recalibration with the O(P) plan in
        a worker thread, a notification per rated kill, and at each slice end the counters, a
        turn for queries and, every ``SHADOW_SLICES`` slices (and at the end), the shadow
        models' turn on the same slices, a turn for queries after each. With shadows configured,
        the primary's prediction of each kill and placement pair is scored before ADR learns it
        (as offline evaluation does); without, its scores come from the engine's own ring at
        scrape time (ModelSet.ring), so this path costs nothing for them.

        ``state.scopes`` is read once: a recompute that swaps in a new set meanwhile has already
        applied this step's records to it (it catches up on everything journaled), so the rest
        of the step must not reach it a second time.
        """
        count = self.state.count
        applier = daemon_applier(
            self.state.scopes,
            self.models,
            observe=self._observe_update,
            notify=self.notifier is not None or self.on_change is not None,
            sample=self._sample,
            slice_events=SLICE,
        )
        start = 0  # the first record the shadows have not taken yet
        cuts: list[int] = []  # where ADR's slices since then end
        for cmd in applier.run(records):
            if type(cmd) is SliceEnd:
                applier.drain(count)  # visible to queries between slices
                cuts.append(cmd.upto)
                await asyncio.sleep(0)
                if len(cuts) >= SHADOW_SLICES:
                    await self._shadows(records, start, cuts)  # the same slices, model by model
                    start = cuts[-1]
                    cuts = []
            elif type(cmd) is RecalibrationDue:
                await recalibrate(cmd.engine, cmd.t)
            else:
                assert type(cmd) is Rated
                self._notify_changes(cmd.engine, cmd.record, cmd.before)
        applier.drain(count)
        self._sample = applier.sample
        await self._shadows(records, start, [*cuts, len(records)])

    def _notify_changes(self, g: Engine, rec: Record, before: tuple[int, int]) -> None:
        notifier = self.notifier
        on_change = self.on_change
        _, t, attacker, victim, server, _i = rec
        for player, old in zip((attacker, victim), before, strict=True):
            i = g.ids[player]
            new = g.tier_index(player)
            if new in (old, 0):
                kind = "rating"
            elif old == 0:
                kind = "placed"
            else:
                kind = "promoted" if new < old else "demoted"  # tier 1 (1H) is the best
            change = RatingChange(
                server=server,
                scope=g.scope,
                player=player,
                kind=kind,
                tier=TIER_NAMES[new - 1] if new else None,
                old_tier=TIER_NAMES[old - 1] if old else None,
                mu=g.mu(i),
                sigma=g.sigma(i),
                rank=g.rank(i),
                t=t,
                seq=rec[0],
            )
            if notifier is not None:
                notifier.offer(change)
            if on_change is not None:
                on_change(change)

    async def _shadows(self, records: list[JournalRecord | None], lo: int, cuts: list[int]) -> None:
        """The shadow models take ``records[lo:cuts[-1]]`` in ADR's slices; queries get a turn
        after each slice of each model."""
        for _ in self.models.run_steps(records, lo, cuts):
            await asyncio.sleep(0)

    def count_reject(self, reject: Reject, source: str) -> None:
        self.state.rejected[reject.reason.value] += 1
        self.reject_warnings.reject(reject.reason.value, source, reject.detail)

    # ------------------------------------------------------------------ a held step
    async def retry_held(self) -> bool:
        """Try the held engine step again; ``True`` once it is journaled, applied and acked."""
        assert self.held is not None
        records, batches, mark = self.held
        if not await self.commit(records, batches, mark):
            return False
        self.held = None
        return True

    def abandon_held(self) -> None:
        """At stop with the journal still failing: give up the held and queued batches.

        Nothing of them was acknowledged (MQTT redelivers it to the next run); UDP events are
        lost and counted as dropped. No checkpoint follows (``unjournaled_ids``: the intake
        remembers ids of events that are in no journal), so the next start remembers no id of
        the abandoned events.
        """
        assert self.held is not None
        batches = self.held[1]
        while True:
            try:
                batches.append(self.queue.get_nowait())
            except asyncio.QueueEmpty:
                break
        lost = 0
        for batch in batches:  # an MQTT batch is simply never acknowledged
            if batch.done is None and batch.source != "control":
                n = len(batch.decoded())
                self.dropped[batch.source] += n
                lost += n
        log.error("stopped_with_unjournaled_events", batches=len(batches), dropped=lost)
        self.held = None
        self.unjournaled_ids = True

    # ------------------------------------------------------------------ the engine task
    async def run(
        self,
        *,
        stop: asyncio.Event,
        drained: asyncio.Event,
        sources_done: Callable[[], bool],
        checkpoint: Callable[[], Awaitable[None]],
        checkpoint_interval: float,
        commit_interval: float,
    ) -> None:
        """The engine task: steps until ``stop`` is set and the queue is empty; then sets
        ``drained`` (sources that acknowledge keep their connection until then) and returns once
        ``sources_done()``."""
        next_checkpoint = time.monotonic()  # the first one at once (after recovery)
        watchdog = sdnotify.watchdog_interval()
        next_ping = time.monotonic()
        while True:
            now = time.monotonic()
            if watchdog is not None and now >= next_ping:
                sdnotify.notify("WATCHDOG=1")
                next_ping = now + watchdog
            if self.held is not None:
                # Intake paused: the queue fills, MQTT stops taking messages (back-pressure to the
                # broker, which redelivers what was not acknowledged), UDP drops and counts.
                if await self.retry_held():
                    continue
                if stop.is_set():
                    self.abandon_held()  # then drain and stop as usual, without a checkpoint
                    continue
                wait = STORAGE_RETRY
                if watchdog is not None:
                    wait = min(wait, max(0.01, next_ping - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait)
                continue
            if now >= next_checkpoint:
                await checkpoint()
                # A failed checkpoint is tried again sooner (the temporary file was removed).
                failing = "checkpoint" in self.faults.failing
                next_checkpoint = time.monotonic() + (
                    min(checkpoint_interval, CHECKPOINT_RETRY) if failing else checkpoint_interval
                )
            if stop.is_set() and self.queue.empty():
                drained.set()
                if sources_done():
                    return
            wait = max(0.01, next_checkpoint - time.monotonic())
            if watchdog is not None:
                wait = min(wait, max(0.01, next_ping - time.monotonic()))
            if stop.is_set():
                wait = 0.01
            try:
                first = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                try:
                    first = await asyncio.wait_for(self.queue.get(), timeout=wait)
                except TimeoutError:
                    continue
            # Group commit: a step starts at most every commit_interval, so under load one journal
            # write, one fsync and one engine step cover all that arrived meanwhile, instead of
            # one per datagram (at 50k events/s in datagrams of 50, that per-step work took about
            # a fifth of the daemon's CPU; docs/performance.md, "Query latency under ingest").
            # After a quiet spell the first event is taken at once.
            due = self._step_started + commit_interval
            now = time.monotonic()
            if now < due and not stop.is_set():
                await asyncio.sleep(due - now)
                now = time.monotonic()
            self._step_started = now
            batches = [first]
            events = _events_in(first)
            while events < MAX_STEP_EVENTS:
                try:
                    batch = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                batches.append(batch)
                events += _events_in(batch)
            await self.process(batches)


def _events_in(batch: Batch) -> int:
    """About how many events a queued batch holds (an undecoded datagram: about 50)."""
    if batch.rows is not None:
        return len(batch.rows)
    return len(batch.items) or 50


async def recalibrate(eng: Engine, t: float) -> None:
    """``Engine.recalibrate(t)`` with the O(P) numpy plan in a worker thread: same point and
    same result as ``Engine.feed`` (and so as replay) while the loop keeps answering queries;
    nothing mutates the engine meanwhile because the engine task is the only writer."""
    at = eng.begin_recalibration(t)
    if at is not None:
        eng.finish_recalibration(await asyncio.to_thread(eng.plan_recalibration, at))
