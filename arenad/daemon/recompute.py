"""Background recompute and history retention.

A recompute re-rates history (the archive and the journal, all of it or from the newest
snapshot before a point in time) under the exclusion rules in force now, in a worker thread
while live events keep coming; it then catches up on what was journaled meanwhile and swaps the
result in within one engine-loop turn, so no journaled event is missed or applied twice. The
request is written to ``recompute.json`` first: a crash before the result is in a checkpoint
runs it again at the next start.

Retention runs after every checkpoint: the checkpoint is kept as a snapshot when one is due
(``[history] snapshot_interval``), and journal segments the oldest kept checkpoint covers are
archived (``[history] archive``) and removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.daemon.config import HistorySettings
from arenad.daemon.history import Archive, History, RebuildResult, rebuild_from_history, retire_segments
from arenad.daemon.live import LiveState, StorageFaults
from arenad.daemon.metrics import Metrics
from arenad.daemon.ratinghistory import RatingHistory
from arenad.daemon.state import StateError
from arenad.daemon.statedir import StateDir
from arenad.fileio import write_atomic
from arenad.scopes import Exclusions, Rule, ScopeSet

log = structlog.get_logger("arenad")

#: Records the recompute catches up on in the worker per round while live events keep coming,
#: and at most how many are left for the synchronous last step before the swap.
CATCHUP_SYNC = 5000
CATCHUP_ROUNDS = 20
#: A requested recompute, kept until its result is swapped in (restarted after a crash).
RECOMPUTE_FILE = "recompute.json"

Request = tuple[str | None, float | None]


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


def merge_requests(a: Request, b: Request) -> Request:
    """One recompute that covers both: the wider scope (all, unless both name the same) and the
    earlier start (the whole history, unless both give one)."""
    scope = a[0] if a[0] is not None and a[0] == b[0] else None
    from_t = None if a[1] is None or b[1] is None else min(a[1], b[1])
    return scope, from_t


def swap_scopes(state: LiveState, new: ScopeSet, scope: str | None) -> list[str]:
    """Put a recomputed ``new`` in place in ``state``: all of it (``scope`` None, keeping the
    live exclusion rules and configuration) or one scope's engine. Returns the keys swapped."""
    if scope is None:
        new.exclusions = Exclusions(list(state.scopes.exclusions.rules))
        if new.config is not state.scopes.config:  # a reload while it ran
            new.reconfigure(state.scopes.config)
        state.scopes = new
        return new.keys()
    if scope in new.engines:
        state.scopes.engines[scope] = new.engines[scope]
        if scope == "global":  # the play sessions are the global ladder's
            state.scopes.sessions = new.sessions
        return [scope]
    return []


def catch_up(state_dir: Path, archive: Archive, scopes: ScopeSet, after: int, upto: int) -> None:
    """Journaled records after..upto into ``scopes``, with the daemon's live semantics
    (exclusion rules from their journaled point on; the shadows are not recomputed)."""
    if upto <= after:
        return
    Applier(scopes, rules="journal").apply_all(History(state_dir, archive).records(after, upto))


class Recomputer:
    """Runs requested recomputes one after the other in the background; see the module docstring."""

    def __init__(
        self,
        state: LiveState,
        store: StateDir,
        params: ADRParams,
        metrics: Metrics,
        ratings: RatingHistory | None = None,
    ) -> None:
        self.state = state
        self.store = store
        self.params = params
        self.metrics = metrics
        self.ratings = ratings
        self.status = RecomputeStatus()
        self._pending: tuple[str | None, float | None, str] | None = None
        self.unsaved = False  # a recompute result is in memory but in no checkpoint yet
        self._task: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        """Nothing running and nothing queued."""
        return self._pending is None and not self.status.running

    def request(self, scope: str | None, from_t: float | None, reason: str) -> dict[str, Any]:
        """Start a background recompute (or queue one behind the running one); the status.

        ``scope`` is a scope key (None: every scope); ``from_t`` an event time to replay from
        (the newest snapshot before it; None: the whole history). The request is written to
        ``recompute.json`` first, so a crash before the swap restarts it at the next start.
        """
        pending = self._pending
        if pending is not None:
            scope, from_t = merge_requests((scope, from_t), pending[:2])
        self._pending = (scope, from_t, reason)
        # The file covers the running request too: after a crash one recompute redoes both.
        durable = (scope, from_t)
        if self.status.running:
            durable = merge_requests(durable, (self.status.scope, self.status.from_t))
        write_atomic(
            self.store.path / RECOMPUTE_FILE,
            json.dumps({"scope": durable[0], "from": durable[1], "reason": reason}).encode(),
        )
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="recompute")
        return self.status.as_dict()

    def resume(self) -> None:
        """At start-up: run again a recompute requested before a crash or a stop."""
        pending = self.store.path / RECOMPUTE_FILE
        if not pending.exists():
            return
        try:
            req = json.loads(pending.read_bytes())
            self.request(req.get("scope"), req.get("from"), str(req.get("reason", "restart")))
        except (ValueError, AttributeError) as e:
            log.error("recompute_request_unreadable", path=str(pending), error=str(e))

    def saved(self) -> None:
        """A checkpoint now holds the swapped-in state: a crash from here on recovers it."""
        self.unsaved = False
        (self.store.path / RECOMPUTE_FILE).unlink(missing_ok=True)

    async def cancel(self) -> None:
        """At stop: ``recompute.json`` stays, so it runs again at the next start."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # its failure was logged
                await self._task

    async def _loop(self) -> None:
        while self._pending is not None:
            scope, from_t, reason = self._pending
            self._pending = None
            try:
                await self._once(scope, from_t, reason)
            except Exception as e:  # a failed recompute leaves the live state as it was
                self.status.failures += 1
                self.status.error = f"{type(e).__name__}: {e}"
                log.error("recompute_failed", scope=scope, error=self.status.error, exc_info=e)
            finally:
                self.status.running = False
        # recompute.json goes once a checkpoint holds the swapped-in state (Checkpointer).
        self.unsaved = True

    async def _once(self, scope: str | None, from_t: float | None, reason: str) -> None:
        st = self.status
        st.running = True
        st.scope = scope
        st.from_t = from_t
        st.reason = reason
        st.error = None
        started = time.perf_counter()
        upto = self.state.seq  # journaled and fsynced: the worker reads it from disk
        rules = list(self.state.scopes.exclusions.rules)
        log.info("recompute_started", scope=scope, from_t=from_t, upto=upto, reason=reason, rules=len(rules))
        async with self.store.history_lock:
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
        store = self.store
        ratings = self.ratings if scope in (None, "global") else None  # the global ladder's
        result = await asyncio.to_thread(
            rebuild_from_history,
            store.path,
            self.params,
            self.state.scopes.config,
            Exclusions(rules),
            upto=upto,
            from_t=from_t,
            snapshots=store.snapshots,
            ratings=None if ratings is None else ratings.rebuild,
        )
        new = result.scopes
        rebuilt = result.ratings
        try:
            caught = upto
            # Live events kept flowing meanwhile: catch up in the worker while far behind...
            for _ in range(CATCHUP_ROUNDS):
                if self.state.seq - caught <= CATCHUP_SYNC:
                    break
                target = self.state.seq
                await asyncio.to_thread(catch_up, store.path, store.archive_reader(), new, caught, target)
                caught = target
            # ...then the last few synchronously, and swap in the same step: no await between
            # reading state.seq and the swap, so no journaled event is missed or applied twice.
            target = self.state.seq
            catch_up(store.path, store.archive_reader(), new, caught, target)
            if ratings is not None and rebuilt is not None:
                rebuilt.drain(new)
                ratings.replace_with(rebuilt.finish())
                rebuilt = None
        finally:
            if rebuilt is not None:  # failed or cancelled before the swap: the live one stays
                rebuilt.discard()
        return result, target, swap_scopes(self.state, new, scope)


class Retention:
    """After each checkpoint: a snapshot when due, then archive and retire journal segments."""

    def __init__(self, store: StateDir, settings: HistorySettings, faults: StorageFaults) -> None:
        self.store = store
        self.settings = settings
        self.faults = faults
        self._next_snapshot = 0.0  # monotonic time the next checkpoint is kept as a snapshot

    async def after_checkpoint(self, checkpoint: Path, seq: int, clock: float) -> None:
        """Keep ``checkpoint`` (of event time ``clock``) as a snapshot when one is due, then
        archive and remove the segments the oldest kept checkpoint covers; not while a reader
        holds history (then at the next checkpoint)."""
        store = self.store
        now = time.monotonic()
        if store.history_lock.locked():
            return  # a recompute or an exclusion scan reads history now
        try:
            async with store.history_lock:
                if now >= self._next_snapshot:
                    await asyncio.to_thread(
                        store.snapshots.add, checkpoint, seq, clock if math.isfinite(clock) else 0.0
                    )
                    self._next_snapshot = now + self.settings.snapshot_interval
                kept = store.checkpoints.list()
                if kept:
                    await asyncio.to_thread(retire_segments, store.journal, store.archive, kept[-1][0])
        except (OSError, StateError) as e:
            self.faults.failed("archive", e if isinstance(e, OSError) else OSError(0, str(e)), seq=seq)
            return
        self.faults.recovered("archive")
