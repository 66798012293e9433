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

Kills and match placements are journaled alike. ADR rates the kills; with shadow models
(``[models] shadows``, ``shadows.py``) every model's prediction of each event is scored first,
and the shadows learn from both kinds after ADR has applied a few slices. Without shadows the
primary's scores come from the engine's own ring of predictions, at scrape time.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import gc
import json
import math
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import structlog

try:
    import uvloop
except ImportError:  # pragma: no cover - not available on every platform
    uvloop = None  # type: ignore[assignment]

from arenad.core.engine import Engine
from arenad.core.events import Reject
from arenad.core.params import TIER_NAMES
from arenad.daemon import sdnotify
from arenad.daemon.admin import AdminHandler, load_token, serve_admin
from arenad.daemon.alloc import fix_mmap_threshold
from arenad.daemon.applier import SLICE, Applier, Rated, RecalibrationDue, SliceEnd, Tally
from arenad.daemon.clock import DaemonClock
from arenad.daemon.config import Section, _off, parse_hostport
from arenad.daemon.history import (
    Archive,
    History,
    RebuildResult,
    Snapshots,
    load_scopes,
    rebuild_from_history,
    retire_segments,
)
from arenad.daemon.intake import Intake
from arenad.daemon.logs import RejectWarnings, configure_level
from arenad.daemon.metrics import Metrics, serve_metrics
from arenad.daemon.notify import Notifier, RatingChange
from arenad.daemon.query import QueryHandler, close_servers, reload_settings, serve_query
from arenad.daemon.shadows import ModelSet, adr_prediction
from arenad.daemon.sources.hl_udp import HlUdpSource, load_secrets, open_hl_udp
from arenad.daemon.sources.mqtt import MqttStatus, load_password, run_mqtt, tls_context
from arenad.daemon.sources.tail import LogFollower
from arenad.daemon.sources.udp import AuthRejectCollector, load_udp_keys, open_udp
from arenad.daemon.state import (
    Checkpoints,
    ControlRecord,
    Journal,
    JournalRecord,
    PlacementRecord,
    Record,
    RecoveryReport,
    StateError,
    record_seq,
)
from arenad.daemon.types import Batch, MetricsSnapshot
from arenad.decode import DecodedRow, decode_msgpack_rows
from arenad.errors import ArenadError
from arenad.feeds import feed_plugin, loaded_feeds
from arenad.fileio import write_atomic
from arenad.scopes import Exclusions, Rule, ScopeConfig, ScopeSet
from arenad.settings import Settings

log = structlog.get_logger("arenad")

#: Slices of ADR's work the shadow models take at a time, one shadow after the other (each slice
#: still followed by a yield): switching between models every slice costs cache misses.
SHADOW_SLICES = 4
#: Journal records replayed into the shadows at a time during recovery.
REPLAY_CHUNK = 4096
#: Events taken from the queue per engine step (one journal write and one fsync cover them).
MAX_STEP_EVENTS = 4096
#: Seconds between attempts to journal a held batch while the state directory refuses writes.
STORAGE_RETRY = 1.0
#: Most seconds between two checkpoint attempts after a failed one (the interval, if shorter).
CHECKPOINT_RETRY = 10.0
#: A storage failure that persists is logged again at most this often (per op), not per attempt.
STORAGE_LOG_INTERVAL = 30.0


#: Records the recompute catches up on in the worker per round while live events keep coming,
#: and at most how many are left for the synchronous last step before the swap.
CATCHUP_SYNC = 5000
CATCHUP_ROUNDS = 20
#: A requested recompute, kept until its result is swapped in (restarted after a crash).
RECOMPUTE_FILE = "recompute.json"


@dataclass(slots=True)
class RecomputeStatus:
    running: bool = False
    scope: str | None = None
    from_t: float | None = None
    reason: str = ""
    runs: int = 0
    failures: int = 0
    error: str | None = None
    seconds: float = 0.0
    records: int = 0
    base_seq: int = 0
    upto: int = 0
    caught_up: int = 0  # live events journaled while it ran, applied on top before the swap
    finished: float = 0.0
    swapped: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "scope": self.scope,
            "from": self.from_t,
            "reason": self.reason,
            "runs": self.runs,
            "failures": self.failures,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "records": self.records,
            "base_seq": self.base_seq,
            "upto": self.upto,
            "caught_up": self.caught_up,
            "finished": self.finished,
            "swapped": list(self.swapped),
        }


def _merge_requests(
    a: tuple[str | None, float | None], b: tuple[str | None, float | None]
) -> tuple[str | None, float | None]:
    """One recompute that covers both: the wider scope (all, unless both name the same) and the
    earlier start (the whole history, unless both give one)."""
    scope = a[0] if a[0] is not None and a[0] == b[0] else None
    from_t = None if a[1] is None or b[1] is None else min(a[1], b[1])
    return scope, from_t


class Daemon:
    """Owns the engine, the journal and every server; ``run`` until stopped."""

    def __init__(self, settings: Settings, reload: Callable[[], Settings] | None = None) -> None:
        self.settings = settings
        self._load_settings = reload  # re-reads the config file for the admin "reload"
        # Wall time for validation, dedupe and signatures, proof against host clock steps.
        self.clock = DaemonClock(
            step=settings.daemon.clock_step, adopt_after=settings.daemon.clock_adopt_after
        )
        self.state_dir = Path(settings.daemon.state_dir)
        self.scopes = ScopeSet(settings.adr, settings.scopes.config())
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
        hist = settings.history
        self.archive: Archive | None = (
            Archive(self.state_dir / "archive", hist.archive_file_bytes) if hist.archive else None
        )
        self.snapshots = Snapshots(self.state_dir / "snapshots", hist.snapshots_kept)
        self._next_snapshot = 0.0  # monotonic time the next checkpoint is kept as a snapshot
        # Held while history files change (archiving, snapshot pruning) and while a recompute or
        # an exclusion scan reads them: a reader never sees a segment vanish under it.
        self.history_lock = asyncio.Lock()
        self.excluded = 0  # kills and placements rated nowhere (exclusion rules)
        self.notifier: Notifier | None = Notifier(settings.notify) if settings.notify.enabled else None
        self.recompute = RecomputeStatus()
        self._pending_recompute: tuple[str | None, float | None, str] | None = None
        self._swapped_unsaved = False  # a recompute result is in memory but in no checkpoint yet
        self._recompute_task: asyncio.Task[None] | None = None
        # Without shadows the primary is scored from the global engine's own ring at scrape time,
        # the engine looked up at each call (recovery and a recompute replace it).
        self.models = ModelSet(
            settings.models,
            recent=lambda: self.engine.recent_predictions(),  # noqa: PLW0108 - see above
        )
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
        self._query_servers: list[asyncio.Server] = []
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
        self._step_started = -math.inf  # time.monotonic() of the last engine step (group commit)
        self._query_observers: dict[str, Callable[[float], None]] = {}

    @property
    def scope_config(self) -> ScopeConfig:
        """What [scopes] configures now (``reload`` replaces it on the live ScopeSet)."""
        return self.scopes.config

    @property
    def engine(self) -> Engine:
        """The global ladder (the primary model's, scored against the shadows)."""
        return self.scopes.global_engine

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
            scopes=self._scope_figures(),
            scope_counts=self.scopes.kind_counts(),
            scopes_refused=sum(self.scopes.refused.values()),
            excluded=self.excluded,
            exclusion_rules=len(self.scopes.exclusions.rules),
            recompute_running=self.recompute.running,
            recompute_runs=self.recompute.runs,
            recompute_failures=self.recompute.failures,
            archive_bytes=0 if self.archive is None else self.archive.total_bytes,
            archive_last_seq=0 if self.archive is None else self.archive.last_seq,
            clock_jumps=self.clock.jumps,
            time_clamped=self.intake.clamped,
            clock_offset=self.clock.offset,
            notify=None
            if self.notifier is None or not self.notifier.enabled
            else (self.notifier.connected, self.notifier.published, self.notifier.dropped),
        )

    def _scope_figures(self) -> dict[str, tuple[int, int, int]]:
        """Series for the global ladder, the current season, events and configured servers."""
        sc = self.scopes
        listed = {f"server:{s}" for s in self.settings.scopes.servers}
        out = {}
        for key, eng in sc.engines.items():
            kind = key.partition(":")[0]
            if kind == "server" and key not in listed:
                continue
            if kind == "season" and key in sc.closed:
                continue
            out[key] = (len(eng), eng.active_count, eng.applied)
        return out

    def stats(self) -> dict[str, Any]:
        """Daemon figures merged into the query ``stats`` answer."""
        return {
            "received": dict(self.received),
            "rejected_by_daemon": dict(self.rejected),
            "dropped": dict(self.dropped),
            "udp_auth_rejected": dict(self.udp_auth_rejected),
            "journal_seq": self.seq,
            "excluded": self.excluded,
            "recompute": self.recompute.as_dict(),
            "season": self.scopes.season,
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
        if self.archive is not None:
            self.archive.open()
        models_state: object = None
        for seq, path in self.checkpoints.list():
            try:
                payload = Checkpoints.read(path)
                scopes = load_scopes(payload, self.settings.adr, self.scope_config)
                intake = Intake(self.settings.daemon)
                intake.import_state(payload.get("dedupe", []))
            except (StateError, ValueError, KeyError, TypeError) as e:
                report.fallbacks += 1
                log.warning("checkpoint_skipped", path=str(path), error=str(e))
                continue
            self.scopes = scopes
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
        # Nothing reads a rank before the tail is replayed: each ladder index is rebuilt once at
        # the end instead of re-keyed per event (Engine.defer_ladder; scopes created meanwhile
        # keep theirs).
        deferred = list(self.scopes.engines.values())
        for engine in deferred:
            engine.defer_ladder()
        # The hot loop of a restart (a million records take seconds): the journal's records go
        # through the same applier as live events, a chunk at a time, the shadows after each.
        applier = self._applier(self.scopes)
        chunk: list[JournalRecord | None] = []
        now = self.clock.now()
        last = self.seq
        replayed = 0
        remember = self.intake.remember
        for rec in records:
            seq = rec[0] if isinstance(rec, tuple) else rec.seq
            if seq != last + 1:
                self._recover_chunk(applier, chunk)
                self.seq = last
                raise StateError(f"journal jumps from event {last} to {seq}: history is missing")
            if isinstance(rec, tuple):
                remember(rec[4], rec[5], now)
            elif isinstance(rec, PlacementRecord):
                remember(rec.server, rec.id, now)
            chunk.append(rec)
            if len(chunk) >= REPLAY_CHUNK:
                self._recover_chunk(applier, chunk)  # the shadows after the primary, as in _process
                chunk = []
            last = seq
            replayed += 1
        self._recover_chunk(applier, chunk)
        self.seq = last
        for engine in deferred:
            engine.keep_ladder()
        report.replayed += replayed
        report.truncated_bytes = sum(truncations)
        if report.truncated_bytes:
            log.warning("journal_tail_truncated", bytes=report.truncated_bytes)
        self.checkpoint_seq = report.checkpoint_seq
        self.recovery = report
        return report

    def _applier(self, scopes: ScopeSet, *, live: bool = False) -> Applier:
        """The record applier over ``scopes`` with the daemon's reading of exclusion rules (from
        their journaled point on) and, when shadows are configured, the primary's scoring."""
        models = self.models
        score_kill: Callable[[Engine, str, str], None] | None = None
        score_placement: Callable[[Engine, PlacementRecord], None] | None = None
        observe: Callable[[float], None] | None = None
        if models.scoring:
            window = models.primary

            def score_kill(eng: Engine, attacker: str, victim: str) -> None:
                window.add(adr_prediction(eng, attacker, victim))

            score_placement = models.score_primary_placement
        if live:
            update = self.metrics.update_seconds.observe
            primary = models.observers.get(models.primary_name)  # set only when scoring
            if primary is None:
                observe = update
            else:

                def observe(seconds: float) -> None:
                    update(seconds)
                    primary(seconds)

        return Applier(
            scopes,
            rules="journal",
            notify=live and self.notifier is not None and self.notifier.enabled,
            score_kill=score_kill,
            score_placement=score_placement,
            observe=observe,
            sample=self._sample,
            slice_events=SLICE if live else 0,
        )

    def _recover_chunk(self, applier: Applier, chunk: list[JournalRecord | None]) -> None:
        """Journal records at start-up: applied (recalibrations in place), then the shadows."""
        applier.apply_chunk(chunk)
        self._count(applier.take())
        self.models.run(chunk)

    def _count(self, tally: Tally) -> None:
        self.applied += tally.applied
        self.placements += tally.placements
        self.excluded += tally.excluded + tally.excluded_placements
        if tally.filtered:
            self.filtered["cooldown"] += tally.filtered
        if tally.rejected:
            self.rejected.update(tally.rejected)

    def _checkpoint_payload(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "created": time.time(),
            "applied": self.applied,
            "placements": self.placements,
            "scopes": self.scopes.export_state(),
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
        swapped = self._swapped_unsaved
        if (
            seq == self.checkpoint_seq
            and not self._positions_moved
            and not swapped
            and self.checkpoints.list()
        ):
            return
        started = time.perf_counter()

        written: list[Path] = []

        def write() -> None:
            # Runs in a worker thread while the engine task waits here, so nothing mutates the
            # engine during the copy; queries keep reading it from the event loop meanwhile.
            written.append(self.checkpoints.write(seq, self._checkpoint_payload()))

        try:
            self.journal.open_segment(seq + 1)
            await asyncio.to_thread(write)
        except OSError as e:
            # Checkpoints.write removed its temporary file; the older checkpoints are untouched.
            self.checkpoint_failures += 1
            self._storage_failed("checkpoint", e, seq=seq)
            return
        self._storage_recovered("checkpoint")
        if swapped and self._pending_recompute is None and not self.recompute.running:
            # The recomputed state is durable now: a crash from here on recovers it.
            self._swapped_unsaved = False
            (self.state_dir / RECOMPUTE_FILE).unlink(missing_ok=True)
        self.checkpoint_seq = seq
        self._positions_moved = False
        self.checkpoint_last_success = time.time()
        await self._keep_history(written[0], seq)
        elapsed = time.perf_counter() - started
        self.metrics.checkpoint_seconds.observe(elapsed)
        log.debug("checkpoint_written", seq=seq, seconds=round(elapsed, 4))

    # ------------------------------------------------------------------ recompute
    def request_recompute(self, scope: str | None, from_t: float | None, reason: str) -> dict[str, Any]:
        """Start a background recompute (or queue one behind the running one); the status.

        ``scope`` is a scope key (None: every scope); ``from_t`` an event time to replay from
        (the newest snapshot before it; None: the whole history). The request is written to
        ``recompute.json`` first, so a crash before the swap restarts it at the next start.
        """
        pending = self._pending_recompute
        if pending is not None:
            scope, from_t = _merge_requests((scope, from_t), pending[:2])
        self._pending_recompute = (scope, from_t, reason)
        # The file covers the running request too: after a crash one recompute redoes both.
        durable = (scope, from_t)
        if self.recompute.running:
            durable = _merge_requests(durable, (self.recompute.scope, self.recompute.from_t))
        write_atomic(
            self.state_dir / RECOMPUTE_FILE,
            json.dumps({"scope": durable[0], "from": durable[1], "reason": reason}).encode(),
        )
        if self._recompute_task is None or self._recompute_task.done():
            self._recompute_task = asyncio.create_task(self._recompute_loop(), name="recompute")
        return self.recompute.as_dict()

    async def _recompute_loop(self) -> None:
        while self._pending_recompute is not None:
            scope, from_t, reason = self._pending_recompute
            self._pending_recompute = None
            try:
                await self._recompute_once(scope, from_t, reason)
            except Exception as e:  # a failed recompute leaves the live state as it was
                self.recompute.failures += 1
                self.recompute.error = f"{type(e).__name__}: {e}"
                log.error("recompute_failed", scope=scope, error=self.recompute.error, exc_info=e)
            finally:
                self.recompute.running = False
        # recompute.json goes once a checkpoint holds the swapped-in state (checkpoint()).
        self._swapped_unsaved = True

    async def _recompute_once(self, scope: str | None, from_t: float | None, reason: str) -> None:
        st = self.recompute
        st.running = True
        st.scope = scope
        st.from_t = from_t
        st.reason = reason
        st.error = None
        started = time.perf_counter()
        upto = self.seq  # journaled and fsynced: the worker reads it from disk
        rules = list(self.scopes.exclusions.rules)
        log.info("recompute_started", scope=scope, from_t=from_t, upto=upto, reason=reason, rules=len(rules))
        async with self.history_lock:
            result, target, swapped = await self._rebuild_and_swap(scope, from_t, upto, rules)
        st.runs += 1
        st.seconds = time.perf_counter() - started
        st.records = result.records + (target - upto)
        st.caught_up = target - upto
        st.base_seq = result.base_seq
        st.upto = target
        st.swapped = swapped
        st.finished = time.time()
        self.metrics.recompute_seconds.observe(st.seconds)
        log.info(
            "recompute_swapped",
            scope=scope,
            base_seq=result.base_seq,
            upto=target,
            records=st.records,
            scopes=swapped,
            seconds=round(st.seconds, 3),
        )

    async def _rebuild_and_swap(
        self, scope: str | None, from_t: float | None, upto: int, rules: list[Rule]
    ) -> tuple[RebuildResult, int, list[str]]:
        """Rebuild up to ``upto`` in a worker, catch up on live events, swap; under history_lock."""
        result = await asyncio.to_thread(
            rebuild_from_history,
            self.state_dir,
            self.settings.adr,
            self.scope_config,
            Exclusions(rules),
            upto=upto,
            from_t=from_t,
            snapshots=self.snapshots,
        )
        new = result.scopes
        caught = upto
        # Live events kept flowing meanwhile: catch up in the worker while far behind...
        for _ in range(CATCHUP_ROUNDS):
            if self.seq - caught <= CATCHUP_SYNC:
                break
            target = self.seq
            await asyncio.to_thread(self._catch_up, new, caught, target)
            caught = target
        # ...then the last few synchronously, and swap in the same step: no await between
        # reading self.seq and the swap, so no journaled event is missed or applied twice.
        target = self.seq
        self._catch_up(new, caught, target)
        return result, target, self._swap_scopes(new, scope)

    def _catch_up(self, scopes: ScopeSet, after: int, upto: int) -> None:
        """Journaled records after..upto into ``scopes``, with the daemon's live semantics
        (exclusion rules from their journaled point on; the shadows are not recomputed)."""
        if upto <= after:
            return
        applier = Applier(scopes, rules="journal")
        applier.apply_all(History(self.state_dir, self.archive_reader()).records(after, upto))

    def archive_reader(self) -> Archive:
        """An Archive over the same files, for reading in a worker thread (under history_lock)."""
        a = Archive(self.state_dir / "archive")
        if self.archive is not None:
            a.files = [dict(f) for f in self.archive.files]
        else:
            a.load()
        return a

    def _swap_scopes(self, new: ScopeSet, scope: str | None) -> list[str]:
        """Put the recomputed state in place: all of it, or one scope's engine."""
        if scope is None:
            new.exclusions = Exclusions(list(self.scopes.exclusions.rules))
            if new.config is not self.scopes.config:  # a reload while it ran
                new.reconfigure(self.scopes.config)
            self.scopes = new
            return new.keys()
        if scope in new.engines:
            self.scopes.engines[scope] = new.engines[scope]
            return [scope]
        return []

    async def _keep_history(self, checkpoint: Path, seq: int) -> None:
        """After a checkpoint: keep it as a snapshot when one is due, then archive and remove
        the journal segments the oldest kept checkpoint covers (not while a reader holds history)."""
        h = self.settings.history
        now = time.monotonic()
        if self.history_lock.locked():
            return  # a recompute or an exclusion scan reads history now: at the next checkpoint
        try:
            async with self.history_lock:
                if now >= self._next_snapshot:
                    clock = self.engine.clock
                    await asyncio.to_thread(
                        self.snapshots.add, checkpoint, seq, clock if math.isfinite(clock) else 0.0
                    )
                    self._next_snapshot = now + h.snapshot_interval
                kept = self.checkpoints.list()
                if kept:
                    await asyncio.to_thread(retire_segments, self.journal, self.archive, kept[-1][0])
        except (OSError, StateError) as e:
            self._storage_failed("archive", e if isinstance(e, OSError) else OSError(0, str(e)), seq=seq)
            return
        self._storage_recovered("archive")

    # ------------------------------------------------------------------ the engine task
    async def _process(self, batches: list[Batch]) -> None:
        now = self.clock.now()
        records: list[JournalRecord] = []
        rejects: list[Reject] = []
        check_rows = self.intake.check_rows
        count_reject = self._count_reject
        # Decoding and checking an event costs a fraction of applying it: yield to queries and
        # sources after about as much work as one of _apply's slices.
        slice_events = 2 * SLICE
        seq = self.seq
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
            self.received[source] += n
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
        self.metrics.step_events.observe(taken)
        mark = self.journal.size
        if not await self._commit(records, batches, mark):
            # Not journaled: nothing applied, nothing acknowledged. The engine loop retries this
            # step every STORAGE_RETRY seconds and reads no more of the queue meanwhile.
            for batch, payload in consumed:
                batch.payload = payload
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
                # Chunks of 128 records: well under 0.1 ms of encoding each, one write and one yield.
                chunk = 4 * SLICE
                for k in range(0, len(records), chunk):
                    self.journal.append(records[k : k + chunk] if len(records) > chunk else records)
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

        ``self.scopes`` is read once: a recompute that swaps in a new set meanwhile has already
        applied this step's records to it (it catches up on everything journaled), so the rest
        of the step must not reach it a second time.
        """
        applier = self._applier(self.scopes, live=True)
        start = 0  # the first record the shadows have not taken yet
        cuts: list[int] = []  # where ADR's slices since then end
        for cmd in applier.run(records):
            if type(cmd) is SliceEnd:
                applier.drain(self._count)  # visible to queries between slices
                cuts.append(cmd.upto)
                await asyncio.sleep(0)
                if len(cuts) >= SHADOW_SLICES:
                    await self._shadows(records, start, cuts)  # the same slices, model by model
                    start = cuts[-1]
                    cuts = []
            elif type(cmd) is RecalibrationDue:
                await self._recalibrate(cmd.engine, cmd.t)
            else:
                assert type(cmd) is Rated
                self._notify_changes(cmd.engine, cmd.record, cmd.before)
        applier.drain(self._count)
        self._sample = applier.sample
        await self._shadows(records, start, [*cuts, len(records)])

    @staticmethod
    async def _recalibrate(eng: Engine, t: float) -> None:
        """``Engine.recalibrate(t)`` with the O(P) numpy plan in a worker thread: same point and
        same result as ``Engine.feed`` (and so as replay) while the loop keeps answering queries;
        nothing mutates the engine meanwhile because the engine task is the only writer."""
        at = eng.begin_recalibration(t)
        if at is not None:
            eng.finish_recalibration(await asyncio.to_thread(eng.plan_recalibration, at))

    def _notify_changes(self, g: Engine, rec: Record, before: tuple[int, int]) -> None:
        notifier = self.notifier
        assert notifier is not None
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
            notifier.offer(
                RatingChange(
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
                )
            )

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

    def _observe_query(self, op: str, seconds: float) -> None:
        """A query's latency into arenad_query_seconds{op}; the labelled child is looked up once
        per op (labels() costs more than the observation). The op labels are bounded (query.OPS
        and INVALID_OP), so is this map."""
        observe = self._query_observers.get(op)
        if observe is None:
            observe = self._query_observers[op] = self.metrics.query_seconds.labels(op=op).observe
        observe(seconds)

    def _count_reject(self, reject: Reject, source: str) -> None:
        self.rejected[reject.reason.value] += 1
        self.reject_warnings.reject(reject.reason.value, source, reject.detail)

    async def _engine_loop(self) -> None:
        interval = self.settings.daemon.checkpoint_interval
        commit_interval = self.settings.daemon.commit_interval
        next_checkpoint = time.monotonic()  # the first one at once (after recovery: see _serve)
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
            if now < due and not self.stop.is_set():
                await asyncio.sleep(due - now)
                now = time.monotonic()
            self._step_started = now
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
            native_kernel=self.engine.native,  # False: built without a C compiler (docs/performance.md)
        )
        udp_transport: asyncio.DatagramTransport | None = None
        hl_transport: asyncio.DatagramTransport | None = None
        try:
            handler = QueryHandler(
                lambda: self.scopes,
                s.query,
                stats=self.stats,
                observe=self._observe_query,
            )
            self.query_handler = handler
            qservers = await serve_query(handler, s.query)
            self._query_servers = qservers
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
                    clock_ms=self.clock.now_ms,
                )
                self.bound["udp"] = udp_transport.get_extra_info("sockname")[:2]
            if s.source_udp.enabled:
                hl_transport, self.hl_udp = await open_hl_udp(
                    s.source_udp, self.queue, self.dropped, hl_secrets
                )
                self.bound["source_udp"] = hl_transport.get_extra_info("sockname")[:2]
            self.followers = self._make_followers()
            servers.extend(await self._start_admin())
            # Ready before the first checkpoint: the recovered state is already durable (the
            # checkpoint it came from plus the journal tail, torn tail cut); the engine task
            # writes a checkpoint first thing, so the next start replays little, while queries
            # are answered and intake queues meanwhile.
            self.ready = True
            sdnotify.notify("READY=1")
            log.info(
                "arenad_started", **{k: list(v) if isinstance(v, tuple) else v for k, v in self.bound.items()}
            )
            pending = self.state_dir / RECOMPUTE_FILE
            if pending.exists():  # requested before a crash or a stop: its result never landed
                try:
                    req = json.loads(pending.read_bytes())
                    self.request_recompute(
                        req.get("scope"), req.get("from"), str(req.get("reason", "restart"))
                    )
                except (ValueError, AttributeError) as e:
                    log.error("recompute_request_unreadable", path=str(pending), error=str(e))
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._engine_loop(), name="engine")
                if self.notifier is not None and self.notifier.enabled:
                    tg.create_task(self.notifier.run(self.mqtt_stop), name="notify")
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
            if self._recompute_task is not None and not self._recompute_task.done():
                self._recompute_task.cancel()  # recompute.json stays: it runs again at the next start
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._recompute_task
            for transport in (udp_transport, hl_transport):
                if transport is not None:
                    transport.close()

    async def _start_admin(self) -> list[asyncio.Server]:
        a = self.settings.admin
        token = load_token(a.token_file) if a.token_file else None
        unix = None
        if not _off(a.unix):
            unix = Path(a.unix)
            if not unix.is_absolute():
                unix = self.state_dir.absolute() / unix
        self.admin = AdminHandler(self, self.reload if self._load_settings is not None else None)
        servers = await serve_admin(self.admin, unix, a.listen if a.tcp_enabled else None, token)
        for srv in servers:
            name = srv.sockets[0].getsockname()
            self.bound.setdefault(
                "admin" if isinstance(name, str) else "admin_tcp", name if isinstance(name, str) else name[:2]
            )
        return servers

    #: Keys ``reload`` may change in a running daemon; anything else needs a restart.
    RELOADABLE: ClassVar[dict[str, frozenset[str]]] = {
        "scopes": frozenset({"event", "season", "season_reset", "season_alpha", "season_lambda", "servers"}),
        "log": frozenset({"level", "reject_warning_interval"}),
        "query": frozenset({"rate_limit", "burst", "max_top", "display_k"}),
    }

    def reload(self) -> list[str]:
        """Re-read the config file and apply what can change live; names every key that cannot.

        New event windows that started in the past are filled in by a recompute of that scope.
        """
        assert self._load_settings is not None
        new = self._load_settings()
        old = self.settings
        changed: list[str] = []
        blocked: list[str] = []
        for section in Settings.model_fields:
            a, b = getattr(old, section), getattr(new, section)
            if a == b:
                continue
            if not isinstance(a, Section):  # [[tail]], [adr] as a whole
                blocked.append(section)
                continue
            allowed = self.RELOADABLE.get(section, frozenset())
            for name, spec in type(a).model_fields.items():
                if getattr(a, name) != getattr(b, name):
                    key = f"{section}.{spec.alias or name}"
                    (changed if name in allowed else blocked).append(key)
        if blocked:
            raise ArenadError(f"reload refused: {', '.join(blocked)} can only change with a restart")
        self.settings = new
        self.scopes.reconfigure(new.scopes.config())
        if self.query_handler is not None:
            self.query_handler.settings = new.query
        reload_settings(self._query_servers, new.query)
        if new.log.level != old.log.level:
            configure_level(new.log.level)
        self.reject_warnings.interval = new.log.reject_warning_interval
        old_events = {e.name for e in old.scopes.config().events}
        clock = self.engine.clock
        for ev in self.scope_config.events:
            if ev.name not in old_events and ev.start < clock:
                self.request_recompute(None, ev.start, f"reload: event {ev.name} started in the past")
        log.info("config_reloaded", changed=changed)
        return changed

    def _make_followers(self) -> list[LogFollower]:
        """One follower per ``[[tail]]`` / ``--tail``, resuming from its checkpointed position."""
        if not self.settings.tail:
            return []
        for error in loaded_feeds()[1]:
            log.warning("feed_plugin_failed", error=error)
        out = []
        for spec in self.settings.tail:
            plugin = feed_plugin(spec.format, key="tail.format")
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


def run_daemon(settings: Settings, reload: Callable[[], Settings] | None = None) -> int:
    """Blocking entry point of ``arenad run``: uvloop when importable, plain asyncio otherwise."""
    daemon = Daemon(settings, reload)
    # The hot path allocates short-lived objects only; long-lived state (names, ids, dedupe keys)
    # would make every full collection walk millions of objects and stall queries for
    # milliseconds. Collect young objects less often and old ones rarely.
    gc.set_threshold(50_000, 20, 100)
    # Large transient arrays (recalibration) must go back to the system when freed, not stay in
    # the resident set as heap holes (arenad/daemon/alloc.py).
    log.info("allocator", mmap_threshold_fixed=fix_mmap_threshold())
    if uvloop is None:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(daemon.run())
    return int(uvloop.run(daemon.run()))


def offline_recompute(
    settings: Settings, *, scope: str | None = None, from_t: float | None = None
) -> dict[str, Any]:
    """``arenad recompute --offline``: rebuild a stopped daemon's scopes from history, in place.

    Loads the state as the daemon would, replays the archive and journal (all of it, or from
    the newest snapshot before ``from_t``) under the exclusion rules in force, and writes the
    result as a new checkpoint. Refuses to run while a daemon holds the state directory.
    """
    daemon = Daemon(settings)
    daemon._lock_state_dir()
    try:
        daemon.recover()
        key = None
        if scope is not None and scope != "all":
            try:
                key = daemon.scopes.resolve(scope)
            except (KeyError, ValueError) as e:
                raise ArenadError(f"--scope {scope!r}: {e.args[0] if e.args else e}") from None
        started = time.perf_counter()
        result = rebuild_from_history(
            daemon.state_dir,
            settings.adr,
            daemon.scope_config,
            daemon.scopes.exclusions,
            upto=daemon.seq,
            from_t=from_t,
            snapshots=daemon.snapshots,
        )
        swapped = daemon._swap_scopes(result.scopes, key)
        seconds = time.perf_counter() - started
        daemon.journal.open_segment(daemon.seq + 1)
        daemon.checkpoints.write(daemon.seq, daemon._checkpoint_payload())
        (daemon.state_dir / RECOMPUTE_FILE).unlink(missing_ok=True)
        return {
            "seq": daemon.seq,
            "base_seq": result.base_seq,
            "records": result.records,
            "scopes": swapped,
            "seconds": round(seconds, 3),
        }
    finally:
        daemon.journal.close()
        if daemon._lock_fd is not None:
            os.close(daemon._lock_fd)
