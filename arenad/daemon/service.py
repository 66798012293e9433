"""The arenad service: one asyncio process, one single-writer engine task.

::

    UDP datagrams ─┐                       ┌─> journal (fsync) ─> Engine.feed ─> shadows ─> Batch.done
    MQTT QoS 1 ────┼─> bounded queue ─> engine task
    (log tails) ───┘                       └─> checkpoint every N s (a thread writes it)
    query socket <── reads the engine between engine steps
    /metrics     <── MetricsSnapshot at scrape time

Only the engine task mutates rating state. Sources that can wait (MQTT) block on the bounded
queue when it is full, which pauses their intake; UDP drops and counts. An event is journaled
and fsynced before it is applied and before its source is told it is done, so everything a
source was told is done survives ``kill -9``.

Kills and match placements are journaled alike. ADR rates the kills; every model's prediction
of each event is scored first, and the shadow models (``[models] shadows``, ``shadows.py``)
learn from both kinds after ADR has applied a few slices.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import gc
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import structlog

try:
    import uvloop
except ImportError:  # pragma: no cover - not available on every platform
    uvloop = None  # type: ignore[assignment]

from arenad.core.engine import REJECT_REASONS, Engine, Outcome
from arenad.core.events import PlacementEvent, Reject
from arenad.core.params import TIER_NAMES
from arenad.daemon import sdnotify
from arenad.daemon.config import parse_hostport
from arenad.daemon.intake import Intake
from arenad.daemon.logs import RejectWarnings
from arenad.daemon.metrics import Metrics, serve_metrics
from arenad.daemon.query import QueryHandler, close_servers, serve_query
from arenad.daemon.shadows import ModelSet, adr_prediction
from arenad.daemon.sources.hl_udp import HlUdpSource, load_secrets, open_hl_udp
from arenad.daemon.sources.mqtt import MqttStatus, load_password, run_mqtt, tls_context
from arenad.daemon.sources.tail import LogFollower
from arenad.daemon.sources.udp import AuthRejectCollector, load_udp_keys, open_udp
from arenad.daemon.state import (
    Checkpoints,
    Journal,
    JournalRecord,
    PlacementRecord,
    RecoveryReport,
    StateError,
    record_seq,
)
from arenad.daemon.types import Batch, MetricsSnapshot
from arenad.errors import ArenadError, ConfigError, ConfigProblem
from arenad.feeds import discover_feeds
from arenad.settings import Settings

log = structlog.get_logger("arenad")

#: Events handled between two yields to the event loop: about 0.5 ms of work, so a query waits
#: about that long behind ingestion (and behind one shadow model's slice).
SLICE = 32
#: A match placement counts as 1 + pairs // PAIRS_PER_EVENT events of work in a slice: every
#: model predicts each of its (better, worse) pairs.
PAIRS_PER_EVENT = 16
#: Slices of ADR's work the shadow models take at a time, one shadow after the other (each slice
#: still followed by a yield): switching between models every slice costs cache misses.
SHADOW_SLICES = 4
#: Journal records replayed into the shadows at a time during recovery.
REPLAY_CHUNK = 4096
#: Every n-th event's apply time goes into the update histogram (timing each would cost more).
UPDATE_SAMPLE = 64
#: Events taken from the queue per engine step (one journal write and one fsync cover them).
MAX_STEP_EVENTS = 4096
#: Seconds between attempts to journal a held batch while the state directory refuses writes.
STORAGE_RETRY = 1.0
#: Most seconds between two checkpoint attempts after a failed one (the interval, if shorter).
CHECKPOINT_RETRY = 10.0
#: A storage failure that persists is logged again at most this often (per op), not per attempt.
STORAGE_LOG_INTERVAL = 30.0


class Daemon:
    """Owns the engine, the journal and every server; ``run`` until stopped."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state_dir = Path(settings.daemon.state_dir)
        self.engine = Engine(settings.adr)
        self.intake = Intake(settings.daemon)
        self.queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=settings.daemon.queue_size)
        self.stop = asyncio.Event()  # SIGTERM/SIGINT: stop intake, drain, checkpoint, exit
        # MQTT keeps its connection until the queue is drained, so every batch it handed over is
        # acknowledged on a live connection (an ack lost at shutdown means a redelivery).
        self.mqtt_stop = asyncio.Event()
        self._mqtt_task: asyncio.Task[None] | None = None
        self.seq = 0  # sequence number of the last journaled event
        self.checkpoint_seq = 0
        self.received: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.filtered: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.udp_auth_rejected: Counter[str] = Counter()  # by arenad.auth.AuthReason
        self.applied = 0
        self.placements = 0  # match placements journaled (ADR does not rate them)
        self.checkpoint_last_success = 0.0
        self.checkpoint_failures = 0
        self.recovery = RecoveryReport()
        #: Resume positions of log followers as of the last journaled batch (checkpointed).
        self.positions: dict[str, dict[str, Any]] = {}
        self._positions_moved = False  # a follower moved on since the last checkpoint
        self.followers: list[LogFollower] = []
        self.hl_udp: HlUdpSource | None = None
        self.ready = False
        self.mqtt_status = MqttStatus()
        self.journal = Journal(self.state_dir)
        self.checkpoints = Checkpoints(self.state_dir, keep=settings.daemon.checkpoints_kept)
        self.models = ModelSet(settings.models)
        self.metrics = Metrics(self.snapshot)
        # Every model's histogram series exists from the start, so dashboards see each model.
        if self.models.scoring:
            self.models.observers = {
                name: self.metrics.model_update_seconds.labels(model=name).observe
                for name in self.models.names
            }
        if settings.udp.auth != "off":
            self.metrics.registry.register(AuthRejectCollector(self.udp_auth_rejected))
        self.reject_warnings = RejectWarnings(settings.log.reject_warning_interval)
        self.bound: dict[str, Any] = {}  # actual listening addresses, for logs and tests
        self.query_handler: QueryHandler | None = None  # set once the query server starts
        self._lock_fd: int | None = None
        self._sample = 0
        # Storage faults (a full disk): failed writes by op, which ops fail now, when each was
        # last logged, and the one engine step that waits for the journal (records, batches, the
        # journal size to cut back to) while intake is paused.
        self.storage_errors: Counter[str] = Counter()
        self._storage_failing: set[str] = set()
        self._storage_logged: dict[str, float] = {}
        self._held: tuple[list[JournalRecord], list[Batch], int] | None = None
        self._unjournaled_ids = False  # set when a held step was given up at stop (no checkpoint)

    # ------------------------------------------------------------------ metrics
    def snapshot(self) -> MetricsSnapshot:
        eng = self.engine
        info = eng.tier_info()
        by_tier = dict(zip(TIER_NAMES, info.counts, strict=True))
        by_tier["unplaced"] = len(eng) - sum(info.counts)
        return MetricsSnapshot(
            received=Counter(self.received),
            applied=self.applied,
            rejected=Counter(self.rejected),
            filtered=Counter(self.filtered),
            dropped=Counter(self.dropped),
            queue_depth=self.queue.qsize(),
            queue_capacity=self.queue.maxsize,
            players_tracked=len(eng),
            players_cap=eng.params.max_players,
            players_active=eng.active_count,
            players_by_tier=by_tier,
            checkpoint_last_success=self.checkpoint_last_success,
            checkpoint_failures=self.checkpoint_failures,
            journal_bytes=self.journal.bytes_written,
            recovery_truncations=1 if self.recovery.truncated_bytes else 0,
            checkpoint_fallbacks=self.recovery.fallbacks,
            unrated_deaths=self._unrated_deaths(),
            mqtt_connected=self.mqtt_status.connected,
            mqtt_disconnects=self.mqtt_status.disconnects,
            mqtt_disconnected_seconds=self.mqtt_status.disconnected_seconds(time.monotonic()),
            ready=self.ready,
            placements=self.placements,
            models=self.models.figures(),
            query_connections=0 if self.query_handler is None else self.query_handler.connections,
            query_rejected=Counter() if self.query_handler is None else Counter(self.query_handler.rejected),
            storage_ok=not self._storage_failing,
            intake_paused=self._held is not None,
            storage_errors=Counter(self.storage_errors),
        )

    def stats(self) -> dict[str, Any]:
        """Daemon figures merged into the query ``stats`` answer."""
        return {
            "received": dict(self.received),
            "rejected_by_daemon": dict(self.rejected),
            "dropped": dict(self.dropped),
            "udp_auth_rejected": dict(self.udp_auth_rejected),
            "journal_seq": self.seq,
            "placements": self.placements,
            "models": {f.model: f.as_dict() for f in self.models.figures()},
            "checkpoint_seq": self.checkpoint_seq,
            "queue_depth": self.queue.qsize(),
            "mqtt_connected": self.mqtt_status.connected,
            "unrated_deaths": dict(self._unrated_deaths()),
            "tails": {
                f.spec.key: {"lines": f.status.lines, "rotations": f.status.rotations} for f in self.followers
            },
        }

    def _unrated_deaths(self) -> Counter[str]:
        """World kills, suicides, team kills... seen in game-server logs (never rated)."""
        total: Counter[str] = Counter(self.hl_udp.nonkills) if self.hl_udp is not None else Counter()
        for follower in self.followers:
            total.update(follower.status.nonkills)
        return total

    # ------------------------------------------------------------------ state
    def _lock_state_dir(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise ArenadError(f"state directory {self.state_dir} is in use by another arenad") from e
        self._lock_fd = fd

    def recover(self) -> RecoveryReport:
        """Newest valid checkpoint, then the journal tail (kept for the daemon's own start)."""
        report = RecoveryReport()
        self.checkpoints.clean_temporaries()
        models_state: object = None
        for seq, path in self.checkpoints.list():
            try:
                payload = Checkpoints.read(path)
                engine = Engine.from_state(payload["engine"], self.settings.adr)
                intake = Intake(self.settings.daemon)
                intake.import_state(payload.get("dedupe", []))
            except (StateError, ValueError, KeyError, TypeError) as e:
                report.fallbacks += 1
                log.warning("checkpoint_skipped", path=str(path), error=str(e))
                continue
            self.engine = engine
            self.intake = intake
            self.seq = seq
            self.applied = int(payload.get("applied", 0))
            self.placements = int(payload.get("placements", 0))
            self.positions = dict(payload.get("positions", {}))
            models_state = payload.get("models")
            report.checkpoint = path
            report.checkpoint_seq = seq
            break
        # Shadow models continue from the same checkpoint as the engine (a checkpoint from before
        # them has none: they start at its sequence number).
        self.models.import_state(models_state)
        records, truncations = self.journal.replay_after(self.seq)
        chunk: list[JournalRecord | None] = []
        now = time.time()
        for rec in records:
            seq = record_seq(rec)
            if seq != self.seq + 1:
                raise StateError(f"journal jumps from event {self.seq} to {seq}: history is missing")
            if isinstance(rec, PlacementRecord):
                self.intake.remember(rec.server, rec.id, now)
                if self.models.scoring:
                    self.models.score_primary_placement(self.engine, rec)
                self.placements += 1
                chunk.append(rec)
            else:
                _seq, t, attacker, victim, server, event_id = rec
                self.intake.remember(server, event_id, now)
                if self.models.scoring:
                    self.models.primary.add(adr_prediction(self.engine, attacker, victim))
                if self._apply_one(attacker, victim, t) is Outcome.PLAYER_CAP:
                    chunk.append(None)  # the shadows skip it, as in _apply
                else:
                    chunk.append(rec)
            if len(chunk) >= REPLAY_CHUNK:
                self.models.run(chunk)  # the shadows after the primary, as in _process
                chunk = []
            self.seq = seq
            report.replayed += 1
        self.models.run(chunk)
        report.truncated_bytes = sum(truncations)
        if report.truncated_bytes:
            log.warning("journal_tail_truncated", bytes=report.truncated_bytes)
        self.checkpoint_seq = report.checkpoint_seq
        self.recovery = report
        return report

    def _apply_one(self, attacker: str, victim: str, t: float) -> Outcome:
        outcome = self.engine.feed(attacker, victim, t)
        self._count_outcome(outcome)
        return outcome

    def _count_outcome(self, outcome: Outcome) -> None:
        if outcome is Outcome.APPLIED:
            self.applied += 1
        elif outcome is Outcome.FILTERED:
            self.filtered["cooldown"] += 1
        else:
            self.rejected[REJECT_REASONS[outcome]] += 1

    def _checkpoint_payload(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "created": time.time(),
            "applied": self.applied,
            "placements": self.placements,
            "engine": self.engine.export_state(),
            "models": self.models.export_state(),
            "dedupe": self.intake.export_state(),
            "positions": dict(self.positions),
        }

    async def checkpoint(self) -> None:
        """Rotate the journal, snapshot and write in a thread, compact.

        Only the engine task (and start-up / shutdown around it) calls this, so checkpoints never
        overlap and the engine does not change while its state is copied.
        """
        if self._held is not None or self._unjournaled_ids:
            # The intake already remembers the held events' ids (duplicate checks) though they are
            # not journaled: a checkpoint now would refuse their redelivery after a restart.
            return
        seq = self.seq
        if seq == self.checkpoint_seq and not self._positions_moved and self.checkpoints.list():
            return
        started = time.perf_counter()

        def write() -> None:
            # Runs in a worker thread while the engine task waits here, so nothing mutates the
            # engine during the copy; queries keep reading it from the event loop meanwhile.
            self.checkpoints.write(seq, self._checkpoint_payload())

        try:
            self.journal.open_segment(seq + 1)
            await asyncio.to_thread(write)
        except OSError as e:
            # Checkpoints.write removed its temporary file; the older checkpoints are untouched.
            self.checkpoint_failures += 1
            self._storage_failed("checkpoint", e, seq=seq)
            return
        self._storage_recovered("checkpoint")
        self.checkpoint_seq = seq
        self._positions_moved = False
        self.checkpoint_last_success = time.time()
        kept = self.checkpoints.list()
        if kept:
            self.journal.drop_before(kept[-1][0])
        elapsed = time.perf_counter() - started
        self.metrics.checkpoint_seconds.observe(elapsed)
        log.debug("checkpoint_written", seq=seq, seconds=round(elapsed, 4))

    # ------------------------------------------------------------------ the engine task
    async def _process(self, batches: list[Batch]) -> None:
        now = time.time()
        records: list[JournalRecord] = []
        check = self.intake.check
        seq = self.seq
        handled = 0
        for batch in batches:
            if batch.payload is not None:
                handled += len(batch.decoded())  # decoding counts as work between yields
            items = batch.items
            if items:
                self.received[batch.source] += len(items)
            for item in items:
                handled += 1
                if handled % SLICE == 0:
                    await asyncio.sleep(0)  # let queries and sources run between slices
                if isinstance(item, Reject):
                    self._count_reject(item, batch.source)
                    continue
                checked = check(item, batch.server, now)
                if isinstance(checked, Reject):
                    self._count_reject(checked, batch.source)
                    continue
                seq += 1
                if isinstance(checked, PlacementEvent):
                    records.append(
                        PlacementRecord(seq, checked.t, checked.placements, checked.server, checked.id)
                    )
                    continue
                records.append((seq, checked.t, checked.attacker, checked.victim, checked.server, checked.id))
        mark = self.journal.size
        if not await self._commit(records, batches, mark):
            # Not journaled: nothing applied, nothing acknowledged. The engine loop retries this
            # step every STORAGE_RETRY seconds and reads no more of the queue meanwhile.
            self._held = (records, batches, mark)

    async def _commit(self, records: list[JournalRecord], batches: list[Batch], mark: int) -> bool:
        """Journal and fsync ``records``, then apply them and tell their batches they are done.

        ``mark`` is the journal size before this step. If a write or the fsync fails (a full
        disk, an I/O error), the journal is cut back to ``mark`` — no partial or unsynced record
        is left for a retry to follow, and sequence numbers stay contiguous — and ``False`` is
        returned with nothing applied or acknowledged.
        """
        if records:
            try:
                if self.journal.size != mark:
                    self.journal.rewind(mark)  # a cut that failed last time
                for k in range(0, len(records), 4 * SLICE):
                    self.journal.append(records[k : k + 4 * SLICE])
                    await asyncio.sleep(0)
                # fsync off the event loop; nothing is applied or acknowledged before it returns.
                await asyncio.to_thread(self.journal.sync)
            except OSError as e:
                self._storage_failed("journal", e, seq=record_seq(records[0]), events=len(records))
                try:
                    self.journal.rewind(mark)
                except OSError as cut:
                    log.error("journal_rewind_failed", error=str(cut), errno=cut.errno)
                return False
            self.seq = record_seq(records[-1])
        self._storage_recovered("journal")
        for batch in batches:
            if batch.position is not None:  # what this batch held is journaled: resume after it
                self.positions[batch.position[0]] = batch.position[1]
                self._positions_moved = True
        await self._apply(list(records))
        for batch in batches:
            if batch.done is not None:
                try:
                    batch.done()
                except Exception as e:  # a source's ack failing must not stop the engine
                    log.warning("ack_failed", source=batch.source, error=str(e))
        return True

    async def _apply(self, records: list[JournalRecord | None]) -> None:
        # ``records`` is the engine task's own copy: a refused kill is set to None in it.
        """Score and apply journaled records in slices; the shadows follow every few slices.

        Per kill: with shadow models configured, the primary's prediction is scored first (before
        the update, as offline evaluation does); then ADR applies it. A placement is never
        applied; with shadows, the primary's prediction of each of its pairs is scored. Queries
        get their turn after each slice; after every ``SHADOW_SLICES`` slices (and at the end)
        each shadow model takes the same slices in turn, with a turn for queries after each.
        """
        observe = self.metrics.update_seconds.observe
        models = self.models
        # Without shadows there is nothing to compare the primary with: no scoring, no cost.
        scoring = models.scoring
        observe_primary = models.observers.get(models.primary_name)  # set only when scoring
        engine = self.engine
        apply = engine.apply  # recalibration is handled just below, exactly as Engine.feed does
        predict = engine.predict
        ids_get = engine.ids.get
        window = models.primary  # the primary's predictions are stored inline (see ScoreWindow.add)
        view = window.view
        size = window.size
        pos = window.pos
        scored = 0
        applied_outcome = Outcome.APPLIED
        player_cap = Outcome.PLAYER_CAP
        applied = 0
        placements = 0
        sample = self._sample
        work = 0
        start = 0  # the first record the shadows have not taken yet
        cuts: list[int] = []  # where ADR's slices since then end
        for k, rec in enumerate(records):
            assert rec is not None  # only this loop sets entries to None, behind itself
            if isinstance(rec, PlacementRecord):
                # ADR does not rate matches; its predictions of the pairs are scored all the same.
                if scoring:
                    for a, b in rec.pairs:
                        i = ids_get(a)
                        j = ids_get(b)
                        view[pos] = 0.5 if i is None or j is None else predict(i, j)
                        pos += 1
                        if pos == size:
                            pos = 0
                    scored += len(rec.pairs)
                placements += 1
                work += 1 + len(rec.pairs) // PAIRS_PER_EVENT
            else:
                _, t, attacker, victim, _s, _i = rec
                if scoring:
                    i = ids_get(attacker)
                    j = ids_get(victim)
                    view[pos] = 0.5 if i is None or j is None else predict(i, j)  # §3.1, before the update
                    pos += 1
                    if pos == size:
                        pos = 0
                    scored += 1
                if t >= engine.next_recalibration and engine.recalibration_due_before(attacker, victim, t):
                    # Same point and same result as Engine.feed (and so as replay), but the O(P)
                    # numpy part runs in a worker thread while the loop keeps answering queries;
                    # nothing mutates the engine meanwhile because this task is the only writer.
                    window.commit(pos, scored)  # scrapes may read the window meanwhile
                    scored = 0
                    at = engine.begin_recalibration(t)
                    if at is not None:
                        engine.finish_recalibration(await asyncio.to_thread(engine.plan_recalibration, at))
                sample += 1
                if sample >= UPDATE_SAMPLE:
                    sample = 0
                    t0 = time.perf_counter()
                    outcome = apply(attacker, victim, t)
                    elapsed = time.perf_counter() - t0
                    observe(elapsed)
                    if observe_primary is not None:
                        observe_primary(elapsed)
                else:
                    outcome = apply(attacker, victim, t)
                if outcome is applied_outcome:
                    applied += 1
                else:
                    self._count_outcome(outcome)
                    if outcome is player_cap:
                        records[k] = None  # the shadows skip it too (ModelSet.run_steps)
                work += 1
            if work >= SLICE:
                work = 0
                self.applied += applied  # visible to queries between slices
                applied = 0
                self.placements += placements
                placements = 0
                window.commit(pos, scored)
                scored = 0
                cuts.append(k + 1)
                await asyncio.sleep(0)
                if len(cuts) >= SHADOW_SLICES:
                    await self._shadows(records, start, cuts)  # the same slices, model by model
                    start = cuts[-1]
                    cuts = []
        self.applied += applied
        self.placements += placements
        window.commit(pos, scored)
        self._sample = sample
        await self._shadows(records, start, [*cuts, len(records)])

    async def _shadows(self, records: list[JournalRecord | None], lo: int, cuts: list[int]) -> None:
        """The shadow models take ``records[lo:cuts[-1]]`` in ADR's slices; queries get a turn
        after each slice of each model."""
        for _ in self.models.run_steps(records, lo, cuts):
            await asyncio.sleep(0)

    def _storage_failed(self, op: str, e: OSError, **context: Any) -> None:
        """Count a failed write, raise the alarm, and log it (again at most every interval)."""
        self.storage_errors[op] += 1
        self._storage_failing.add(op)
        now = time.monotonic()
        if now - self._storage_logged.get(op, -STORAGE_LOG_INTERVAL) >= STORAGE_LOG_INTERVAL:
            self._storage_logged[op] = now
            log.error(
                "storage_write_failed",
                op=op,
                errno=e.errno,
                errno_name=errno.errorcode.get(e.errno or 0, "?"),
                error=str(e),
                failures=self.storage_errors[op],
                intake_paused=op == "journal",
                **context,
            )

    def _storage_recovered(self, op: str) -> None:
        if op in self._storage_failing:
            self._storage_failing.discard(op)
            self._storage_logged.pop(op, None)
            log.warning("storage_recovered", op=op, failures=self.storage_errors[op])

    async def _retry_held(self) -> bool:
        """Try the held engine step again; ``True`` once it is journaled, applied and acked."""
        assert self._held is not None
        records, batches, mark = self._held
        if not await self._commit(records, batches, mark):
            return False
        self._held = None
        return True

    def _abandon_held(self) -> None:
        """At stop with the journal still failing: give up the held and queued batches.

        Nothing of them was acknowledged (MQTT redelivers it to the next run); UDP events are
        lost and counted as dropped. No final checkpoint follows (``checkpoint`` skips while a
        batch is held), so the next start remembers no id of the abandoned events.
        """
        assert self._held is not None
        batches = self._held[1]
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
        self._held = None
        self._unjournaled_ids = True

    def _count_reject(self, reject: Reject, source: str) -> None:
        self.rejected[reject.reason.value] += 1
        self.reject_warnings.reject(reject.reason.value, source, reject.detail)

    async def _engine_loop(self) -> None:
        interval = self.settings.daemon.checkpoint_interval
        next_checkpoint = time.monotonic() + interval
        watchdog = sdnotify.watchdog_interval()
        next_ping = time.monotonic()
        while True:
            now = time.monotonic()
            if watchdog is not None and now >= next_ping:
                sdnotify.notify("WATCHDOG=1")
                next_ping = now + watchdog
            if self._held is not None:
                # Intake paused: the queue fills, MQTT stops taking messages (back-pressure to the
                # broker, which redelivers what was not acknowledged), UDP drops and counts.
                if await self._retry_held():
                    continue
                if self.stop.is_set():
                    self._abandon_held()  # then drain and stop as usual, without a checkpoint
                    continue
                wait = STORAGE_RETRY
                if watchdog is not None:
                    wait = min(wait, max(0.01, next_ping - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), timeout=wait)
                continue
            if now >= next_checkpoint:
                await self.checkpoint()
                # A failed checkpoint is tried again sooner (the temporary file was removed).
                retry = min(interval, CHECKPOINT_RETRY) if "checkpoint" in self._storage_failing else interval
                next_checkpoint = time.monotonic() + retry
            if self.stop.is_set() and self.queue.empty():
                self.mqtt_stop.set()
                if self._mqtt_task is None or self._mqtt_task.done():
                    return
            wait = max(0.01, next_checkpoint - time.monotonic())
            if watchdog is not None:
                wait = min(wait, max(0.01, next_ping - time.monotonic()))
            if self.stop.is_set():
                wait = 0.01
            try:
                first = await asyncio.wait_for(self.queue.get(), timeout=wait)
            except TimeoutError:
                continue
            batches = [first]
            events = len(first.items) or 50
            while events < MAX_STEP_EVENTS:
                try:
                    batch = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                batches.append(batch)
                events += len(batch.items) or 50  # an undecoded datagram: about 50 events
            await self._process(batches)

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        """Recover, serve until SIGTERM/SIGINT, drain, checkpoint, return the exit code."""
        self._lock_state_dir()
        try:
            return await self._run()
        finally:
            self.journal.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        servers: list[asyncio.Server] = []
        try:
            return await self._serve(servers)
        finally:
            self.ready = False
            await close_servers(servers)

    async def _serve(self, servers: list[asyncio.Server]) -> int:
        s = self.settings
        # Metrics first: /healthz answers 503 while the state is being loaded.
        if s.metrics.enabled:
            host, port = parse_hostport(s.metrics.listen)
            msrv = await serve_metrics(host, port, self.metrics, lambda: self.ready)
            servers.append(msrv)
            self.bound["metrics"] = msrv.sockets[0].getsockname()[:2]
        # Secrets and TLS files are checked before anything is loaded: a typo fails at start with
        # the key named, instead of surfacing later inside the MQTT task.
        password = load_password(s.mqtt) if s.mqtt.enabled else None
        hl_secrets = load_secrets(s.source_udp) if s.source_udp.enabled else None
        udp_keys = load_udp_keys(s.udp) if s.udp.enabled and s.udp.auth != "off" else None
        if s.mqtt.enabled:
            tls_context(s.mqtt)
        started = time.perf_counter()
        report = await asyncio.to_thread(self.recover)
        self.journal.open_segment(self.seq + 1)
        log.info(
            "state_loaded",
            checkpoint=str(report.checkpoint) if report.checkpoint else None,
            checkpoint_seq=report.checkpoint_seq,
            replayed=report.replayed,
            fallbacks=report.fallbacks,
            truncated_bytes=report.truncated_bytes,
            players=len(self.engine),
            seconds=round(time.perf_counter() - started, 3),
        )
        udp_transport: asyncio.DatagramTransport | None = None
        hl_transport: asyncio.DatagramTransport | None = None
        try:
            handler = QueryHandler(
                lambda: self.engine,
                s.query,
                stats=self.stats,
                observe=lambda op, sec: self.metrics.query_seconds.labels(op=op).observe(sec),
            )
            self.query_handler = handler
            qservers = await serve_query(handler, s.query)
            servers.extend(qservers)
            for srv in qservers:
                name = srv.sockets[0].getsockname()
                self.bound.setdefault("query", name[:2] if isinstance(name, tuple) else name)
            if s.udp.enabled:
                udp_transport, _ = await open_udp(
                    s.udp,
                    self.queue,
                    self.dropped,
                    keys=udp_keys,
                    auth_rejected=self.udp_auth_rejected,
                    state_dir=self.state_dir,
                )
                self.bound["udp"] = udp_transport.get_extra_info("sockname")[:2]
            if s.source_udp.enabled:
                hl_transport, self.hl_udp = await open_hl_udp(
                    s.source_udp, self.queue, self.dropped, hl_secrets
                )
                self.bound["source_udp"] = hl_transport.get_extra_info("sockname")[:2]
            self.followers = self._make_followers()
            # The initial checkpoint makes the recovered state durable before new intake.
            await self.checkpoint()
            self.ready = True
            sdnotify.notify("READY=1")
            log.info(
                "arenad_started", **{k: list(v) if isinstance(v, tuple) else v for k, v in self.bound.items()}
            )
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._engine_loop(), name="engine")
                if s.mqtt.enabled:
                    self._mqtt_task = tg.create_task(
                        run_mqtt(s.mqtt, self.queue, self.mqtt_status, self.mqtt_stop, password),
                        name="mqtt",
                    )
                for follower in self.followers:
                    tg.create_task(follower.run(self.stop), name=follower.spec.key)
                tg.create_task(self._stop_intake_on_signal(udp_transport, hl_transport), name="stopper")
            sdnotify.notify("STOPPING=1")
            await self.checkpoint()
            log.info("arenad_stopped", seq=self.seq, players=len(self.engine))
            return 0
        finally:
            self.ready = False
            for transport in (udp_transport, hl_transport):
                if transport is not None:
                    transport.close()

    def _make_followers(self) -> list[LogFollower]:
        """One follower per ``[[tail]]`` / ``--tail``, resuming from its checkpointed position."""
        if not self.settings.tail:
            return []
        feeds, errors = discover_feeds()
        for error in errors:
            log.warning("feed_plugin_failed", error=error)
        out = []
        for spec in self.settings.tail:
            plugin = feeds.get(spec.format)
            if plugin is None:
                raise ConfigError(
                    [
                        ConfigProblem(
                            "tail.format", spec.format, f"no such feed (known: {', '.join(sorted(feeds))})"
                        )
                    ]
                )
            options = dict(spec.options)
            if spec.server is not None:
                options.setdefault("server", spec.server)
            follower = LogFollower(spec, plugin.parser(options), self.queue, self.positions.get(spec.key))
            out.append(follower)
        return out

    async def _stop_intake_on_signal(self, *udp: asyncio.DatagramTransport | None) -> None:
        await self.stop.wait()
        log.info("stop_requested", queued=self.queue.qsize())
        for transport in udp:
            if transport is not None:
                transport.close()  # no new datagrams; what is queued is still applied
        # Wake the engine task if it is waiting on an empty queue (a full queue wakes it anyway).
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(Batch(source="control", items=[]))


def run_daemon(settings: Settings) -> int:
    """Blocking entry point of ``arenad run``: uvloop when importable, plain asyncio otherwise."""
    daemon = Daemon(settings)
    # The hot path allocates short-lived objects only; long-lived state (names, ids, dedupe keys)
    # would make every full collection walk millions of objects and stall queries for
    # milliseconds. Collect young objects less often and old ones rarely.
    gc.set_threshold(50_000, 20, 100)
    if uvloop is None:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(daemon.run())
    return int(uvloop.run(daemon.run()))
