"""Values shared by the daemon's parts: what sources hand the engine task, what metrics read.

Sources never touch rating state. They put ``Batch`` objects on one bounded ``asyncio.Queue``;
the engine task validates, journals, applies, and then calls ``Batch.done`` — only then may a
source acknowledge what it received (MQTT PUBACK). ``MetricsSnapshot`` is what the metrics
collector reads at scrape time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from arenad.core.events import KillEvent, PlacementEvent, Reject
from arenad.decode import decode_msgpack


@dataclass(slots=True)
class ControlRequest:
    """An admin operation on its way to the journal (``arenad.daemon.admin``): the engine task
    journals it as a ``ControlRecord`` at event time ``t`` and sets ``seq``."""

    op: str
    args: dict[str, Any]
    t: float
    seq: int = 0


@dataclass(slots=True)
class Batch:
    """Decoded items from one source read (a datagram, an MQTT message, some log lines).

    ``server`` is the server id for events that carry none (MQTT takes it from the topic).
    ``done`` is called exactly once by the engine task when every accepted event of the batch
    is durably journaled (or the batch held nothing to journal); a source that needs to
    acknowledge upstream does it there. It runs on the event loop and must not block.
    """

    source: str
    items: list[KillEvent | PlacementEvent | Reject]
    server: str | None = None
    done: Callable[[], None] | None = None
    #: An undecoded payload: decoded by the engine task, in slices between which queries are
    #: served, instead of in the source's callback where a burst would stall them.
    payload: bytes | None = None
    #: How to decode ``payload`` (default: one msgpack event or array of events, as UDP sends).
    decode: Callable[[bytes], list[KillEvent | PlacementEvent | Reject]] | None = None
    #: (source key, position after this batch) for sources that resume by position (log files);
    #: the engine task keeps the position of the last journaled batch for the checkpoint.
    position: tuple[str, dict[str, Any]] | None = None

    #: An admin operation to journal (``arenad.daemon.admin``); such a batch has no items.
    control: ControlRequest | None = None
    #: Records already checked elsewhere, as (record kind, stored row) pairs: what a cluster
    #: replica takes from the stream (``arenad.cluster.wire``). The engine task numbers and
    #: journals them as they are, without the wall-clock and duplicate checks of ``items``
    #: (those ran once, on the ingest node), so every replica journals the same records.
    rows: list[tuple[int, Any]] | None = None
    #: The sequence number of the last record this batch became, or of the one before it when
    #: it became none (set by the engine task): where its records end in the step's list.
    last_seq: int = 0

    def decoded(self) -> list[KillEvent | PlacementEvent | Reject]:
        """The items, decoding ``payload`` once on first use."""
        if self.payload is not None:
            payload, self.payload = self.payload, None
            self.items = self.decode(payload) if self.decode is not None else list(decode_msgpack(payload))
        return self.items


@dataclass(frozen=True, slots=True)
class ModelFigures:
    """One rating model's prediction scores over its rolling window (``arenad.daemon.shadows``)."""

    model: str
    role: str  # "primary" (the ADR ladder) or "shadow"
    predictions: int  # scored predictions since the state began (checkpointed; without shadows:
    # since the process started, the engine's own ring, arenad.daemon.shadows)
    window: int  # of which in the window now (at most [models] window)
    log_loss: float  # nan while the window is empty
    brier: float
    auc: float
    ece: float = math.nan  # 10 equal-width bins, count-weighted (arenad.evaluation.metrics.ece)
    scored: int = 0  # the prediction count the scores are of (recomputed at most once a second)
    matches: int = 0  # match placements the model rated (update_match)
    failed: str | None = None  # why the model was stopped, if it raised

    def as_dict(self) -> dict[str, Any]:
        """The ``stats`` query's figures of this model."""
        return {
            "role": self.role,
            "predictions": self.predictions,
            "window": self.window,
            "log_loss": self.log_loss,
            "brier": self.brier,
            "ece": self.ece,
            "auc": self.auc,
            "scored": self.scored,
            "matches": self.matches,
            "failed": self.failed,
        }


#: Why the query server refused a request or a connection (``arenad_query_rejected_total{reason}``):
#: a request over the connection's rate limit, a connection over ``max_connections``, a request
#: line over ``max_line``.
QUERY_REJECT_REASONS: tuple[str, ...] = ("rate_limited", "too_many_connections", "oversize")

#: What failed to write (``arenad_storage_errors_total{op}``): a journal append or fsync, a checkpoint,
#: the archive, a publish to the cluster's stream (an ingest node: no quorum, no ack in time).
STORAGE_OPS: tuple[str, ...] = ("journal", "checkpoint", "archive", "stream")


@dataclass(slots=True)
class MetricsSnapshot:
    """Everything the Prometheus collector exports, read at scrape time (no per-event work)."""

    received: Counter[str] = field(default_factory=Counter)  # by source
    applied: int = 0
    rejected: Counter[str] = field(default_factory=Counter)  # by reason
    filtered: Counter[str] = field(default_factory=Counter)  # by reason ("cooldown")
    dropped: Counter[str] = field(default_factory=Counter)  # by source (UDP under overload)
    queue_depth: int = 0
    queue_capacity: int = 0
    players_tracked: int = 0
    players_cap: int = 0  # adr.max_players
    players_active: int = 0
    players_by_tier: dict[str, int] = field(default_factory=dict)  # "1H".."5L" and "unplaced"
    checkpoint_last_success: float = 0.0  # unix time, 0 = never
    checkpoint_failures: int = 0
    journal_bytes: int = 0
    recovery_truncations: int = 0  # torn journal tails cut at start-up
    checkpoint_fallbacks: int = 0  # corrupt newest checkpoint, older one used
    unrated_deaths: Counter[str] = field(default_factory=Counter)  # world_kill, suicide, ... (logs)
    mqtt_connected: bool = False
    mqtt_disconnects: int = 0  # established MQTT sessions that ended
    mqtt_disconnected_seconds: float = 0.0  # time the running MQTT source spent without a session
    ready: bool = False  # state loaded: /healthz answers 200
    placements: int = 0  # match-placement events journaled (never rated by ADR)
    models: list[ModelFigures] = field(default_factory=list)  # the primary first, then the shadows
    query_connections: int = 0  # query connections open now (TCP and Unix)
    query_rejected: Counter[str] = field(default_factory=Counter)  # by reason (QUERY_REJECT_REASONS)
    storage_ok: bool = True  # the last journal write and the last checkpoint succeeded
    intake_paused: bool = False  # a batch waits for the journal (disk full): the queue is not read
    storage_errors: Counter[str] = field(default_factory=Counter)  # by op (STORAGE_OPS)
    #: Per exported scope: (players, active players, kills applied).
    scopes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    scope_counts: Counter[str] = field(default_factory=Counter)  # scopes by kind
    scopes_refused: int = 0
    excluded: int = 0
    exclusion_rules: int = 0
    boosting_suspects: int = 0  # pairs of the boosting report now (arenad.gates)
    merges: int = 0  # merge rules in force
    recompute_running: bool = False
    recompute_runs: int = 0
    recompute_failures: int = 0
    archive_bytes: int = 0
    archive_last_seq: int = 0
    notify: tuple[bool, int, int] | None = None  # connected, published, dropped
    clock_jumps: int = 0  # host wall-clock steps seen (arenad.daemon.clock)
    time_clamped: int = 0  # events stamped ahead of the host clock, rated at arrival
    clock_offset: float = 0.0  # host wall clock minus the daemon's clock, seconds
