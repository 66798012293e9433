"""Metrics over real HTTP on 127.0.0.1: values, health, errors, abuse, and the dashboard's queries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from arenad.cluster.metrics import ClusterCollector, ClusterFigures, publish_histogram
from arenad.core.params import TIER_NAMES
from arenad.daemon.metrics import Metrics, serve_metrics
from arenad.daemon.types import MetricsSnapshot, ModelFigures

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "config" / "grafana" / "arenad.json"
PROMETHEUS_YML = ROOT / "config" / "prometheus.yml"
WAIT = 5.0  # seconds any single await in these tests may take before the test fails
HISTOGRAMS = (
    "arenad_update_seconds",
    "arenad_query_seconds",
    "arenad_checkpoint_seconds",
    "arenad_model_update_seconds",
    "arenad_recompute_seconds",
    "arenad_engine_step_events",
    "arenad_web_reader_fork",  # the readers' forks: a histogram and a plain counter (with _created)
)
MODEL_SERIES = (
    "arenad_model_log_loss",
    "arenad_model_brier",
    "arenad_model_ece",
    "arenad_model_auc",
    "arenad_model_predictions_total",
    "arenad_model_window_predictions",
    "arenad_model_matches_total",
    "arenad_model_failed",
)


def full_snapshot() -> MetricsSnapshot:
    """A snapshot where every field holds a distinct non-default value."""
    return MetricsSnapshot(
        received=Counter({"udp": 7, "mqtt": 3}),
        applied=9,
        rejected=Counter({"malformed": 2, "self_kill": 1}),
        filtered=Counter({"cooldown": 4}),
        dropped=Counter({"udp": 5}),
        queue_depth=12,
        queue_capacity=1024,
        players_tracked=100,
        players_cap=2_000_000,
        players_active=40,
        players_by_tier={"1H": 3, "5L": 2, "unplaced": 60},
        checkpoint_last_success=1_700_000_000.5,
        checkpoint_failures=6,
        journal_bytes=4096,
        recovery_truncations=8,
        checkpoint_fallbacks=11,
        mqtt_connected=True,
        mqtt_disconnects=18,
        mqtt_disconnected_seconds=19.5,
        ready=True,
        placements=13,
        query_connections=15,
        query_rejected=Counter({"rate_limited": 16, "too_many_connections": 17}),
        storage_ok=False,
        intake_paused=True,
        storage_errors=Counter({"journal": 20}),
        scopes={"global": (100, 40, 9), "server:eu-1": (30, 12, 5)},
        scope_counts=Counter({"global": 1, "server": 4, "season": 2}),
        scopes_refused=21,
        excluded=22,
        exclusion_rules=23,
        merges=3,
        boosting_suspects=4,
        recompute_running=True,
        recompute_runs=24,
        recompute_failures=25,
        archive_bytes=26,
        archive_last_seq=27,
        notify=(True, 28, 29),
        clock_jumps=30,
        time_clamped=32,
        clock_offset=-31.5,
        models=[
            ModelFigures("adr", "primary", 900, 500, 0.61, 0.21, 0.74, ece=0.031),
            ModelFigures("glicko2-mp", "shadow", 900, 500, 0.58, 0.2, 0.77, 0.052, matches=14, failed=None),
            ModelFigures("broken", "shadow", 10, 10, math.nan, 0.25, 0.5, 0.125, failed="RuntimeError: bug"),
        ],
    )


def serve(
    metrics: Metrics,
    body: Callable[[int], Awaitable[None]],
    ready: Callable[[], bool] = lambda: True,
    **kw: Any,
) -> None:
    """Run ``body(port)`` against a metrics server on 127.0.0.1:<free port>, then close it."""

    async def main() -> None:
        server = await serve_metrics("127.0.0.1", 0, metrics, ready, **kw)
        try:
            await body(server.sockets[0].getsockname()[1])
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


@contextlib.asynccontextmanager
async def connect(port: int) -> Any:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), WAIT)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(writer.wait_closed(), WAIT)


async def exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw request bytes; read to EOF (the server closes); return status, headers, body."""
    async with connect(port) as (reader, writer):
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), WAIT)
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    assert int(headers["content-length"]) == len(body)
    return int(status_line.split(" ")[1]), headers, body


async def get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    return await exchange(port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())


def scrape(metrics: Metrics) -> str:
    """One ``GET /metrics`` over HTTP; the body as text."""
    out: list[str] = []

    async def body(port: int) -> None:
        status, headers, data = await get(port, "/metrics")
        assert status == 200
        assert headers["content-type"] == CONTENT_TYPE_LATEST
        out.append(data.decode())

    serve(metrics, body)
    return out[0]


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def one(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


class TestExportedValues:
    """A scrape exports every state metric with the snapshot's values, read at scrape time."""

    def test_every_metric_has_the_snapshot_value(self) -> None:
        got = samples(scrape(Metrics(full_snapshot)))
        expected = {
            one("arenad_events_received_total", source="udp"): 7,
            one("arenad_events_received_total", source="mqtt"): 3,
            one("arenad_events_applied_total"): 9,
            one("arenad_events_rejected_total", reason="malformed"): 2,
            one("arenad_events_rejected_total", reason="self_kill"): 1,
            one("arenad_events_filtered_total", reason="cooldown"): 4,
            one("arenad_events_dropped_total", source="udp"): 5,
            one("arenad_players_tracked"): 100,
            one("arenad_players_cap"): 2_000_000,
            one("arenad_players_active"): 40,
            one("arenad_queue_depth"): 12,
            one("arenad_queue_capacity"): 1024,
            one("arenad_checkpoint_last_success_timestamp_seconds"): 1_700_000_000.5,
            one("arenad_checkpoint_failures_total"): 6,
            one("arenad_journal_bytes"): 4096,
            one("arenad_recovery_truncations_total"): 8,
            one("arenad_checkpoint_fallbacks_total"): 11,
            one("arenad_mqtt_connected"): 1,
            one("arenad_mqtt_disconnects_total"): 18,
            one("arenad_mqtt_disconnected_seconds_total"): 19.5,
            one("arenad_ready"): 1,
            one("arenad_placements_total"): 13,
            one("arenad_query_connections"): 15,
            one("arenad_query_rejected_total", reason="rate_limited"): 16,
            one("arenad_query_rejected_total", reason="too_many_connections"): 17,
            one("arenad_query_rejected_total", reason="oversize"): 0,
            one("arenad_storage_ok"): 0,
            one("arenad_intake_paused"): 1,
            one("arenad_storage_errors_total", op="journal"): 20,
            one("arenad_storage_errors_total", op="checkpoint"): 0,
            one("arenad_storage_errors_total", op="archive"): 0,
            one("arenad_storage_errors_total", op="stream"): 0,
            one("arenad_scope_players", scope="global"): 100,
            one("arenad_scope_players", scope="server:eu-1"): 30,
            one("arenad_scope_players_active", scope="global"): 40,
            one("arenad_scope_players_active", scope="server:eu-1"): 12,
            one("arenad_scope_events_applied_total", scope="global"): 9,
            one("arenad_scope_events_applied_total", scope="server:eu-1"): 5,
            one("arenad_scopes", kind="global"): 1,
            one("arenad_scopes", kind="server"): 4,
            one("arenad_scopes", kind="season"): 2,
            one("arenad_scopes", kind="event"): 0,
            one("arenad_scopes_refused_total"): 21,
            one("arenad_events_excluded_total"): 22,
            one("arenad_exclusion_rules"): 23,
            one("arenad_merges"): 3,
            one("arenad_boosting_suspects"): 4,
            one("arenad_recompute_running"): 1,
            one("arenad_recomputes_total"): 24,
            one("arenad_recompute_failures_total"): 25,
            one("arenad_archive_bytes"): 26,
            one("arenad_archive_last_seq"): 27,
            one("arenad_notify_connected"): 1,
            one("arenad_notify_published_total"): 28,
            one("arenad_notify_dropped_total"): 29,
            one("arenad_wall_clock_jumps_total"): 30,
            one("arenad_events_time_clamped_total"): 32,
            one("arenad_wall_clock_offset_seconds"): -31.5,
        }
        for name, values in {
            "adr": (0.61, 0.21, 0.031, 0.74, 900, 500, 0, 0),
            "glicko2-mp": (0.58, 0.2, 0.052, 0.77, 900, 500, 14, 0),
            "broken": (math.nan, 0.25, 0.125, 0.5, 10, 10, 0, 1),
        }.items():
            for metric, value in zip(MODEL_SERIES, values, strict=True):
                expected[one(metric, model=name)] = value
        tiers = {"1H": 3, "5L": 2, "unplaced": 60}
        for tier in (*TIER_NAMES, "unplaced"):
            expected[one("arenad_players_by_tier", tier=tier)] = tiers.get(tier, 0)
        state = {k: v for k, v in got.items() if not k[0].startswith(HISTOGRAMS)}
        nan = one("arenad_model_log_loss", model="broken")
        assert math.isnan(state.pop(nan)) and math.isnan(expected.pop(nan))  # empty window: nan
        assert state == expected

    def test_all_sixteen_tiers_are_exported_even_when_empty(self) -> None:
        got = samples(scrape(Metrics(MetricsSnapshot)))
        tiers = {
            dict(labels)["tier"]: v for (name, labels), v in got.items() if name == "arenad_players_by_tier"
        }
        assert tiers == dict.fromkeys((*TIER_NAMES, "unplaced"), 0)
        assert len(tiers) == 16

    def test_booleans_export_as_zero_and_one(self) -> None:
        got = samples(scrape(Metrics(MetricsSnapshot)))
        assert got[one("arenad_mqtt_connected")] == 0
        assert got[one("arenad_ready")] == 0

    def test_snapshot_is_read_at_each_scrape(self) -> None:
        calls: list[int] = []

        def snapshot() -> MetricsSnapshot:
            calls.append(1)
            return MetricsSnapshot(applied=len(calls) * 10)

        metrics = Metrics(snapshot)
        assert samples(metrics.exposition().decode())[one("arenad_events_applied_total")] == 10
        assert samples(metrics.exposition().decode())[one("arenad_events_applied_total")] == 20

    def test_model_series_are_absent_without_models(self) -> None:
        got = samples(scrape(Metrics(MetricsSnapshot)))
        assert not [name for name, _ in got if name.startswith("arenad_model_")]

    def test_histograms_export_observations(self) -> None:
        metrics = Metrics(MetricsSnapshot)
        metrics.model_update_seconds.labels(model="elo").observe(2e-6)
        metrics.update_seconds.observe(3e-6)
        metrics.query_seconds.labels(op="rank").observe(2e-4)
        metrics.checkpoint_seconds.observe(0.7)
        got = samples(scrape(metrics))
        assert got[one("arenad_update_seconds_count")] == 1
        assert got[one("arenad_update_seconds_bucket", le="5e-06")] == 1
        assert got[one("arenad_update_seconds_bucket", le="2.5e-06")] == 0
        assert got[one("arenad_query_seconds_count", op="rank")] == 1
        assert got[one("arenad_checkpoint_seconds_sum")] == pytest.approx(0.7)
        assert got[one("arenad_model_update_seconds_bucket", model="elo", le="2.5e-06")] == 1

    def test_histogram_buckets_span_the_documented_ranges(self) -> None:
        metrics = Metrics(MetricsSnapshot)
        metrics.query_seconds.labels(op="top").observe(0.001)  # a labelled histogram needs a series
        got = samples(metrics.exposition().decode())

        def bounds(name: str) -> tuple[float, float]:
            finite = sorted(float(dict(lb)["le"]) for n, lb in got if n == name and dict(lb)["le"] != "+Inf")
            return finite[0], finite[-1]

        low, high = bounds("arenad_update_seconds_bucket")
        assert low <= 1e-6 and high >= 1e-2
        low, high = bounds("arenad_query_seconds_bucket")
        assert low <= 1e-5 and high >= 1.0
        low, high = bounds("arenad_checkpoint_seconds_bucket")
        assert low <= 1e-3 and high >= 60.0

    def test_injected_registry_is_used(self) -> None:
        registry = CollectorRegistry()
        metrics = Metrics(MetricsSnapshot, registry=registry)
        assert metrics.registry is registry
        assert registry.get_sample_value("arenad_players_tracked") == 0
        with pytest.raises(ValueError, match="Duplicated"):
            Metrics(MetricsSnapshot, registry=registry)  # a second daemon on one registry clashes


class TestFailingSnapshot:
    """A snapshot that raises costs its own series only: histograms still scrape, one log line."""

    def test_histograms_survive_and_the_failure_is_logged_once(self) -> None:
        def broken() -> MetricsSnapshot:
            raise RuntimeError("engine state unavailable")

        metrics = Metrics(broken)
        metrics.update_seconds.observe(1e-5)
        with structlog.testing.capture_logs() as logs:
            first = scrape(metrics)
            second = scrape(metrics)
        for text in (first, second):
            got = samples(text)
            assert got[one("arenad_update_seconds_count")] == 1
            assert not any(
                name.startswith(("arenad_events", "arenad_players", "arenad_ready")) for name, _ in got
            )
        assert [e["event"] for e in logs] == ["metrics_snapshot_failed"]
        assert logs[0]["log_level"] == "error"

    def test_a_recovered_snapshot_logs_again_on_the_next_failure(self) -> None:
        fail = [True]

        def flaky() -> MetricsSnapshot:
            if fail[0]:
                raise RuntimeError("flaky")
            return MetricsSnapshot(applied=1)

        metrics = Metrics(flaky)
        with structlog.testing.capture_logs() as logs:
            metrics.exposition()
            fail[0] = False
            assert samples(metrics.exposition().decode())[one("arenad_events_applied_total")] == 1
            fail[0] = True
            metrics.exposition()
        assert [e["event"] for e in logs] == ["metrics_snapshot_failed"] * 2


class TestHttp:
    """The HTTP endpoint: routes, health, status codes, one request per connection."""

    def test_healthz_is_503_until_ready_then_200(self) -> None:
        ready = [False]

        async def body(port: int) -> None:
            status, headers, data = await get(port, "/healthz")
            assert (status, data) == (503, b"starting\n")
            assert headers["connection"] == "close"
            ready[0] = True
            status, _, data = await get(port, "/healthz")
            assert (status, data) == (200, b"ok\n")

        serve(Metrics(MetricsSnapshot), body, ready=lambda: ready[0])

    def test_unknown_path_is_404(self) -> None:
        async def body(port: int) -> None:
            assert (await get(port, "/"))[0] == 404
            assert (await get(port, "/metricsx"))[0] == 404

        serve(Metrics(MetricsSnapshot), body)

    def test_query_string_is_ignored(self) -> None:
        async def body(port: int) -> None:
            status, _, data = await get(port, "/metrics?name[]=arenad_ready")
            assert status == 200
            assert b"arenad_ready" in data

        serve(Metrics(MetricsSnapshot), body)

    def test_non_get_is_405_with_allow(self) -> None:
        async def body(port: int) -> None:
            for method in ("POST", "PUT", "HEAD", "DELETE"):
                request = f"{method} /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n".encode()
                status, headers, _ = await exchange(port, request)
                assert status == 405, method
                assert headers["allow"] == "GET"

        serve(Metrics(MetricsSnapshot), body)

    def test_garbage_request_line_is_400(self) -> None:
        async def body(port: int) -> None:
            assert (await exchange(port, b"hello\r\n\r\n"))[0] == 400
            assert (await exchange(port, b"GET /metrics SPDY/3\r\n\r\n"))[0] == 400

        serve(Metrics(MetricsSnapshot), body)

    def test_connection_is_closed_after_one_response(self) -> None:
        async def body(port: int) -> None:
            async with connect(port) as (reader, writer):
                writer.write(b"GET /healthz HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n")
                await writer.drain()
                raw = await asyncio.wait_for(reader.read(), WAIT)
            assert raw.count(b"HTTP/1.1 ") == 1

        serve(Metrics(MetricsSnapshot), body)


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Read until the server closes; a reset counts as closed. Times out (fails) otherwise."""
    try:
        return await asyncio.wait_for(reader.read(), WAIT)
    except ConnectionResetError:
        return b""


class TestAbuse:
    """Oversized and slow requests are cut off without hurting the next client."""

    def test_oversized_head_is_closed_and_next_client_served(self) -> None:
        async def body(port: int) -> None:
            async with connect(port) as (reader, writer):
                writer.write(b"GET /metrics HTTP/1.1\r\nX-Filler: " + b"a" * 9000)
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                raw = await closed_by_server(reader)
            assert raw == b"" or raw.startswith(b"HTTP/1.1 431 ")
            assert (await get(port, "/healthz"))[0] == 200

        # A deadline longer than the client's wait: only the size limit can close it in time.
        serve(Metrics(MetricsSnapshot), body, head_timeout=WAIT * 2)

    def test_head_just_under_the_limit_is_served(self) -> None:
        async def body(port: int) -> None:
            filler = b"a" * (8192 - 200)
            request = b"GET /healthz HTTP/1.1\r\nX-Filler: " + filler + b"\r\n\r\n"
            assert (await exchange(port, request))[0] == 200

        serve(Metrics(MetricsSnapshot), body)

    def test_slow_client_is_closed_while_others_are_served(self) -> None:
        async def body(port: int) -> None:
            async with connect(port) as (slow_reader, slow_writer):
                slow_writer.write(b"GET /metr")  # and then nothing: a stalled head
                await slow_writer.drain()
                # The stalled connection does not hold up a complete request meanwhile.
                assert (await get(port, "/metrics"))[0] == 200
                assert await closed_by_server(slow_reader) == b""
            assert (await get(port, "/healthz"))[0] == 200

        serve(Metrics(MetricsSnapshot), body, head_timeout=0.2)

    def test_client_that_disconnects_mid_head_does_not_hurt_the_server(self) -> None:
        async def body(port: int) -> None:
            async with connect(port) as (_, writer):
                writer.write(b"GET /metrics HT")
                await writer.drain()
            assert (await get(port, "/metrics"))[0] == 200

        serve(Metrics(MetricsSnapshot), body)


# --- the dashboard and alert rules query only metrics that exist -------------------------------------

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
METRIC_NAME = re.compile(r"\barenad_\w+")


def dashboard_queries(node: object) -> Iterator[str]:
    """Every PromQL string of a Grafana dashboard: panel ``expr`` and query-variable definitions."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from dashboard_queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_queries(item)


def unexported(queries: list[str], exposition: str) -> set[str]:
    """Names ``arenad_*`` used in ``queries`` that the exposition does not export."""
    families = list(text_string_to_metric_families(exposition))
    exported = {s.name for f in families for s in f.samples} | {f.name for f in families}
    histograms = {f.name for f in families if f.type == "histogram"}
    missing = set()
    for name in {n for q in queries for n in METRIC_NAME.findall(q)}:
        base = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
        if name not in exported and base not in histograms:
            missing.add(name)
    return missing


def live_exposition() -> str:
    metrics = Metrics(full_snapshot)
    metrics.query_seconds.labels(op="rank").observe(1e-4)  # a labelled histogram has no series before
    metrics.model_update_seconds.labels(model="adr").observe(1e-5)
    metrics.web.observe("api.player", 200, 1e-4)
    # What a cluster node adds (arenad.cluster.metrics): its collector and the publish latency.
    metrics.registry.register(ClusterCollector(lambda: ClusterFigures(role="replica")))
    publish_histogram(metrics.registry).observe(1e-3)
    return scrape(metrics)


class TestDashboard:
    """Every metric the Grafana dashboard and the alert examples query is exported by a live scrape."""

    def test_every_dashboard_metric_is_exported(self) -> None:
        queries = list(dashboard_queries(json.loads(DASHBOARD.read_text(encoding="utf-8"))))
        assert len(queries) >= 15
        assert unexported(queries, live_exposition()) == set()

    def test_the_check_catches_a_missing_metric(self) -> None:
        queries = [
            "rate(arenad_no_such_thing_total[1m])",
            "histogram_quantile(0.5, rate(arenad_update_seconds_bucket[5m]))",
            "arenad_players_tracked_bucket",
        ]
        assert unexported(queries, live_exposition()) == {
            "arenad_no_such_thing_total",
            "arenad_players_tracked_bucket",
        }

    def test_dashboard_shows_what_the_issue_asks_for(self) -> None:
        queries = " ".join(dashboard_queries(json.loads(DASHBOARD.read_text(encoding="utf-8"))))
        for name in (
            "arenad_events_received_total",
            "arenad_events_rejected_total",
            "arenad_update_seconds_bucket",
            "arenad_query_seconds_bucket",
            "arenad_players_tracked",
            "arenad_players_active",
            "arenad_players_by_tier",
            "arenad_checkpoint_last_success_timestamp_seconds",
            "arenad_mqtt_connected",
            "arenad_model_log_loss",
            "arenad_model_brier",
            "arenad_model_ece",
            "arenad_model_auc",
            # issue 18: consumer lag, publish latency, lease changes
            "arenad_cluster_lag_messages",
            "arenad_cluster_publish_seconds_bucket",
            "arenad_cluster_lease_changes_total",
        ):
            assert re.search(rf"\b{name}\b", queries), name

    def test_panels_use_the_datasource_variable_and_unique_ids(self) -> None:
        dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        panels = [p for p in dashboard["panels"] if p["type"] != "row"]
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids))
        assert {v["name"]: v["type"] for v in dashboard["templating"]["list"]}["datasource"] == "datasource"
        for panel in panels:
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]

    def test_prometheus_example_rules_query_exported_metrics(self) -> None:
        text = PROMETHEUS_YML.read_text(encoding="utf-8")
        assert "127.0.0.1:9108" in text
        assert unexported([text], live_exposition()) == set()
