"""Prometheus metrics and the ``/metrics`` + ``/healthz`` HTTP endpoint.

Latencies are prometheus_client histograms observed by the engine task and the query server.
Everything that describes *state* (counts, queue depth, players, tiers, checkpoint age, MQTT)
is read from one ``MetricsSnapshot`` at scrape time by a custom collector, so the hot path does
no metric work per event (STYLE.md §9).

The HTTP side is a deliberately tiny HTTP/1.1 server on ``asyncio.start_server``: one request
per connection, a bounded request head, and a deadline for reading it, so a slow or hostile
client on the metrics port costs one socket for a few seconds and never blocks a scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from arenad.core.params import TIER_NAMES
from arenad.daemon.types import QUERY_REJECT_REASONS, STORAGE_OPS, MetricsSnapshot, ModelFigures

_log = structlog.get_logger("arenad.metrics")

#: Tier labels of ``arenad_players_by_tier``, best first; always all of them, zeros included, so a
#: dashboard never sees a tier vanish and reappear.
TIER_LABELS: tuple[str, ...] = (*TIER_NAMES, "unplaced")

# One event applies in about 10 µs at 100k players (bench/); the top buckets catch GC pauses.
UPDATE_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2)
# A rank lookup is O(log P); a top-1000 or a full-ladder query may take most of a second.
QUERY_BUCKETS = (
    1e-5,
    2.5e-5,
    5e-5,
    1e-4,
    2.5e-4,
    5e-4,
    1e-3,
    2.5e-3,
    5e-3,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)
# Events per engine step: one datagram's worth up to MAX_STEP_EVENTS (pipeline.py).
STEP_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2000, 4096)
# A checkpoint writes every player: milliseconds for a small ladder, tens of seconds for millions.
CHECKPOINT_BUCKETS = (1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _by_label(name: str, doc: str, label: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, n in sorted(counts.items()):
        family.add_metric([key], n)
    return family


def _families(snap: MetricsSnapshot) -> Iterator[Metric]:
    """The state metrics of one snapshot. CounterMetricFamily appends ``_total`` to the name."""
    yield _by_label("arenad_events_received", "Events received, by source.", "source", snap.received)
    yield CounterMetricFamily(
        "arenad_events_applied", "Events applied to the ratings (valid and not filtered).", value=snap.applied
    )
    yield _by_label("arenad_events_rejected", "Invalid events refused, by reason.", "reason", snap.rejected)
    yield _by_label(
        "arenad_events_filtered",
        "Valid events not rated (e.g. repeat-kill cooldown), by reason.",
        "reason",
        snap.filtered,
    )
    yield _by_label(
        "arenad_events_dropped",
        "Events lost before decoding under overload (UDP only), by source.",
        "source",
        snap.dropped,
    )
    yield GaugeMetricFamily("arenad_players_tracked", "Players with a rating.", value=snap.players_tracked)
    yield GaugeMetricFamily(
        "arenad_players_cap",
        "Most players tracked (adr.max_players); beyond it new ones are refused.",
        value=snap.players_cap,
    )
    yield GaugeMetricFamily(
        "arenad_players_active", "Players in the active set (recent events, §2.3).", value=snap.players_active
    )
    by_tier = GaugeMetricFamily(
        "arenad_players_by_tier", "Players per tier (1H best .. 5L, unplaced).", labels=["tier"]
    )
    for tier in TIER_LABELS:
        by_tier.add_metric([tier], snap.players_by_tier.get(tier, 0))
    yield by_tier
    yield GaugeMetricFamily(
        "arenad_queue_depth", "Batches waiting for the engine task.", value=snap.queue_depth
    )
    yield GaugeMetricFamily(
        "arenad_queue_capacity", "Size of the engine's input queue.", value=snap.queue_capacity
    )
    yield GaugeMetricFamily(
        "arenad_checkpoint_last_success_timestamp_seconds",
        "Unix time of the last successful checkpoint (0 = none yet).",
        value=snap.checkpoint_last_success,
    )
    yield CounterMetricFamily(
        "arenad_checkpoint_failures", "Checkpoints that failed to write.", value=snap.checkpoint_failures
    )
    yield GaugeMetricFamily(
        "arenad_journal_bytes", "Bytes appended to the journal by this process.", value=snap.journal_bytes
    )
    yield CounterMetricFamily(
        "arenad_recovery_truncations",
        "Torn journal tails cut off at start-up.",
        value=snap.recovery_truncations,
    )
    yield CounterMetricFamily(
        "arenad_checkpoint_fallbacks",
        "Start-ups that found the newest checkpoint corrupt and used an older one.",
        value=snap.checkpoint_fallbacks,
    )
    yield _by_label(
        "arenad_unrated_deaths",
        "Deaths in game-server logs that are not pairwise kills (world kills, suicides...), by kind.",
        "kind",
        snap.unrated_deaths,
    )
    yield GaugeMetricFamily(
        "arenad_mqtt_connected", "1 while the MQTT session is up, else 0.", value=int(snap.mqtt_connected)
    )
    yield CounterMetricFamily(
        "arenad_mqtt_disconnects",
        "Established MQTT sessions that ended (broker gone, network error, shutdown).",
        value=snap.mqtt_disconnects,
    )
    yield CounterMetricFamily(
        "arenad_mqtt_disconnected_seconds",
        "Seconds the MQTT source has spent without a session since start (start-up and outages).",
        value=snap.mqtt_disconnected_seconds,
    )
    yield GaugeMetricFamily(
        "arenad_ready", "1 once state is loaded (/healthz answers 200).", value=int(snap.ready)
    )
    yield CounterMetricFamily(
        "arenad_placements",
        "Match-placement events journaled (ADR learns them; every model is scored on their pairs).",
        value=snap.placements,
    )
    yield GaugeMetricFamily(
        "arenad_query_connections",
        "Query connections open now (TCP and Unix; refused ones not counted).",
        value=snap.query_connections,
    )
    query_rejected = CounterMetricFamily(
        "arenad_query_rejected",
        "Query requests and connections refused, by reason (rate_limited, too_many_connections, oversize).",
        labels=["reason"],
    )
    # Every reason always present, zeros included, so rate() sees the first refusal.
    for reason in sorted({*QUERY_REJECT_REASONS, *snap.query_rejected}):
        query_rejected.add_metric([reason], snap.query_rejected.get(reason, 0))
    yield query_rejected
    yield GaugeMetricFamily(
        "arenad_storage_ok",
        "1 while journal writes and checkpoints succeed; 0 after a failure (disk full) until one does.",
        value=int(snap.storage_ok),
    )
    yield GaugeMetricFamily(
        "arenad_intake_paused",
        "1 while a batch waits for the journal to accept it (the queue is not read meanwhile), else 0.",
        value=int(snap.intake_paused),
    )
    storage_errors = CounterMetricFamily(
        "arenad_storage_errors",
        "Failed writes to the state directory (ENOSPC, EIO...), by op (journal, checkpoint).",
        labels=["op"],
    )
    for op in sorted({*STORAGE_OPS, *snap.storage_errors}):
        storage_errors.add_metric([op], snap.storage_errors.get(op, 0))
    yield storage_errors
    yield CounterMetricFamily(
        "arenad_events_time_clamped",
        "Events stamped ahead of this host's clock (within max_clock_skew), rated at their arrival.",
        value=snap.time_clamped,
    )
    yield CounterMetricFamily(
        "arenad_wall_clock_jumps",
        "Host wall-clock steps seen (larger than [daemon] clock_step); not followed until adopted.",
        value=snap.clock_jumps,
    )
    yield GaugeMetricFamily(
        "arenad_wall_clock_offset_seconds",
        "Host wall clock minus the daemon's clock (non-zero while a step is not adopted).",
        value=snap.clock_offset,
    )
    yield from _scope_families(snap)
    yield from _model_families(snap.models)


def _scope_families(snap: MetricsSnapshot) -> Iterator[Metric]:
    """Per-scope series: global, the current season, event scopes and the configured servers
    only ([scopes] servers), so a flood of server ids cannot grow the label set."""
    players = GaugeMetricFamily("arenad_scope_players", "Players with a rating, by scope.", labels=["scope"])
    active = GaugeMetricFamily(
        "arenad_scope_players_active", "Players in the active set, by scope.", labels=["scope"]
    )
    applied = CounterMetricFamily("arenad_scope_events_applied", "Kills applied, by scope.", labels=["scope"])
    for scope, (n_players, n_active, n_applied) in sorted(snap.scopes.items()):
        players.add_metric([scope], n_players)
        active.add_metric([scope], n_active)
        applied.add_metric([scope], n_applied)
    yield players
    yield active
    yield applied
    kinds = GaugeMetricFamily("arenad_scopes", "Scopes (ladders) that exist, by kind.", labels=["kind"])
    for kind in ("global", "server", "season", "event"):
        kinds.add_metric([kind], snap.scope_counts.get(kind, 0))
    yield kinds
    yield CounterMetricFamily(
        "arenad_scopes_refused",
        "Server scopes not created because [scopes] max_servers was reached.",
        value=snap.scopes_refused,
    )
    yield CounterMetricFamily(
        "arenad_events_excluded",
        "Kills and placements rated nowhere because an exclusion rule matched.",
        value=snap.excluded,
    )
    yield GaugeMetricFamily("arenad_exclusion_rules", "Exclusion rules in force.", value=snap.exclusion_rules)
    yield GaugeMetricFamily("arenad_merges", "Merges in force (admin op merge).", value=snap.merges)
    yield GaugeMetricFamily(
        "arenad_boosting_suspects",
        "Pairs whose share of the attacker's rated kills is far above chance ([gates] suspects).",
        value=snap.boosting_suspects,
    )
    yield GaugeMetricFamily(
        "arenad_recompute_running",
        "1 while a recompute runs in the background.",
        value=int(snap.recompute_running),
    )
    yield CounterMetricFamily("arenad_recomputes", "Recomputes swapped in.", value=snap.recompute_runs)
    yield CounterMetricFamily(
        "arenad_recompute_failures", "Recomputes that failed.", value=snap.recompute_failures
    )
    yield GaugeMetricFamily(
        "arenad_archive_bytes", "Compressed bytes of the event archive.", value=snap.archive_bytes
    )
    yield GaugeMetricFamily(
        "arenad_archive_last_seq",
        "Sequence number of the newest archived event.",
        value=snap.archive_last_seq,
    )
    if snap.notify is not None:
        yield GaugeMetricFamily(
            "arenad_notify_connected",
            "1 while the notification MQTT session is up.",
            value=int(snap.notify[0]),
        )
        yield CounterMetricFamily(
            "arenad_notify_published", "Rating changes published.", value=snap.notify[1]
        )
        yield CounterMetricFamily(
            "arenad_notify_dropped",
            "Rating changes dropped (queue full or broker away).",
            value=snap.notify[2],
        )


#: Per-model series, labelled ``model``: (family type, name, help, value of one model's figures).
_MODEL_FAMILIES: tuple[
    tuple[type[GaugeMetricFamily | CounterMetricFamily], str, str, Callable[[ModelFigures], float]], ...
] = (
    (
        GaugeMetricFamily,
        "arenad_model_log_loss",
        "Log loss of the model's predictions in the rolling window (nan while it is empty).",
        lambda f: f.log_loss,
    ),
    (
        GaugeMetricFamily,
        "arenad_model_brier",
        "Brier score of the model's predictions in the rolling window.",
        lambda f: f.brier,
    ),
    (
        GaugeMetricFamily,
        "arenad_model_ece",
        "Expected calibration error of the model's predictions in the rolling window (10 bins, "
        "every other one shown reversed).",
        lambda f: f.ece,
    ),
    (
        GaugeMetricFamily,
        "arenad_model_auc",
        "AUC of the model's predictions in the rolling window (every other one shown reversed).",
        lambda f: f.auc,
    ),
    (
        CounterMetricFamily,
        "arenad_model_predictions",
        "Predictions scored since the state began (with shadows: one per kill and placement pair; "
        "without: the primary's own, one per kill it took, since the process started).",
        lambda f: f.predictions,
    ),
    (
        GaugeMetricFamily,
        "arenad_model_window_predictions",
        "Predictions in the rolling window now (at most [models] window, and 8192 without shadows).",
        lambda f: f.window,
    ),
    (
        CounterMetricFamily,
        "arenad_model_matches",
        "Match placements the model rated (models that rate matches only).",
        lambda f: f.matches,
    ),
    (
        GaugeMetricFamily,
        "arenad_model_failed",
        "1 once the model raised and was stopped, else 0.",
        lambda f: int(f.failed is not None),
    ),
)


def _model_families(models: list[ModelFigures]) -> Iterator[Metric]:
    """Every model's scores over its window (``arenad.daemon.shadows``), computed at scrape time:
    the primary's always, the shadows' when there are any."""
    for cls, name, doc, value in _MODEL_FAMILIES:
        family = cls(name, doc, labels=["model"])
        for figures in models:
            family.add_metric([figures.model], value(figures))
        yield family


class _SnapshotCollector:
    """Yields the state metrics of ``snapshot()`` at each scrape."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot]) -> None:
        self._snapshot = snapshot
        self._failing = False

    def describe(self) -> Iterator[Metric]:
        # Families of an empty snapshot carry every name, so the registry can refuse a clash.
        return _families(MetricsSnapshot())

    def collect(self) -> Iterator[Metric]:
        try:
            snap = self._snapshot()
        except Exception:
            # Logged once per run of failures: a scrape every 15 s must not flood the journal. The
            # histograms are still exported, and the missing series are what alerts notice.
            if not self._failing:
                _log.error("metrics_snapshot_failed", exc_info=True)
                self._failing = True
            return
        self._failing = False
        yield from _families(snap)


#: Buckets of arenad_web_request_seconds: the targets are 2 ms (API) and 5 ms (pages).
WEB_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class WebMetrics:
    """``arenad_web_requests_total{route,status}`` and ``arenad_web_request_seconds{route}``;
    the routes are the server's bounded labels, the children looked up once each."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "arenad_web_requests",
            "HTTP requests answered, by route and status.",
            labelnames=["route", "status"],
            registry=registry,
        )
        self.seconds = Histogram(
            "arenad_web_request_seconds",
            "Time to answer one HTTP request (handler and framing), by route.",
            labelnames=["route"],
            buckets=WEB_BUCKETS,
            registry=registry,
        )
        self.forks = Counter(
            "arenad_web_reader_forks",
            'Web readers forked from the daemon (a new snapshot; docs/web.md "Readers").',
            registry=registry,
        )
        self.fork_seconds = Histogram(
            "arenad_web_reader_fork_seconds",
            "Time the daemon's loop was held by one fork() of a web reader.",
            buckets=WEB_BUCKETS,
            registry=registry,
        )
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

    def forked(self, seconds: float) -> None:
        self.forks.inc()
        self.fork_seconds.observe(seconds)

    def observe(self, route: str, status: int, seconds: float) -> None:
        pair = self._children.get((route, status))
        if pair is None:
            pair = self._children[(route, status)] = (
                self.requests.labels(route=route, status=str(status)),
                self.seconds.labels(route=route),
            )
        pair[0].inc()
        pair[1].observe(seconds)


class Metrics:
    """The daemon's registry: latency histograms plus the scrape-time state collector."""

    def __init__(
        self, snapshot: Callable[[], MetricsSnapshot], registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        self.update_seconds = Histogram(
            "arenad_update_seconds",
            "Time to apply one event to the ratings (the engine may time only a sample of events).",
            buckets=UPDATE_BUCKETS,
            registry=self.registry,
        )
        self.query_seconds = Histogram(
            "arenad_query_seconds",
            "Time to answer one query, by operation.",
            labelnames=["op"],
            buckets=QUERY_BUCKETS,
            registry=self.registry,
        )
        self.model_update_seconds = Histogram(
            "arenad_model_update_seconds",
            "Time to predict and rate one kill, by model (the primary: its apply alone); a sample.",
            labelnames=["model"],
            buckets=UPDATE_BUCKETS,
            registry=self.registry,
        )
        self.step_events = Histogram(
            "arenad_engine_step_events",
            "Events (rejects included) one engine step took from the queue: one journal write and "
            "one fsync for all of them (group commit, [daemon] commit_interval, makes these larger "
            "under load).",
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        self.recompute_seconds = Histogram(
            "arenad_recompute_seconds",
            "Time of one background recompute, from start to swap.",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
            registry=self.registry,
        )
        self.checkpoint_seconds = Histogram(
            "arenad_checkpoint_seconds",
            "Time to write one checkpoint.",
            buckets=CHECKPOINT_BUCKETS,
            registry=self.registry,
        )
        self.web = WebMetrics(self.registry)  # the HTTP API and pages ([web])
        self.registry.register(_SnapshotCollector(snapshot))

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (what ``GET /metrics`` returns)."""
        return generate_latest(self.registry)


# --- HTTP -----------------------------------------------------------------------------------------

HEAD_LIMIT = 8192  # bytes of request line + headers; a scraper sends a few hundred
HEAD_TIMEOUT = 5.0  # seconds to send them, and to take the response

_STATUS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_TEXT = "text/plain; charset=utf-8"


def _response(status: int, body: bytes, content_type: str = _TEXT, extra: str = "") -> bytes:
    head = (
        f"HTTP/1.1 {status} {_STATUS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Cache-Control: no-store\r\n"
        f"{extra}"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _route(head: bytes, metrics: Metrics, ready: Callable[[], bool]) -> bytes:
    """One response for one request head (everything up to the blank line)."""
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return _response(400, b"bad request\n")
    method, target, _ = parts
    path = target.split("?", 1)[0]
    if path not in ("/metrics", "/healthz"):
        return _response(404, b"not found\n")
    if method != "GET":
        return _response(405, b"method not allowed\n", extra="Allow: GET\r\n")
    if path == "/healthz":
        return _response(200, b"ok\n") if ready() else _response(503, b"starting\n")
    return _response(200, metrics.exposition(), CONTENT_TYPE_LATEST)


async def _serve_one(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    metrics: Metrics,
    ready: Callable[[], bool],
    head_timeout: float,
) -> None:
    try:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), head_timeout)
        except asyncio.LimitOverrunError:
            # Best effort: the client may still be sending, then it sees a reset instead.
            writer.write(_response(431, b"request head too large\n"))
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            return  # slow, truncated or gone: nothing useful to answer
        else:
            try:
                response = _route(head, metrics, ready)
            except Exception:
                _log.error("metrics_request_failed", exc_info=True)
                response = _response(500, b"internal error\n")
            writer.write(response)
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(writer.drain(), head_timeout)
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), head_timeout)
        except (TimeoutError, ConnectionError):
            # A peer that never reads keeps a graceful close pending forever; cut it.
            writer.transport.abort()


async def serve_metrics(
    host: str,
    port: int,
    metrics: Metrics,
    ready: Callable[[], bool],
    *,
    head_limit: int = HEAD_LIMIT,
    head_timeout: float = HEAD_TIMEOUT,
) -> asyncio.Server:
    """Start serving ``GET /metrics`` and ``GET /healthz`` on ``host:port``; the caller closes it.

    ``/healthz`` answers 200 ``ok`` once ``ready()`` is true, 503 ``starting`` before. Each
    connection carries one request (``Connection: close``); a request head over ``head_limit``
    bytes or not complete within ``head_timeout`` seconds closes the connection.

    Scrapes run on the event loop, not in a thread, because ``snapshot()`` reads state that the
    engine task owns and only the loop thread sees it consistent; a scrape costs well under a
    millisecond.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve_one(reader, writer, metrics, ready, head_timeout)

    # ``limit`` bounds the StreamReader buffer, so readuntil() refuses a head larger than it.
    return await asyncio.start_server(handle, host, port, limit=head_limit)
