"""The daemon's live state, shared by its rooms, and its storage-fault bookkeeping.

The engine task is the only writer of a ``LiveState``: the pipeline (``pipeline.py``) journals
and applies into it, recovery (``recovery.py``) fills it at start-up, the recompute
(``recompute.py``) swaps its scopes. Queries, metrics and the admin socket read it between
engine steps. Keeping it one plain object, rather than attributes of the daemon, is what lets
those modules be read (and tested) without the server around them.
"""

from __future__ import annotations

import errno
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import structlog

from arenad.core.engine import Engine
from arenad.daemon.applier import Tally
from arenad.daemon.intake import Intake
from arenad.scopes import ScopeSet

log = structlog.get_logger("arenad")

#: A storage failure that persists is logged again at most this often (per op), not per attempt.
STORAGE_LOG_INTERVAL = 30.0


@dataclass(slots=True)
class LiveState:
    """Rating state and the counters a checkpoint carries or the metrics show."""

    scopes: ScopeSet
    intake: Intake
    seq: int = 0  # sequence number of the last journaled record
    checkpoint_seq: int = 0
    applied: int = 0
    placements: int = 0  # match placements learnt
    excluded: int = 0  # kills and placements rated nowhere (exclusion rules)
    received: Counter[str] = field(default_factory=Counter)  # events decoded, by source
    rejected: Counter[str] = field(default_factory=Counter)  # by reject reason
    filtered: Counter[str] = field(default_factory=Counter)  # valid but not rated ("cooldown")
    #: Resume positions of log followers as of the last journaled batch (checkpointed).
    positions: dict[str, dict[str, Any]] = field(default_factory=dict)
    positions_moved: bool = False  # a follower moved on since the last checkpoint
    #: Whether a checkpoint says when it was written. A cluster replica's does not: replicas
    #: at the same stream position then write the same checkpoint, byte for byte.
    stamped: bool = True

    @property
    def engine(self) -> Engine:
        """The global ladder (the primary model's, scored against the shadows)."""
        return self.scopes.global_engine

    def count(self, tally: Tally) -> None:
        """Add what an applier's records came to (``Applier.take`` / ``drain``)."""
        self.applied += tally.applied
        self.placements += tally.placements
        self.excluded += tally.excluded + tally.excluded_placements
        if tally.filtered:
            self.filtered["cooldown"] += tally.filtered
        if tally.rejected:
            self.rejected.update(tally.rejected)
        if tally.gated:  # the anti-boosting gates' reasons (arenad.gates), beside "cooldown"
            self.filtered.update(tally.gated)

    def checkpoint_payload(self, models: object) -> dict[str, Any]:
        """What a checkpoint holds (``state.Checkpoints.write``); ``models`` the shadows' state."""
        return {
            "seq": self.seq,
            "created": time.time() if self.stamped else 0.0,
            "applied": self.applied,
            "placements": self.placements,
            "scopes": self.scopes.export_state(),
            "models": models,
            "dedupe": self.intake.export_state(),
            "positions": dict(self.positions),
        }


class StorageFaults:
    """Failed writes by op ("journal", "checkpoint", "archive", ...): counted, alarmed, logged.

    A full disk fails every attempt; the log says so once per ``interval`` and op, and once
    more when the op succeeds again, so an operator sees the start and the end of an outage.
    """

    def __init__(self, interval: float = STORAGE_LOG_INTERVAL) -> None:
        self.errors: Counter[str] = Counter()
        self.failing: set[str] = set()
        self._logged: dict[str, float] = {}
        self.interval = interval

    @property
    def ok(self) -> bool:
        return not self.failing

    def failed(self, op: str, e: Exception, **context: Any) -> None:
        """Count a failed write, raise the alarm, and log it (again at most every interval).

        ``e`` an ``OSError`` for the state directory, or the stream's refusal (the cluster's
        ingest: no quorum, a timeout), which carries no errno."""
        code = getattr(e, "errno", None)
        self.errors[op] += 1
        self.failing.add(op)
        now = time.monotonic()
        if now - self._logged.get(op, -self.interval) >= self.interval:
            self._logged[op] = now
            log.error(
                "storage_write_failed",
                op=op,
                errno=code,
                errno_name=errno.errorcode.get(code or 0, "?"),
                error=str(e),
                failures=self.errors[op],
                intake_paused=op == "journal",
                **context,
            )

    def recovered(self, op: str) -> None:
        if op in self.failing:
            self.failing.discard(op)
            self._logged.pop(op, None)
            log.warning("storage_recovered", op=op, failures=self.errors[op])
