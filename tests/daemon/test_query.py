"""The query server: the sans-io handler, line framing, real TCP and Unix sockets, the CLI client."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import socket
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.core.params import TIER_NAMES, ADRParams
from arenad.daemon import query as query_module
from arenad.daemon.config import QuerySettings
from arenad.daemon.query import LineSplitter, QueryHandler, close_servers, serve_query
from arenad.daemon.query_client import add_query_parser, run_query
from arenad.errors import ArenadError
from arenad.scopes import RESET_PRESETS, ScopeConfig, ScopeSet
from arenad.simulate import Population, event_stream

TIMEOUT = 10.0  # seconds: the bound on every wait in a socket test; a hang fails, never blocks
MAX_LINE = 256


def build_engine() -> Engine:
    """Three simulated days of 60 players, then three newcomers who are not placed yet."""
    eng = Engine()
    for attacker, victim, t in event_stream(Population(players=60, days=3)):
        eng.feed(attacker, victim, t)
    t = eng.clock + 1.0
    for k in range(3):  # 61 s apart: outside the §2.1 cooldown
        eng.feed("newbie", "p0001", t + 61.0 * k)
        eng.feed("p0002", "rookie", t + 61.0 * k + 1.0)
        eng.feed("zoë", "p0003", t + 61.0 * k + 2.0)
    return eng


@pytest.fixture(scope="module")
def engine() -> Engine:
    return build_engine()


@pytest.fixture(scope="module")
def handler(engine: Engine) -> QueryHandler:
    """Queries never change the engine, so one handler serves a whole module."""
    return QueryHandler(lambda: engine, QuerySettings(max_line=MAX_LINE))


@pytest.fixture(autouse=True)
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every structlog event of the test, kept out of stdout (the CLI tests read stdout)."""
    with structlog.testing.capture_logs() as captured:
        yield captured


def ask(handler: QueryHandler, request: dict[str, Any] | bytes) -> dict[str, Any]:
    line = request if isinstance(request, bytes) else json.dumps(request).encode()
    out = handler.handle_line(line)
    assert out.endswith(b"\n")
    assert out.count(b"\n") == 1
    response = json.loads(out)
    assert isinstance(response, dict)
    return response


def ladder(eng: Engine) -> list[int]:
    """Every player id best first, from the views alone (ties in first-seen order)."""
    mu = [eng.view(i).mu for i in range(len(eng))]
    return sorted(range(len(eng)), key=lambda i: (-mu[i], i))


def row(eng: Engine, i: int, display_k: float = 3.0) -> dict[str, Any]:
    v = eng.view(i)
    return {
        "rank": 1 + sum(eng.view(j).mu > v.mu for j in range(len(eng))),
        "player": v.player,
        "mu": v.mu,
        "sigma": v.sigma,
        "display": eng.display(i) if display_k == 3.0 else v.mu - display_k * v.sigma,
        "tier": v.tier,
        "provisional": v.tier is None,
        "active": v.active,
    }


# ---------------------------------------------------------------------------- the handler
class TestGet:
    """`get` reports one player's state exactly as the engine holds it."""

    def test_every_field_of_a_placed_player(self, engine: Engine) -> None:
        h = QueryHandler(lambda: engine, QuerySettings(display_k=2.5))
        i = engine.ids["p0010"]
        v = engine.view(i)
        mus = [engine.view(j).mu for j in range(len(engine))]
        below = sum(m < v.mu for m in mus)
        ties = sum(m == v.mu for m in mus) - 1
        assert v.tier is not None
        assert ask(h, {"op": "get", "player": "p0010"}) == {
            "ok": True,
            "op": "get",
            "scope": "global",
            "player": "p0010",
            "mu": v.mu,
            "sigma": v.sigma,
            "display": v.mu - 2.5 * v.sigma,
            "tier": v.tier,
            "placed": True,
            "provisional": False,
            "placement": {"events": v.n, "events_needed": 15, "sigma": v.sigma, "sigma_needed": 180.0},
            "rank": 1 + sum(m > v.mu for m in mus),
            "percentile": pytest.approx(100.0 * (below + 0.5 * ties) / (len(mus) - 1)),
            "events": v.n,
            "streak": v.streak,
            "trend": v.trend,
            "last_seen": v.last_t,
            "active": v.active,
            "players": len(engine),
        }

    def test_a_newcomer_is_unplaced_and_shows_its_progress(self, handler: QueryHandler) -> None:
        r = ask(handler, {"op": "get", "player": "newbie"})
        assert r["tier"] is None
        assert r["placed"] is False
        assert r["provisional"] is True
        assert r["placement"]["events"] == r["events"] == 3
        assert r["placement"]["events_needed"] == 15

    def test_rank_and_percentile_follow_the_ladder(self, engine: Engine, handler: QueryHandler) -> None:
        order = ladder(engine)
        best = ask(handler, {"op": "get", "player": engine.names[order[0]]})
        worst = ask(handler, {"op": "get", "player": engine.names[order[-1]]})
        assert (best["rank"], best["percentile"]) == (1, 100.0)
        assert (worst["rank"], worst["percentile"]) == (len(engine), 0.0)

    def test_non_ascii_name_round_trips(self, handler: QueryHandler) -> None:
        assert ask(handler, {"op": "get", "player": "zoë"})["player"] == "zoë"

    def test_id_is_echoed_on_success_and_on_error(self, handler: QueryHandler) -> None:
        assert ask(handler, {"op": "get", "player": "p0001", "id": 7})["id"] == 7
        r = ask(handler, {"op": "get", "player": "nobody", "id": "q-1"})
        assert (r["ok"], r["id"]) == (False, "q-1")


class TestTop:
    """`top` returns ladder positions offset+1 .. offset+n, best first."""

    def test_rows_and_order_match_a_sort_of_the_views(self, engine: Engine, handler: QueryHandler) -> None:
        r = ask(handler, {"op": "top", "n": 10})
        assert r["ok"] is True
        assert (r["n"], r["offset"], r["total"]) == (10, 0, len(engine))
        assert r["players"] == [row(engine, i) for i in ladder(engine)[:10]]

    def test_offset_pages_through_the_ladder(self, engine: Engine, handler: QueryHandler) -> None:
        r = ask(handler, {"op": "top", "n": 7, "offset": 20})
        assert [p["player"] for p in r["players"]] == [engine.names[i] for i in ladder(engine)[20:27]]
        assert [p["rank"] for p in r["players"]] == list(range(21, 28))

    def test_the_end_of_the_ladder_is_short_or_empty(self, engine: Engine, handler: QueryHandler) -> None:
        assert len(ask(handler, {"op": "top", "n": 10, "offset": len(engine) - 3})["players"]) == 3
        assert ask(handler, {"op": "top", "n": 10, "offset": 10**30})["players"] == []

    def test_n_up_to_max_top(self, engine: Engine) -> None:
        h = QueryHandler(lambda: engine, QuerySettings(max_top=5))
        assert len(ask(h, {"op": "top", "n": 5})["players"]) == 5
        assert ask(h, {"op": "top", "n": 6})["error"] == "field 'n' must be between 1 and 5, got 6"


class TestActiveOnly:
    """`top` with active_only hides players outside the §2.3 active set; ranks stay the ladder's."""

    def test_only_active_players_in_ladder_order(self, engine: Engine, handler: QueryHandler) -> None:
        active = [i for i in ladder(engine) if engine.view(i).active]
        inactive = [i for i in ladder(engine) if not engine.view(i).active]
        assert active and inactive  # the fixture has both (the newcomers are not active yet)
        r = ask(handler, {"op": "top", "n": 10, "offset": 2, "active_only": True})
        assert r["total"] == len(active) == engine.active_count
        assert [p["player"] for p in r["players"]] == [engine.names[i] for i in active[2:12]]
        assert all(p["active"] for p in r["players"])
        assert [p["rank"] for p in r["players"]] == [engine.rank(i) for i in active[2:12]]

    def test_must_be_a_boolean(self, handler: QueryHandler) -> None:
        r = ask(handler, {"op": "top", "n": 3, "active_only": 1})
        assert r == {"ok": False, "error": "field 'active_only' must be true or false, got number"}


class TestScopes:
    """Every op takes `scope`; a handler over one engine knows only the global ladder."""

    def test_global_is_the_default_and_the_only_scope_of_a_bare_engine(self, handler: QueryHandler) -> None:
        assert ask(handler, {"op": "stats", "scope": "global"})["ok"] is True
        r = ask(handler, {"op": "top", "n": 1, "scope": "server:eu-1"})
        assert r["ok"] is False and "global ladder only" in r["error"]
        assert ask(handler, {"op": "scopes"})["scopes"][0]["scope"] == "global"

    def test_scope_set_lookups(self) -> None:
        sc = ScopeSet(ADRParams(), ScopeConfig(kinds=("global", "server", "season")))
        for k in range(40):
            sc.feed(f"a{k % 5}", f"b{k % 7}", 1_764_000_000.0 + 70 * k, "eu-1" if k % 2 else "us-1")
        h = QueryHandler(lambda: sc, QuerySettings())
        eu = sc.engines["server:eu-1"]
        r = ask(h, {"op": "top", "n": 50, "scope": "server:eu-1"})
        assert [p["player"] for p in r["players"]] == [eu.names[i] for i in eu.ladder_ids()]
        got = ask(h, {"op": "get", "player": "a1", "scope": "server:eu-1"})
        assert got["mu"] == eu.mu(eu.ids["a1"]) and got["scope"] == "server:eu-1"
        assert ask(h, {"op": "get", "player": "a1", "scope": "server:nope"})["error"].startswith(
            "scope 'server:nope': no scope 'server:nope'"
        )
        assert "no season has started" in ask(h, {"op": "tiers", "scope": "season"})["error"]
        assert "unknown scope kind" in ask(h, {"op": "tiers", "scope": "club:1"})["error"]
        assert ask(h, {"op": "stats", "scope": 5})["error"] == "field 'scope' must be a string, got number"
        sc.start_season("s1", 1_764_100_000.0, RESET_PRESETS["soft"])
        season = ask(h, {"op": "top", "n": 3, "scope": "season"})
        assert season["ok"] and all(p["provisional"] for p in season["players"])
        listed = {row["scope"]: row for row in ask(h, {"op": "scopes"})["scopes"]}
        assert set(listed) == {"global", "server:eu-1", "server:us-1", "season:s1"}


class TestAround:
    """`around` returns up to n players either side of the asked one, and where it sits."""

    def test_window_matches_the_sorted_ladder(self, engine: Engine, handler: QueryHandler) -> None:
        order = ladder(engine)
        pos = order.index(engine.ids["p0010"])
        r = ask(handler, {"op": "around", "player": "p0010", "n": 4})
        window = order[max(0, pos - 4) : pos + 5]
        assert r["players"] == [row(engine, i) for i in window]
        assert r["players"][r["index"]]["player"] == "p0010"
        assert r["rank"] == r["players"][r["index"]]["rank"] == pos + 1

    def test_window_is_clipped_at_the_top(self, engine: Engine, handler: QueryHandler) -> None:
        best = engine.names[ladder(engine)[0]]
        r = ask(handler, {"op": "around", "player": best, "n": 3})
        assert (r["index"], r["rank"], len(r["players"])) == (0, 1, 4)


class TestTiers:
    """`tiers` lists every boundary and how many placed players each tier holds."""

    def test_boundaries_and_counts(self, engine: Engine, handler: QueryHandler) -> None:
        info = engine.tier_info()
        r = ask(handler, {"op": "tiers"})
        assert [t["tier"] for t in r["tiers"]] == list(TIER_NAMES)
        assert [t["min_mu"] for t in r["tiers"]] == [*info.boundaries, None]
        tiers = Counter(engine.view(i).tier for i in range(len(engine)))
        assert [t["players"] for t in r["tiers"]] == [tiers[name] for name in TIER_NAMES]
        assert r["placed"] == sum(t["players"] for t in r["tiers"]) == len(engine) - tiers[None]
        assert r["unplaced"] == tiers[None] == 3
        assert (r["calibrations"], r["active"], r["players"]) == (
            engine.calibrations,
            engine.active_count,
            len(engine),
        )


class TestPredict:
    """`predict` is the engine's §3.1 kill probability between two known players."""

    def test_matches_the_engine(self, engine: Engine, handler: QueryHandler) -> None:
        a, b = engine.ids["p0003"], engine.ids["p0040"]
        r = ask(handler, {"op": "predict", "a": "p0003", "b": "p0040"})
        assert r == {"ok": True, "op": "predict", "a": "p0003", "b": "p0040", "p": engine.predict(a, b)}
        back = ask(handler, {"op": "predict", "a": "p0040", "b": "p0003"})
        assert r["p"] + back["p"] == pytest.approx(1.0)

    @pytest.mark.parametrize("field", ["a", "b"])
    def test_names_the_unknown_side(self, handler: QueryHandler, field: str) -> None:
        request = {"op": "predict", "a": "p0003", "b": "p0040", field: "ghost"}
        assert ask(handler, request)["error"] == f"unknown player 'ghost' (field '{field}')"


class TestStats:
    """`stats` reports the engine's counters, merged with the daemon's own figures."""

    def test_engine_figures(self, engine: Engine, handler: QueryHandler) -> None:
        r = ask(handler, {"op": "stats"})
        expected = {
            "players": len(engine),
            "active": engine.active_count,
            "active_mean": engine.active_mean(),
            "mean_sigma": engine.mean_sigma,
            "applied": engine.applied,
            "filtered": engine.filtered,
            "rejected": engine.rejected,
            "clock": engine.clock,
            "calibrations": engine.calibrations,
        }
        assert {k: r[k] for k in expected} == expected

    def test_daemon_figures_are_merged_but_cannot_replace_the_envelope(self, engine: Engine) -> None:
        h = QueryHandler(lambda: engine, QuerySettings(), stats=lambda: {"queue_depth": 3, "ok": 0})
        r = ask(h, {"op": "stats"})
        assert (r["ok"], r["op"], r["queue_depth"]) == (True, "stats", 3)

    def test_non_finite_values_become_null(self) -> None:
        h = QueryHandler(Engine, QuerySettings(), stats=lambda: {"lag": math.nan, "x": [math.inf]})
        r = ask(h, {"op": "stats"})  # an empty engine: its clock is -inf
        assert (r["clock"], r["lag"], r["x"]) == (None, None, [None])


BAD_REQUESTS: list[tuple[bytes, str]] = [
    (b"{nope", "invalid JSON: "),
    (b'{"op": "stats", "x": NaN}', "invalid JSON: NaN is not valid JSON"),
    (b"\xff\xfe", "request is not valid UTF-8"),
    (b"", "empty request"),
    (b"   ", "empty request"),
    (b"[" * 5000, "invalid JSON: nested too deeply"),
    (b'["get"]', "request must be a JSON object, got array"),
    (b'"get"', "request must be a JSON object, got string"),
    (b"{}", "missing field 'op'"),
    (b'{"op": 3}', "field 'op' must be a string, got number"),
    (b'{"op": "delete"}', "unknown op 'delete' (one of: get, top, around, tiers, predict, stats, scopes)"),
    (b'{"op": "' + b"x" * 200 + b'"}', "unknown op 'xxxxx"),
    (b'{"op": "stats", "verbose": true}', "unknown field 'verbose' for op 'stats'"),
    (b'{"op": "top", "n": 5, "ofset": 1}', "unknown field 'ofset' for op 'top'"),
    (b'{"op": "stats", "id": [1]}', "field 'id' must be a string or a 64-bit integer, got array"),
    (b'{"op": "stats", "id": true}', "field 'id' must be a string or a 64-bit integer, got boolean"),
    (b'{"op": "stats", "id": "' + b"i" * 129 + b'"}', "field 'id' is longer than 128 UTF-8 bytes"),
    (b'{"op": "get"}', "missing field 'player'"),
    (b'{"op": "get", "player": ""}', "field 'player' must be a non-empty player name, got an empty string"),
    (b'{"op": "get", "player": 12}', "field 'player' must be a non-empty player name, got number"),
    (b'{"op": "get", "player": null}', "field 'player' must be a non-empty player name, got null"),
    (
        b'{"op": "get", "player": "' + "é".encode() * 65 + b'"}',
        "field 'player' is 130 UTF-8 bytes long; a player name has at most 128",
    ),
    (b'{"op": "get", "player": "ghost"}', "unknown player 'ghost'"),
    (b'{"op": "top"}', "missing field 'n'"),
    (b'{"op": "top", "n": 0}', "field 'n' must be between 1 and 1000, got 0"),
    (b'{"op": "top", "n": 1001}', "field 'n' must be between 1 and 1000, got 1001"),
    (b'{"op": "top", "n": 5.0}', "field 'n' must be an integer, got number"),
    (b'{"op": "top", "n": true}', "field 'n' must be an integer, got boolean"),
    (b'{"op": "top", "n": "10"}', "field 'n' must be an integer, got string"),
    (b'{"op": "top", "n": 5, "offset": -1}', "field 'offset' must be >= 0, got -1"),
    (b'{"op": "top", "n": 5, "offset": null}', "field 'offset' must be an integer, got null"),
    (b'{"op": "around", "player": "p0001"}', "missing field 'n'"),
    (b'{"op": "around", "player": "p0001", "n": -2}', "field 'n' must be between 1 and 1000, got -2"),
    (b'{"op": "around", "player": "ghost", "n": 2}', "unknown player 'ghost'"),
    (b'{"op": "predict", "a": "p0001"}', "missing field 'b'"),
]


# Any JSON value, for fuzzing request fields.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


class TestBadRequests:
    """Every bad request gets one error line naming what is wrong; nothing raises."""

    @pytest.mark.parametrize(("line", "message"), BAD_REQUESTS)
    def test_error_message(self, handler: QueryHandler, line: bytes, message: str) -> None:
        r = ask(handler, line)
        assert r["ok"] is False
        assert r["error"].startswith(message), r["error"]
        assert set(r) == {"ok", "error"}

    def test_echoed_client_values_are_cut_short(self, handler: QueryHandler) -> None:
        r = ask(handler, {"op": "top", "n": 10**500})
        assert len(r["error"]) < 100

    def test_line_too_long(self, handler: QueryHandler) -> None:
        r = json.loads(handler.line_too_long())
        assert r == {
            "ok": False,
            "error": f"request line longer than {MAX_LINE} bytes; the line was discarded",
        }

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=300))
    def test_any_bytes_get_one_json_line(self, handler: QueryHandler, line: bytes) -> None:
        r = ask(handler, line)
        assert isinstance(r["ok"], bool)

    @settings(max_examples=300, deadline=None)
    @given(
        st.fixed_dictionaries(
            {"op": st.sampled_from([*("get", "top", "around", "tiers", "predict", "stats"), "x"])},
            optional={
                k: JSON_VALUES | st.sampled_from(["p0001", "newbie", 1, 5, 1000])
                for k in ("player", "n", "offset", "a", "b", "id")
            },
        )
    )
    def test_any_request_object_gets_one_json_line(
        self, handler: QueryHandler, request: dict[str, Any]
    ) -> None:
        r = ask(handler, json.dumps(request).encode())
        assert r["ok"] is (r.get("error") is None)


class TestFailures:
    """An internal failure is an error response, counted, and logged once per kind."""

    def test_engine_failure_is_an_internal_error_logged_once(
        self, logs: list[MutableMapping[str, Any]]
    ) -> None:
        def broken() -> Engine:
            raise RuntimeError("boom")

        h = QueryHandler(broken, QuerySettings())
        for _ in range(3):
            assert ask(h, {"op": "stats", "id": 1}) == {"ok": False, "id": 1, "error": "internal error"}
        assert h.internal_errors == 3
        assert [(e["event"], e["op"], e["log_level"]) for e in logs] == [("query_failed", "stats", "error")]

    def test_unserialisable_daemon_stats_are_an_internal_error(self, engine: Engine) -> None:
        h = QueryHandler(lambda: engine, QuerySettings(), stats=lambda: {"when": object()})
        assert ask(h, {"op": "stats"})["error"] == "internal error"
        assert ask(h, {"op": "tiers"})["ok"] is True

    def test_latency_is_observed_per_op_with_bounded_labels(self, engine: Engine) -> None:
        seen: list[tuple[str, float]] = []
        h = QueryHandler(lambda: engine, QuerySettings(), observe=lambda op, s: seen.append((op, s)))
        ask(h, {"op": "tiers"})
        ask(h, {"op": "get", "player": "ghost"})
        ask(h, {"op": "made-up"})
        ask(h, b"{")
        assert [op for op, _ in seen] == ["tiers", "get", "invalid", "invalid"]
        assert all(s >= 0.0 for _, s in seen)

    def test_a_failing_observer_does_not_fail_the_query(self, engine: Engine) -> None:
        def observe(op: str, seconds: float) -> None:
            raise ValueError("metrics down")

        h = QueryHandler(lambda: engine, QuerySettings(), observe=observe)
        assert ask(h, {"op": "tiers"})["ok"] is True


class TestLineSplitter:
    """Framing: complete lines in order; an over-long line reported once and skipped."""

    def test_lines_across_chunks(self) -> None:
        s = LineSplitter(10)
        assert s.feed(b"ab\ncd") == [b"ab"]
        assert s.feed(b"e\r\n\nf") == [b"cde\r", b""]
        assert s.finish() == b"f"
        assert s.finish() is None

    def test_limit_counts_bytes_before_the_terminator(self) -> None:
        s = LineSplitter(4)
        assert s.feed(b"abcd\nabcd\r\nabcde\n") == [b"abcd", b"abcd\r", None]

    def test_over_long_line_is_reported_before_its_newline_and_skipped(self) -> None:
        s = LineSplitter(4)
        assert s.feed(b"abcdef") == [None]
        assert s.feed(b"ghij" * 100) == []
        assert s._buf == bytearray()  # nothing of a skipped line is kept
        assert s.feed(b"kl\nok\n") == [b"ok"]

    def test_a_pending_carriage_return_is_not_counted(self) -> None:
        s = LineSplitter(4)
        assert s.feed(b"abcd\r") == []
        assert s.feed(b"\n") == [b"abcd\r"]

    def test_unterminated_over_long_tail_is_not_a_request(self) -> None:
        s = LineSplitter(4)
        assert s.feed(b"abcdefgh") == [None]
        assert s.finish() is None


# ---------------------------------------------------------------------------- real sockets
@contextlib.asynccontextmanager
async def running(handler: QueryHandler, **overrides: Any) -> AsyncIterator[list[asyncio.Server]]:
    options: dict[str, Any] = {"listen": "127.0.0.1:0", "max_line": MAX_LINE, **overrides}
    servers = await serve_query(handler, QuerySettings(**options))
    try:
        yield servers
    finally:
        await close_servers(servers)


def tcp_port(servers: list[asyncio.Server]) -> int:
    port = servers[0].sockets[0].getsockname()[1]
    assert isinstance(port, int)
    return port


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@contextlib.asynccontextmanager
async def connected(port_or_path: int | Path) -> AsyncIterator[Stream]:
    if isinstance(port_or_path, int):
        reader, writer = await asyncio.open_connection("127.0.0.1", port_or_path)
    else:
        reader, writer = await asyncio.open_unix_connection(str(port_or_path))
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def reply(reader: asyncio.StreamReader) -> dict[str, Any]:
    line = await asyncio.wait_for(reader.readline(), TIMEOUT)
    assert line.endswith(b"\n"), line
    response = json.loads(line)
    assert isinstance(response, dict)
    return response


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """True once the server has ended the connection (EOF, or a reset)."""
    try:
        return await asyncio.wait_for(reader.read(), TIMEOUT) == b""
    except ConnectionResetError:
        return True


def run(coro: Callable[[], Any]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(60):  # a hang fails the test instead of blocking the suite
            await coro()

    asyncio.run(bounded())


def short_socket_path(tmp_path: Path) -> Path:
    path = tmp_path / "q.sock"
    if len(str(path)) > 100:  # AF_UNIX paths are limited to 107 bytes
        pytest.skip(f"temporary directory too long for a Unix socket: {tmp_path}")
    return path


class TestTcp:
    """One TCP connection carries many requests, in order, and survives bad ones."""

    def test_several_requests_on_one_connection(self, handler: QueryHandler, engine: Engine) -> None:
        async def main() -> None:
            async with running(handler) as servers, connected(tcp_port(servers)) as (reader, writer):
                await send(
                    writer,
                    b'{"op": "stats", "id": 1}\n{"op": "get", "player": "p0001", "id": 2}\n'
                    b'{"op": "top", "n": 3, "id": 3}\n',
                )
                answers = [await reply(reader) for _ in range(3)]
                assert [(a["ok"], a["id"], a["op"]) for a in answers] == [
                    (True, 1, "stats"),
                    (True, 2, "get"),
                    (True, 3, "top"),
                ]
                assert answers[1]["mu"] == engine.view(engine.ids["p0001"]).mu

        run(main)

    def test_a_bad_line_then_a_good_one(self, handler: QueryHandler) -> None:
        async def main() -> None:
            async with running(handler) as servers, connected(tcp_port(servers)) as (reader, writer):
                await send(writer, b"this is not json\n")
                assert (await reply(reader))["error"].startswith("invalid JSON")
                await send(writer, b'{"op": "tiers"}\r\n')
                assert (await reply(reader))["ok"] is True

        run(main)

    def test_over_long_line_is_answered_at_once_and_skipped(self, handler: QueryHandler) -> None:
        async def main() -> None:
            async with running(handler) as servers, connected(tcp_port(servers)) as (reader, writer):
                await send(writer, b'{"op": "get", "player": "' + b"x" * (2 * MAX_LINE))
                # Answered before the line's end is even sent: nothing waits for a newline.
                assert "longer than 256 bytes" in (await reply(reader))["error"]
                await send(writer, b"y" * (4 * MAX_LINE) + b'"}\n{"op": "stats", "id": "after"}\n')
                r = await reply(reader)
                assert (r["ok"], r["id"]) == (True, "after")

        run(main)

    def test_last_line_without_newline_is_answered_at_end_of_input(self, handler: QueryHandler) -> None:
        async def main() -> None:
            async with running(handler) as servers, connected(tcp_port(servers)) as (reader, writer):
                await send(writer, b'{"op": "tiers"}')
                writer.write_eof()
                assert (await reply(reader))["op"] == "tiers"
                assert await closed_by_server(reader)

        run(main)

    def test_a_bug_ends_one_connection_is_logged_and_the_server_goes_on(
        self, engine: Engine, logs: list[MutableMapping[str, Any]]
    ) -> None:
        class Fragile(QueryHandler):
            """Fails on one request line, as a bug in the handler would."""

            def handle_line(self, line: bytes) -> bytes:
                if b"crash" in line:
                    raise KeyError("bug")
                return super().handle_line(line)

        fragile = Fragile(lambda: engine, QuerySettings())

        async def main() -> None:
            async with running(fragile) as servers:
                port = tcp_port(servers)
                async with connected(port) as (reader, writer):
                    await send(writer, b"crash\n")
                    assert await closed_by_server(reader)
                async with connected(port) as (reader, writer):
                    await send(writer, b'{"op": "stats"}\n')
                    assert (await reply(reader))["internal_errors"] == 1

        run(main)
        assert [(e["event"], e["op"]) for e in logs if e["event"] == "query_failed"] == [
            ("query_failed", "connection")
        ]

    def test_close_servers_ends_open_connections(self, handler: QueryHandler) -> None:
        async def main() -> None:
            servers = await serve_query(handler, QuerySettings(listen="127.0.0.1:0"))
            try:
                async with connected(tcp_port(servers)) as (reader, writer):
                    await send(writer, b'{"op": "stats"}\n')
                    await reply(reader)
                    await close_servers(servers)
                    assert await closed_by_server(reader)
            finally:
                await close_servers(servers)  # a second close is harmless

        run(main)


class TestLimits:
    """Connection limit, idle timeout, and a client that never reads cannot stall others."""

    def test_connection_limit(self, handler: QueryHandler) -> None:
        async def main() -> None:
            async with running(handler, max_connections=2) as servers:
                port = tcp_port(servers)
                async with connected(port) as (r1, w1), connected(port) as (r2, w2):
                    for r, w in ((r1, w1), (r2, w2)):  # answered: both are counted by now
                        await send(w, b'{"op": "stats"}\n')
                        assert (await reply(r))["ok"] is True
                    async with connected(port) as (r3, _):
                        assert (await reply(r3))["error"] == "too many connections (limit 2)"
                        assert await closed_by_server(r3)
                    w1.write_eof()
                    assert await closed_by_server(r1)  # the slot is free once this ends
                    async with connected(port) as (r4, w4):
                        await send(w4, b'{"op": "stats"}\n')
                        assert (await reply(r4))["ok"] is True

        run(main)

    def test_idle_connection_is_closed(self, handler: QueryHandler) -> None:
        async def main() -> None:
            async with running(handler, idle_timeout=0.2) as servers:
                loop = asyncio.get_running_loop()
                async with connected(tcp_port(servers)) as (reader, writer):
                    await send(writer, b'{"op": "stats"}\n')
                    await reply(reader)
                    quiet_since = loop.time()
                    assert await closed_by_server(reader)
                    assert loop.time() - quiet_since >= 0.19

        run(main)

    def test_client_that_never_reads_does_not_stall_others(self, handler: QueryHandler) -> None:
        async def main() -> None:
            async with running(handler, idle_timeout=2.0) as servers:
                port = tcp_port(servers)
                stalled = asyncio.Event()

                async def flood(writer: asyncio.StreamWriter) -> None:
                    # Cheap to send, costly to answer: replies pile up on a client that never
                    # reads, until the server stops reading from it too.
                    burst = b'{"op": "top", "n": 1000}\n' * 256
                    _, high_water = writer.transport.get_write_buffer_limits()
                    with contextlib.suppress(ConnectionError):
                        while True:
                            writer.write(burst)
                            if writer.transport.get_write_buffer_size() > high_water:
                                # The kernel buffers both ways are full: the server has stopped
                                # reading from us, and this drain blocks.
                                stalled.set()
                            await writer.drain()

                async with connected(port) as (_, hostile):
                    flooding = asyncio.create_task(flood(hostile))
                    await asyncio.wait_for(stalled.wait(), TIMEOUT)
                    async with connected(port) as (reader, writer):
                        await send(writer, b'{"op": "get", "player": "p0001"}\n')
                        assert (await reply(reader))["ok"] is True
                    assert not flooding.done()  # still held up, yet the other client was served
                    await asyncio.wait_for(flooding, TIMEOUT)  # dropped after idle_timeout
                async with connected(port) as (reader, writer):
                    await send(writer, b'{"op": "stats"}\n')
                    assert (await reply(reader))["ok"] is True

        run(main)

    def test_pipelined_requests_leave_the_loop_to_the_engine(
        self, handler: QueryHandler, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A slice of request handling ends once its time is spent, whatever the machine's speed:
        with the slice at zero every request after the first gives the loop back, so the
        engine task is never kept waiting behind more than two (counted, not timed)."""
        monkeypatch.setattr(query_module, "_SLICE", 0.0)
        answered = 0
        handle = handler.handle_line

        def counting(line: bytes) -> bytes:
            nonlocal answered
            answered += 1
            return handle(line)

        monkeypatch.setattr(handler, "handle_line", counting)

        async def main() -> None:
            burst = b'{"op": "top", "n": 1000}\n' * 2000  # seconds of work if answered in one go
            most_between_turns = 0
            done = asyncio.Event()

            async def engine_task() -> None:
                # Stands in for the engine task sharing the loop: how many requests between turns?
                nonlocal most_between_turns
                while not done.is_set():
                    before = answered
                    await asyncio.sleep(0)
                    most_between_turns = max(most_between_turns, answered - before)

            # rate_limit 0: the 2000 pipelined requests are over the default burst on purpose.
            async with (
                running(handler, rate_limit=0) as servers,
                connected(tcp_port(servers)) as (reader, writer),
            ):
                ticking = asyncio.create_task(engine_task())
                writer.write(burst)
                for _ in range(2000):
                    assert (await reply(reader))["ok"] is True
                done.set()
                await ticking
            assert answered == 2000
            assert 1 <= most_between_turns <= 2

        run(main)


class TestUnixSocket:
    """The Unix socket serves the same protocol; its file is managed with care."""

    def test_serves_requests_with_mode_0660(self, handler: QueryHandler, tmp_path: Path) -> None:
        path = short_socket_path(tmp_path)

        async def main() -> None:
            async with running(handler, listen="off", unix=str(path)) as servers:
                assert len(servers) == 1
                assert stat.S_IMODE(path.stat().st_mode) == 0o660
                async with connected(path) as (reader, writer):
                    await send(writer, b'{"op": "predict", "a": "p0001", "b": "p0002"}\nnope\n')
                    assert (await reply(reader))["ok"] is True
                    assert (await reply(reader))["ok"] is False
            assert not path.exists()  # close_servers removes the socket file

        run(main)

    def test_tcp_and_unix_share_one_connection_limit(self, handler: QueryHandler, tmp_path: Path) -> None:
        path = short_socket_path(tmp_path)

        async def main() -> None:
            async with running(handler, unix=str(path), max_connections=1) as servers:
                assert len(servers) == 2
                async with connected(tcp_port(servers)) as (r1, w1):
                    await send(w1, b'{"op": "stats"}\n')
                    await reply(r1)
                    async with connected(path) as (r2, _):
                        assert (await reply(r2))["error"] == "too many connections (limit 1)"

        run(main)

    def test_stale_socket_file_is_replaced(self, handler: QueryHandler, tmp_path: Path) -> None:
        path = short_socket_path(tmp_path)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(str(path))  # bound, never listening, then closed: what a crash leaves behind

        async def main() -> None:
            async with running(handler, listen="off", unix=str(path)), connected(path) as (reader, writer):
                await send(writer, b'{"op": "stats"}\n')
                assert (await reply(reader))["ok"] is True

        run(main)

    def test_socket_in_use_is_refused(self, handler: QueryHandler, tmp_path: Path) -> None:
        path = short_socket_path(tmp_path)

        async def main() -> None:
            async with running(handler, listen="off", unix=str(path)):
                with pytest.raises(ArenadError, match="in use by another process"):
                    await serve_query(handler, QuerySettings(listen="off", unix=str(path)))
                async with connected(path) as (reader, writer):  # the first server is untouched
                    await send(writer, b'{"op": "stats"}\n')
                    assert (await reply(reader))["ok"] is True

        run(main)

    def test_regular_file_is_never_removed(self, handler: QueryHandler, tmp_path: Path) -> None:
        path = short_socket_path(tmp_path)
        path.write_text("precious")

        async def main() -> None:
            with pytest.raises(ArenadError, match="not a socket"):
                await serve_query(handler, QuerySettings(listen="127.0.0.1:0", unix=str(path)))

        run(main)
        assert path.read_text() == "precious"


# ---------------------------------------------------------------------------- the CLI client
def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="arenad")
    add_query_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["query", *argv])


async def query(capsys: pytest.CaptureFixture[str], server: int | Path, *argv: str) -> tuple[int, str, str]:
    """Run ``arenad query`` against a server on this loop, from a thread (the client blocks)."""
    where = ["--unix", str(server)] if isinstance(server, Path) else ["--connect", f"127.0.0.1:{server}"]
    capsys.readouterr()
    code = await asyncio.to_thread(run_query, parse(*where, "--timeout", "5", *argv))
    out, err = capsys.readouterr()
    return code, out, err


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert isinstance(port, int)
    return port


class TestQueryCommand:
    """`arenad query` prints the daemon's JSON and exits 0 (ok), 1 (refused) or 2 (no answer)."""

    def test_parser_builds_each_request(self) -> None:
        from arenad.daemon.query_client import request_of

        cases = {
            ("get", "alice"): {"op": "get", "player": "alice"},
            ("top", "5", "--offset", "2"): {"op": "top", "n": 5, "offset": 2},
            ("top", "5"): {"op": "top", "n": 5, "offset": 0},
            ("around", "alice", "3"): {"op": "around", "player": "alice", "n": 3},
            ("tiers",): {"op": "tiers"},
            ("predict", "alice", "bob"): {"op": "predict", "a": "alice", "b": "bob"},
            ("stats",): {"op": "stats"},
        }
        for argv, expected in cases.items():
            line = request_of(parse(*argv))
            assert line.endswith(b"\n")
            assert json.loads(line) == expected
        assert request_of(parse("raw", ' {"op": "x"} ')) == b'{"op": "x"}\n'

    def test_every_op_prints_the_server_response(
        self, handler: QueryHandler, capsys: pytest.CaptureFixture[str]
    ) -> None:
        requests: list[tuple[list[str], dict[str, Any]]] = [
            (["get", "p0001"], {"op": "get", "player": "p0001"}),
            (["top", "5", "--offset", "2"], {"op": "top", "n": 5, "offset": 2}),
            (["around", "p0001", "2"], {"op": "around", "player": "p0001", "n": 2}),
            (["tiers"], {"op": "tiers"}),
            (["predict", "p0001", "p0002"], {"op": "predict", "a": "p0001", "b": "p0002"}),
            (["raw", '{"op": "stats", "id": 9}'], {"op": "stats", "id": 9}),
        ]

        async def main() -> None:
            async with running(handler) as servers:
                for argv, request in requests:
                    code, out, err = await query(capsys, tcp_port(servers), *argv)
                    assert (code, err) == (0, "")
                    assert json.loads(out) == ask(handler, request)

        run(main)

    def test_refused_request_exits_1_and_prints_the_error(
        self, handler: QueryHandler, capsys: pytest.CaptureFixture[str]
    ) -> None:
        async def main() -> None:
            async with running(handler) as servers:
                code, out, _ = await query(capsys, tcp_port(servers), "get", "ghost")
                assert code == 1
                assert json.loads(out) == {"ok": False, "error": "unknown player 'ghost'"}
                code, out, _ = await query(capsys, tcp_port(servers), "top", "0")
                assert (code, json.loads(out)["ok"]) == (1, False)

        run(main)

    def test_a_full_server_answers_and_exits_1(
        self, handler: QueryHandler, capsys: pytest.CaptureFixture[str]
    ) -> None:
        async def main() -> None:
            async with running(handler, max_connections=1) as servers:
                port = tcp_port(servers)
                async with connected(port) as (reader, writer):
                    await send(writer, b'{"op": "stats"}\n')
                    await reply(reader)  # this one holds the only slot
                    for _ in range(20):  # the request is sent before the refusal: no reset race
                        code, out, err = await query(capsys, port, "stats")
                        assert (code, err) == (1, "")
                        assert json.loads(out) == {"ok": False, "error": "too many connections (limit 1)"}

        run(main)

    def test_compact_prints_the_line_as_received(
        self, handler: QueryHandler, capsys: pytest.CaptureFixture[str]
    ) -> None:
        async def main() -> None:
            async with running(handler) as servers:
                code, out, _ = await query(capsys, tcp_port(servers), "--compact", "get", "zoë")
                assert code == 0
                assert out.encode() == handler.handle_line(b'{"op": "get", "player": "zo\\u00eb"}')

        run(main)

    def test_over_the_unix_socket(
        self, handler: QueryHandler, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = short_socket_path(tmp_path)

        async def main() -> None:
            async with running(handler, listen="off", unix=str(path)):
                code, out, _ = await query(capsys, path, "stats")
                assert (code, json.loads(out)["op"]) == (0, "stats")

        run(main)

    def test_connection_refused_exits_2(self, capsys: pytest.CaptureFixture[str]) -> None:
        port = free_port()
        code = run_query(parse("--connect", f"127.0.0.1:{port}", "stats"))
        out, err = capsys.readouterr()
        assert (code, out) == (2, "")
        assert f"cannot connect to 127.0.0.1:{port}" in err

    def test_missing_unix_socket_exits_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        code = run_query(parse("--unix", str(tmp_path / "none.sock"), "stats"))
        assert code == 2
        assert "cannot connect to" in capsys.readouterr().err

    @pytest.mark.parametrize(
        ("behaviour", "message"),
        [
            ("close", "closed the connection without a response"),
            ("silent", "no response from"),
            ("garbage", "not JSON"),
            ("no_ok", 'has no "ok" field'),
        ],
    )
    def test_no_usable_answer_exits_2(
        self, capsys: pytest.CaptureFixture[str], behaviour: str, message: str
    ) -> None:
        async def misbehave(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()
            if behaviour == "silent":
                await reader.read()  # until the client gives up and closes
            elif behaviour == "garbage":
                writer.write(b"<html>\n")
            elif behaviour == "no_ok":
                writer.write(b'{"result": 1}\n')
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

        async def main() -> None:
            server = await asyncio.start_server(misbehave, "127.0.0.1", 0)
            try:
                port = server.sockets[0].getsockname()[1]
                capsys.readouterr()
                args = parse("--connect", f"127.0.0.1:{port}", "--timeout", "0.3", "stats")
                code = await asyncio.to_thread(run_query, args)
                out, err = capsys.readouterr()
                assert (code, out) == (2, "")
                assert message in err
            finally:
                server.close()
                await server.wait_closed()

        run(main)

    def test_module_entry_point(self) -> None:
        port = free_port()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "arenad.daemon.query_client",
                "query",
                "--connect",
                f"127.0.0.1:{port}",
                "tiers",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "error"},
        )
        assert proc.returncode == 2
        assert proc.stderr.startswith("arenad query: cannot connect to 127.0.0.1:")
