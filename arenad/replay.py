"""``arenad replay``: the offline contract. Events in, a ladder and a one-line summary out.

Used by tests, benchmarks and operators; the daemon must reach the same state from the same
accepted events (it recalibrates at the same event-time points, see ``Engine.feed``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from arenad.core.engine import REJECT_REASONS, Engine, Outcome
from arenad.core.events import KillEvent, Reject
from arenad.core.params import ADRParams
from arenad.decode import iter_file

FORMATS = ("arenad",)


@dataclass(slots=True)
class ReplaySummary:
    events: int = 0
    applied: int = 0
    filtered: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    players: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "applied": self.applied,
            "filtered": self.filtered,
            "rejected": dict(sorted(self.rejected.items())),
            "players": self.players,
            "seconds": round(self.seconds, 6),
            "events_per_s": round(self.events / self.seconds, 1) if self.seconds > 0 else None,
        }


def replay_events(engine: Engine, events: Iterable[KillEvent | Reject]) -> ReplaySummary:
    """Feed decoded events (and count decoder rejects) through ``engine`` in order."""
    summary = ReplaySummary()
    rejected = summary.rejected
    started = time.perf_counter()
    for ev in events:
        summary.events += 1
        if isinstance(ev, Reject):
            rejected[ev.reason.value] += 1
            continue
        outcome = engine.feed(ev.attacker, ev.victim, ev.t)
        if outcome is Outcome.APPLIED:
            summary.applied += 1
        elif outcome is Outcome.FILTERED:
            summary.filtered += 1
        else:
            rejected[REJECT_REASONS[outcome]] += 1
    summary.seconds = time.perf_counter() - started
    summary.players = len(engine)
    return summary


def replay_files(paths: Iterable[Path], params: ADRParams) -> tuple[Engine, ReplaySummary]:
    engine = Engine(params)

    def events() -> Iterator[KillEvent | Reject]:
        for path in paths:
            yield from iter_file(path)

    return engine, replay_events(engine, events())


def ladder_rows(engine: Engine) -> Iterator[dict[str, Any]]:
    """One JSON-ready object per player, best first (the state file format)."""
    for rank, i in enumerate(engine.ladder_ids(), start=1):
        v = engine.view(i)
        yield {
            "player": v.player,
            "rank": rank,
            "mu": v.mu,
            "sigma": v.sigma,
            "tier": v.tier,
            "n": v.n,
            "streak": v.streak,
            "trend": v.trend,
            "pool": v.pool,
            "last_t": v.last_t,
            "active": v.active,
            "percentile": engine.percentile(i),
        }


def write_state(engine: Engine, out: IO[str]) -> None:
    for row in ladder_rows(engine):
        out.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
        out.write("\n")
