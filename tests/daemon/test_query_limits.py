"""Query-port limits: the per-connection token bucket, the connection cap, the idle timeout, the
refusal metrics, and that no query op changes the engine; end to end against a real daemon."""

from __future__ import annotations

import json
import math
import select
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonProcess
from hypothesis import given
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.daemon.config import QuerySettings, validate
from arenad.daemon.metrics import Metrics
from arenad.daemon.query import OPS, QueryHandler, TokenBucket
from arenad.daemon.types import QUERY_REJECT_REASONS, MetricsSnapshot
from arenad.simulate import Population, event_stream

TIMEOUT = 20.0  # seconds: the bound on every wait; a hang fails, never blocks
BURST = 5
MAX_CONNECTIONS = 50
FLOOD = 300


# ---------------------------------------------------------------------------- the token bucket
class TestTokenBucket:
    """A connection may send ``burst`` requests at once, then ``rate`` per second."""

    @given(
        rate=st.floats(0.01, 1000.0),
        burst=st.integers(1, 50),
        steps=st.lists(st.floats(0.0, 2.0), max_size=80),
    )
    def test_never_allows_more_than_burst_plus_rate_times_elapsed(
        self, rate: float, burst: int, steps: list[float]
    ) -> None:
        bucket = TokenBucket(rate, burst, 0.0)
        now = 0.0
        allowed: list[float] = []  # times of the requests let through
        for step in steps:
            now += step
            wait = bucket.take(now)
            assert wait >= 0.0
            if wait == 0.0:
                allowed.append(now)
        # In every window [t_i, t_j], however chosen: at most burst + rate * (t_j - t_i).
        for i in range(len(allowed)):
            for j in range(i, len(allowed)):
                assert j - i + 1 <= burst + rate * (allowed[j] - allowed[i]) + 1e-6

    @given(rate=st.floats(0.01, 1000.0), burst=st.integers(1, 50), gap=st.floats(0.0, 5.0))
    def test_retry_after_is_when_a_token_is_due(self, rate: float, burst: int, gap: float) -> None:
        bucket = TokenBucket(rate, burst, 0.0)
        for _ in range(burst):
            assert bucket.take(gap) == 0.0
        wait = bucket.take(gap)
        assert wait > 0.0
        assert bucket.take(gap + wait * (1 + 1e-9) + 1e-9) == 0.0

    def test_starts_full_then_refuses(self) -> None:
        bucket = TokenBucket(1.0, 3, 100.0)
        assert [bucket.take(100.0) for _ in range(4)][:3] == [0.0, 0.0, 0.0]
        assert bucket.take(100.0) == pytest.approx(1.0)

    def test_a_clock_stepping_back_refills_nothing(self) -> None:
        bucket = TokenBucket(1.0, 1, 100.0)
        assert bucket.take(100.0) == 0.0
        assert bucket.take(50.0) > 0.0
        assert bucket.take(100.5) == pytest.approx(0.5)

    def test_zero_rate_never_refills(self) -> None:
        bucket = TokenBucket(0.0, 1, 0.0)
        assert bucket.take(0.0) == 0.0
        assert bucket.take(1e9) == math.inf

    @pytest.mark.parametrize(("rate", "burst"), [(-1.0, 1), (math.nan, 1), (math.inf, 1), (1.0, 0)])
    def test_bad_arguments_are_refused(self, rate: float, burst: int) -> None:
        with pytest.raises(ValueError, match=r"rate|burst"):
            TokenBucket(rate, burst, 0.0)


class TestSettings:
    """``[query] rate_limit`` and ``burst`` are validated and name the key."""

    def test_defaults_suit_game_servers_polling_ranks(self) -> None:
        s = QuerySettings()
        assert (s.rate_limit, s.burst) == (200.0, 400)
        assert validate(QuerySettings, {}) == (s, [])

    @pytest.mark.parametrize(
        ("kw", "key"),
        [
            ({"rate_limit": -1.0}, "query.rate_limit"),
            ({"rate_limit": math.inf}, "query.rate_limit"),
            ({"rate_limit": "fast"}, "query.rate_limit"),
            ({"burst": 0}, "query.burst"),
            ({"burst": 2.5}, "query.burst"),
        ],
    )
    def test_bad_values(self, kw: dict[str, Any], key: str) -> None:
        _, problems = validate(QuerySettings, kw, "query")
        assert [p.key for p in problems] == [key]

    def test_zero_rate_means_unlimited_and_is_valid(self) -> None:
        assert QuerySettings(rate_limit=0.0).rate_limit == 0.0  # (an invalid one raises)


class TestRefusalMetrics:
    """Refusals are counted by reason, every reason always exported; the gauge shows connections."""

    def test_rate_limited_reply_and_count(self) -> None:
        handler = QueryHandler(Engine, QuerySettings())
        reply = json.loads(handler.rate_limited(0.0123))
        assert reply == {"ok": False, "error": "rate limited", "retry_after": 0.013}
        assert handler.rejected == Counter(rate_limited=1, too_many_connections=0, oversize=0)

    def test_oversize_is_counted(self) -> None:
        handler = QueryHandler(Engine, QuerySettings())
        handler.line_too_long()
        assert handler.rejected["oversize"] == 1

    def test_exported_with_zeros(self) -> None:
        snap = MetricsSnapshot(query_connections=3, query_rejected=Counter(rate_limited=2))
        text = Metrics(lambda: snap).exposition().decode()
        assert "arenad_query_connections 3.0" in text
        assert 'arenad_query_rejected_total{reason="rate_limited"} 2.0' in text
        for reason in QUERY_REJECT_REASONS:
            assert f'arenad_query_rejected_total{{reason="{reason}"}}' in text


# ---------------------------------------------------------------------------- read-only
def every_request(eng: Engine) -> Iterator[dict[str, Any]]:
    """Valid and invalid requests of every op, on real players."""
    a, b = eng.names[0], eng.names[len(eng) - 1]
    yield {"op": "get", "player": a}
    yield {"op": "get", "player": "nobody"}
    yield {"op": "top", "n": 1000}
    yield {"op": "top", "n": 5, "offset": 10_000}
    yield {"op": "around", "player": b, "n": 7}
    yield {"op": "tiers"}
    yield {"op": "predict", "a": a, "b": b}
    yield {"op": "predict", "a": a, "b": a}
    yield {"op": "stats"}
    yield {"op": "scopes"}
    yield {"op": "top", "n": 10, "active_only": True}
    yield {"op": "get", "player": a, "scope": "server:x"}


def test_no_query_op_changes_the_engine() -> None:
    """Every op, valid and refused, leaves the exported engine state exactly as it was."""
    eng = Engine()
    for attacker, victim, t in event_stream(Population(players=40, days=2)):
        eng.feed(attacker, victim, t)
    handler = QueryHandler(lambda: eng, QuerySettings())
    requests = list(every_request(eng))
    assert {r["op"] for r in requests} == set(OPS)
    before = eng.export_state()
    for request in requests:
        for _ in range(2):  # twice: a cache filled by the first call must not show either
            handler.handle_line(json.dumps(request).encode())
    handler.line_too_long()
    handler.rate_limited(1.0)
    assert eng.export_state() == before
    assert handler.internal_errors == 0


# ---------------------------------------------------------------------------- a real daemon
def start_daemon(tmp: Path, **query: Any) -> DaemonProcess:
    config = tmp / "arenad.toml"
    lines = ["[query]", *(f"{k} = {json.dumps(v)}" for k, v in query.items())]
    config.write_text("\n".join([*lines, "[daemon]", "checkpoint_interval = 3600", ""]))
    d = DaemonProcess(tmp / "state", config=config)
    d.start()
    now = time.time()
    d.send_events([{"t": now - 10 + k, "attacker": "alice", "victim": "bob"} for k in range(3)])
    d.wait_for(lambda s: s["applied"] >= 1)
    return d


def wait_metric(d: DaemonProcess, name: str, labels: str, want: float) -> None:
    deadline = time.monotonic() + TIMEOUT
    while (got := d.metric(name, labels)) != want:
        assert time.monotonic() < deadline, f"{name}{{{labels}}} is {got}, expected {want}"
        time.sleep(0.05)


def read_lines(s: socket.socket, n: int) -> list[dict[str, Any]]:
    buf = b""
    while buf.count(b"\n") < n:
        chunk = s.recv(65536)
        assert chunk, f"connection closed after {len(buf.splitlines())} of {n} lines"
        buf += chunk
    return [json.loads(line) for line in buf.splitlines()]


def ask(s: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
    s.sendall(json.dumps(request).encode() + b"\n")
    (reply,) = read_lines(s, 1)
    return reply


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """Rate 0.01/s: no token can come back during the test, so the counts are exact."""
    d = start_daemon(
        tmp_path_factory.mktemp("limits"),
        rate_limit=0.01,
        burst=BURST,
        max_connections=MAX_CONNECTIONS,
        idle_timeout=120.0,
    )
    try:
        yield d
    finally:
        d.kill()


class TestDaemonRateLimit:
    """A client over its rate gets "rate limited" answers on an open connection, each counted."""

    def test_burst_then_refused_and_counted(self, daemon: DaemonProcess) -> None:
        before = daemon.metric("arenad_query_rejected_total", 'reason="rate_limited"')
        request = json.dumps({"op": "get", "player": "alice"}).encode() + b"\n"
        with socket.create_connection(daemon.addr("query"), timeout=TIMEOUT) as s:
            s.sendall(request * 20)
            replies = read_lines(s, 20)
            assert [r["ok"] for r in replies] == [True] * BURST + [False] * (20 - BURST)
            for r in replies[BURST:]:
                assert r["error"] == "rate limited"
                assert r["retry_after"] > 0
            # The connection stays open, and stays limited.
            assert ask(s, {"op": "stats"})["error"] == "rate limited"
        wait_metric(daemon, "arenad_query_rejected_total", 'reason="rate_limited"', before + 16)

    def test_each_connection_has_its_own_bucket(self, daemon: DaemonProcess) -> None:
        for _ in range(2):
            with socket.create_connection(daemon.addr("query"), timeout=TIMEOUT) as s:
                assert ask(s, {"op": "get", "player": "bob"})["ok"]


class TestDaemonConnectionFlood:
    """A flood past max_connections: refused and counted, others still answered, gauge recovers."""

    def test_flood(self, daemon: DaemonProcess) -> None:
        wait_metric(daemon, "arenad_query_connections", "", 0)
        refused_before = daemon.metric("arenad_query_rejected_total", 'reason="too_many_connections"')
        well_behaved = socket.create_connection(daemon.addr("query"), timeout=TIMEOUT)
        flood: list[socket.socket] = []
        try:
            assert ask(well_behaved, {"op": "get", "player": "alice"})["ok"]
            wait_metric(daemon, "arenad_query_connections", "", 1)
            for _ in range(FLOOD):
                flood.append(socket.create_connection(daemon.addr("query"), timeout=TIMEOUT))
            refused = FLOOD - (MAX_CONNECTIONS - 1)
            wait_metric(
                daemon,
                "arenad_query_rejected_total",
                'reason="too_many_connections"',
                refused_before + refused,
            )
            assert daemon.metric("arenad_query_connections") == MAX_CONNECTIONS
            # Every refused client is told why before its connection ends.
            told = 0
            pending = list(flood)
            deadline = time.monotonic() + TIMEOUT
            while told < refused and time.monotonic() < deadline:
                ready, _, _ = select.select(pending, [], [], 0.5)
                for s in ready:
                    line = s.recv(4096)
                    assert json.loads(line) == {
                        "ok": False,
                        "error": f"too many connections (limit {MAX_CONNECTIONS})",
                    }
                    pending.remove(s)
                    told += 1
            assert told == refused
            # The daemon is up and the client that was there first is still answered.
            assert daemon.alive()
            assert ask(well_behaved, {"op": "get", "player": "bob"})["ok"]
        finally:
            for s in flood:
                s.close()
        try:
            wait_metric(daemon, "arenad_query_connections", "", 1)
            assert ask(well_behaved, {"op": "tiers"})["ok"]
        finally:
            well_behaved.close()
        wait_metric(daemon, "arenad_query_connections", "", 0)
        # Slots are free again: a new client is served.
        assert daemon.query({"op": "get", "player": "alice"})["ok"]
        assert daemon.alive()


def test_idle_connection_is_closed(tmp_path: Path) -> None:
    d = start_daemon(tmp_path, idle_timeout=0.5)
    try:
        with socket.create_connection(d.addr("query"), timeout=TIMEOUT) as s:
            assert ask(s, {"op": "get", "player": "alice"})["ok"]
            assert s.recv(4096) == b""  # closed by the daemon after idle_timeout
        wait_metric(d, "arenad_query_connections", "", 0)
        assert d.alive()
    finally:
        d.kill()
