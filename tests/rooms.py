"""The daemon's rooms built on their own, without the server around them (tests only)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from arenad.daemon.clock import DaemonClock
from arenad.daemon.intake import Intake
from arenad.daemon.live import LiveState, StorageFaults
from arenad.daemon.logs import RejectWarnings
from arenad.daemon.metrics import Metrics
from arenad.daemon.pipeline import Pipeline
from arenad.daemon.ratinghistory import RatingHistory, rating_history
from arenad.daemon.recompute import Recomputer, Retention
from arenad.daemon.recovery import Checkpointer, cut_ratings, recover
from arenad.daemon.shadows import ModelSet
from arenad.daemon.state import RecoveryReport
from arenad.daemon.statedir import StateDir
from arenad.daemon.types import Batch, MetricsSnapshot
from arenad.scopes import ScopeSet
from arenad.settings import Settings


def _no_snapshot() -> MetricsSnapshot:
    raise AssertionError("the rooms' tests do not scrape metrics")


@dataclass
class Rooms:
    settings: Settings
    state: LiveState
    store: StateDir
    models: ModelSet
    metrics: Metrics
    faults: StorageFaults
    clock: DaemonClock
    queue: asyncio.Queue[Batch]
    pipeline: Pipeline
    recomputer: Recomputer
    checkpointer: Checkpointer
    ratings: RatingHistory | None

    def recover(self) -> RecoveryReport:
        report = recover(self.state, self.store, self.settings, self.models, self.clock)
        cut_ratings(self.ratings, report)
        self.store.journal.open_segment(self.state.seq + 1)
        return report

    def close(self) -> None:
        if self.ratings is not None:
            self.ratings.close()
        self.store.close()


def build(state_dir: Path, settings: Settings | None = None) -> Rooms:
    """Every room of one daemon over ``state_dir`` (``settings.daemon.state_dir`` is replaced)."""
    base = settings if settings is not None else Settings()
    settings = base.model_copy(
        update={"daemon": base.daemon.model_copy(update={"state_dir": str(state_dir)})}
    )
    state = LiveState(ScopeSet(settings.adr, settings.scope_config()), Intake(settings.daemon))
    store = StateDir(settings)
    models = ModelSet(settings.models, recent=lambda: state.engine.recent_predictions())  # noqa: PLW0108
    metrics = Metrics(_no_snapshot)
    faults = StorageFaults()
    clock = DaemonClock()
    queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=settings.daemon.queue_size)
    pipeline = Pipeline(
        state,
        queue,
        store.journal,
        models=models,
        metrics=metrics,
        clock=clock,
        faults=faults,
        reject_warnings=RejectWarnings(settings.log.reject_warning_interval),
    )
    ratings = rating_history(settings.history, store.path)
    recomputer = Recomputer(state, store, settings.adr, metrics, ratings)
    checkpointer = Checkpointer(
        state,
        store,
        models=models,
        pipeline=pipeline,
        recomputer=recomputer,
        retention=Retention(store, settings.history, faults),
        metrics=metrics,
        faults=faults,
        ratings=ratings,
    )
    return Rooms(
        settings,
        state,
        store,
        models,
        metrics,
        faults,
        clock,
        queue,
        pipeline,
        recomputer,
        checkpointer,
        ratings,
    )
