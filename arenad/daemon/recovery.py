"""Recovery and checkpoints: the state a daemon starts from and the state it leaves behind.

* ``recover``: the newest readable checkpoint (older ones are fallbacks), then the journal tail
  after it through the same applier as live events (``pipeline.daemon_applier``), the shadow
  models after each chunk. A torn last record is cut and counted; a gap in the sequence numbers
  refuses to start (history is missing).
* ``Checkpointer``: rotate the journal, write the checkpoint in a worker thread, then history
  retention (``recompute.Retention``).
* ``offline_recompute``: ``arenad recompute --offline`` over a stopped daemon's directory.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog

from arenad.daemon.clock import DaemonClock
from arenad.daemon.history import load_scopes, rebuild_from_history
from arenad.daemon.intake import Intake
from arenad.daemon.live import LiveState, StorageFaults
from arenad.daemon.metrics import Metrics
from arenad.daemon.pipeline import Pipeline, daemon_applier
from arenad.daemon.ratinghistory import RatingHistory
from arenad.daemon.recompute import RECOMPUTE_FILE, Recomputer, Retention, swap_scopes
from arenad.daemon.shadows import ModelSet
from arenad.daemon.state import Checkpoints, JournalRecord, PlacementRecord, RecoveryReport, StateError
from arenad.daemon.statedir import StateDir
from arenad.errors import ArenadError
from arenad.scopes import ScopeSet
from arenad.settings import Settings

log = structlog.get_logger("arenad")

#: Journal records replayed into the shadows at a time during recovery.
REPLAY_CHUNK = 4096


def recover(
    state: LiveState,
    store: StateDir,
    settings: Settings,
    models: ModelSet,
    clock: DaemonClock,
    *,
    tail: bool = True,
) -> RecoveryReport:
    """Fill ``state`` from the newest valid checkpoint and the journal tail after it.

    ``tail=False`` (a cluster replica): the journal after the checkpoint is cut instead of
    replayed; the replica takes those records from the stream again, from the checkpoint's
    stream position (``arenad.cluster.replica``), numbered exactly as before.
    """
    report = RecoveryReport()
    store.checkpoints.clean_temporaries()
    if store.archive is not None:
        store.archive.open()
    models_state: object = None
    for seq, path in store.checkpoints.list():
        try:
            payload = Checkpoints.read(path)
            scopes = load_scopes(payload, settings.adr, state.scopes.config)
            intake = Intake(settings.daemon)
            intake.import_state(payload.get("dedupe", []))
        except (StateError, ValueError, KeyError, TypeError) as e:
            report.fallbacks += 1
            log.warning("checkpoint_skipped", path=str(path), error=str(e))
            continue
        state.scopes = scopes
        state.intake = intake
        state.seq = seq
        state.applied = int(payload.get("applied", 0))
        state.placements = int(payload.get("placements", 0))
        state.positions = dict(payload.get("positions", {}))
        models_state = payload.get("models")
        report.checkpoint = path
        report.checkpoint_seq = seq
        break
    # Shadow models continue from the same checkpoint as the engine (a checkpoint from before
    # them has none: they start at its sequence number).
    models.import_state(models_state)
    if not tail:
        cut = store.journal.cut_after(state.seq)
        if cut:
            log.info("journal_tail_cut", after_seq=state.seq, records=cut)
        state.checkpoint_seq = report.checkpoint_seq
        return report
    records, truncations = store.journal.replay_after(state.seq)
    # Nothing reads a rank before the tail is replayed: each ladder index is rebuilt once at
    # the end instead of re-keyed per event (Engine.defer_ladder; scopes created meanwhile
    # keep theirs).
    deferred = list(state.scopes.engines.values())
    for engine in deferred:
        engine.defer_ladder()
    try:
        report.replayed += _replay_tail(state, records, models, clock.now())
    finally:
        for engine in deferred:
            engine.keep_ladder()
    report.truncated_bytes = sum(truncations)
    if report.truncated_bytes:
        log.warning("journal_tail_truncated", bytes=report.truncated_bytes)
    state.checkpoint_seq = report.checkpoint_seq
    return report


def _replay_tail(state: LiveState, records: Iterable[JournalRecord], models: ModelSet, now: float) -> int:
    """The journal after the checkpoint through the live step's applier, checking that no
    sequence number is missing; the ids are remembered at ``now``. Returns how many."""
    # The hot loop of a restart (a million records take seconds): the journal's records go
    # through the same applier as live events, a chunk at a time, the shadows after each.
    applier = daemon_applier(state.scopes, models)

    def apply(chunk: list[JournalRecord | None]) -> None:
        applier.apply_chunk(chunk)
        state.count(applier.take())
        models.run(chunk)  # the shadows after the primary, as in the live step

    chunk: list[JournalRecord | None] = []
    last = state.seq
    replayed = 0
    remember = state.intake.remember
    for rec in records:
        seq = rec[0] if isinstance(rec, tuple) else rec.seq
        if seq != last + 1:
            apply(chunk)
            state.seq = last
            raise StateError(f"journal jumps from event {last} to {seq}: history is missing")
        if isinstance(rec, tuple):
            remember(rec[4], rec[5], now)
        elif isinstance(rec, PlacementRecord):
            remember(rec.server, rec.id, now)
        chunk.append(rec)
        if len(chunk) >= REPLAY_CHUNK:
            apply(chunk)
            chunk = []
        last = seq
        replayed += 1
    apply(chunk)
    state.seq = last
    return replayed


def save_sessions(scopes: ScopeSet, ratings: RatingHistory | None) -> OSError | None:
    """The play sessions closed since the last call into the rating history; on a refusal (a
    full disk) they go back, to be written next time and kept in the checkpoint meanwhile."""
    tracker = scopes.sessions
    if ratings is None or tracker is None or not tracker.closed:
        return None
    generation = ratings.generation
    rows = tracker.take_closed()
    try:
        ratings.write(rows, scopes.global_engine.clock, generation)
    except OSError as e:
        tracker.closed[:0] = rows
        return e
    return None


def cut_ratings(ratings: RatingHistory | None, report: RecoveryReport) -> None:
    """At start-up: rows a checkpoint after the one recovered wrote go (the journal's replay
    closes those sessions again, identically)."""
    if ratings is not None:
        cut = ratings.truncate_after(report.checkpoint_seq)
        if cut:
            log.info("rating_history_cut", after_seq=report.checkpoint_seq, rows=cut)


class Checkpointer:
    """Writes checkpoints for the engine task (never two at once); see ``checkpoint``."""

    def __init__(
        self,
        state: LiveState,
        store: StateDir,
        *,
        models: ModelSet,
        pipeline: Pipeline,
        recomputer: Recomputer,
        retention: Retention,
        metrics: Metrics,
        faults: StorageFaults,
        ratings: RatingHistory | None = None,
    ) -> None:
        self.state = state
        self.store = store
        self.models = models
        self.pipeline = pipeline
        self.recomputer = recomputer
        self.retention = retention
        self.metrics = metrics
        self.faults = faults
        self.ratings = ratings
        self.last_success = 0.0
        self.failures = 0

    async def checkpoint(self) -> None:
        """Rotate the journal, snapshot and write in a thread, then retention.

        Only the engine task (and start-up / shutdown around it) calls this, so checkpoints never
        overlap and the engine does not change while its state is copied.
        """
        if self.pipeline.held is not None or self.pipeline.unjournaled_ids:
            # The intake already remembers the held events' ids (duplicate checks) though they are
            # not journaled: a checkpoint now would refuse their redelivery after a restart.
            return
        st = self.state
        seq = st.seq
        swapped = self.recomputer.unsaved
        if (
            seq == st.checkpoint_seq
            and not st.positions_moved
            and not swapped
            and "ratings" not in self.faults.failing  # sessions wait for the rating history
            and self.store.checkpoints.list()
        ):
            return
        started = time.perf_counter()
        written: list[Path] = []
        unsaved: list[OSError] = []

        def write() -> None:
            # Runs in a worker thread while the engine task waits here, so nothing mutates the
            # engine during the copy; queries keep reading it from the event loop meanwhile.
            # The rating history first: what it could not take stays in the checkpoint.
            error = save_sessions(st.scopes, self.ratings)
            if error is not None:
                unsaved.append(error)
            payload = st.checkpoint_payload(self.models.export_state())
            written.append(self.store.checkpoints.write(seq, payload))

        try:
            self.store.journal.open_segment(seq + 1)
            await asyncio.to_thread(write)
        except OSError as e:
            # Checkpoints.write removed its temporary file; the older checkpoints are untouched.
            self.failures += 1
            self.faults.failed("checkpoint", e, seq=seq)
            return
        self.faults.recovered("checkpoint")
        if unsaved:
            self.faults.failed("ratings", unsaved[0], seq=seq)
        elif self.ratings is not None:
            self.faults.recovered("ratings")
        if swapped and self.recomputer.idle:
            self.recomputer.saved()  # the recomputed state is durable now
        st.checkpoint_seq = seq
        st.positions_moved = False
        self.last_success = time.time()
        await self.retention.after_checkpoint(written[0], seq, st.engine.clock)
        elapsed = time.perf_counter() - started
        self.metrics.checkpoint_seconds.observe(elapsed)
        log.debug("checkpoint_written", seq=seq, seconds=round(elapsed, 4))


def offline_recompute(
    settings: Settings, *, scope: str | None = None, from_t: float | None = None
) -> dict[str, Any]:
    """``arenad recompute --offline``: rebuild a stopped daemon's scopes from history, in place.

    Loads the state as the daemon would, replays the archive and journal (all of it, or from
    the newest snapshot before ``from_t``) under the exclusion rules in force, and writes the
    result as a new checkpoint. Refuses to run while a daemon holds the state directory.
    """
    store = StateDir(settings)
    store.lock()
    try:
        ratings = (
            RatingHistory(store.path, settings.history.ratings_days) if settings.history.ratings else None
        )
        state = LiveState(ScopeSet(settings.adr, settings.scope_config()), Intake(settings.daemon))
        models = ModelSet(settings.models, recent=lambda: state.engine.recent_predictions())  # noqa: PLW0108 - the engine of the moment
        clock = DaemonClock(step=settings.daemon.clock_step, adopt_after=settings.daemon.clock_adopt_after)
        cut_ratings(ratings, recover(state, store, settings, models, clock))
        key = None
        if scope is not None and scope != "all":
            try:
                key = state.scopes.resolve(scope)
            except (KeyError, ValueError) as e:
                raise ArenadError(f"--scope {scope!r}: {e.args[0] if e.args else e}") from None
        started = time.perf_counter()
        result = rebuild_from_history(
            store.path,
            settings.adr,
            state.scopes.config,
            state.scopes.exclusions,
            upto=state.seq,
            from_t=from_t,
            snapshots=store.snapshots,
            ratings=None if ratings is None or key not in (None, "global") else ratings.rebuild,
        )
        swapped = swap_scopes(state, result.scopes, key)
        if ratings is not None and result.ratings is not None:
            ratings.replace_with(result.ratings.finish())
        seconds = time.perf_counter() - started
        store.journal.open_segment(state.seq + 1)
        error = save_sessions(state.scopes, ratings)
        if error is not None:
            raise error
        store.checkpoints.write(state.seq, state.checkpoint_payload(models.export_state()))
        (store.path / RECOMPUTE_FILE).unlink(missing_ok=True)
        return {
            "seq": state.seq,
            "base_seq": result.base_seq,
            "records": result.records,
            "scopes": swapped,
            "seconds": round(seconds, 3),
        }
    finally:
        if ratings is not None:
            ratings.close()
        store.close()
