"""Leaderboard scopes (arenad.scopes): routing, seasons, event windows, exclusions and state.

The reference for every scope is a plain ``Engine`` fed, in stream order, exactly the kills the
scope should see; the expected season names and starts come from ``datetime`` directly.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine, Outcome, PlayerView
from arenad.core.params import TIER_NAMES, ADRParams
from arenad.scopes import (
    RESET_PRESETS,
    EventWindow,
    Exclusions,
    Reset,
    Rule,
    ScopeConfig,
    ScopeSet,
    SeasonStart,
    calendar_next,
    calendar_season,
    parse_scope,
)

T0 = 1_764_000_000.0  # 2025-11-24 16:00:00 UTC
HOUR = 3600.0
DAY = 86400.0
SERVERS = ("eu-1", "eu-2", "us-1")
PARAMS = ADRParams(p_min=8, n_min=5, recalibrate_interval=600.0)
ALL_KINDS = ("global", "server", "season", "event")

Kill = tuple[str, str, float, str | None]


def multi_stream(
    n: int,
    seed: int,
    *,
    players: int = 24,
    servers: tuple[str, ...] = SERVERS,
    start: float = T0,
    step: tuple[float, float] = (1.0, 25.0),
    late: float = 0.05,
) -> list[Kill]:
    """Kills on several servers in arrival order; a share ``late`` arrives up to 12 s behind
    (inside and beyond the 5 s late tolerance)."""
    rng = random.Random(seed)
    t = start
    out: list[Kill] = []
    for _ in range(n):
        t += rng.uniform(*step)
        a, b = rng.sample(range(players), 2)
        ts = t - rng.uniform(0.0, 12.0) if rng.random() < late else t
        out.append((f"p{a}", f"p{b}", ts, rng.choice(servers)))
    return out


def plain(kills: list[Kill], params: ADRParams = PARAMS) -> Engine:
    eng = Engine(params)
    for a, b, t, _ in kills:
        eng.feed(a, b, t)
    return eng


def fed(config: ScopeConfig, kills: list[Kill], params: ADRParams = PARAMS) -> ScopeSet:
    scopes = ScopeSet(params, config)
    for a, b, t, s in kills:
        scopes.feed(a, b, t, s)
    return scopes


def engines_state(scopes: ScopeSet) -> dict[str, object]:
    return {key: eng.export_state() for key, eng in scopes.engines.items()}


def utc(year: int, month: int, day: int, hour: int = 0) -> float:
    return datetime(year, month, day, hour, tzinfo=UTC).timestamp()


# ---------------------------------------------------------------------------- parse_scope
class TestParseScope:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("global", ("global", None)),
            ("server:eu-1", ("server", "eu-1")),
            ("season", ("season", None)),
            ("season:2026-Q4", ("season", "2026-Q4")),
            ("event:cup", ("event", "cup")),
            ("event:" + "x" * 256, ("event", "x" * 256)),
            ("server:" + "é" * 128, ("server", "é" * 128)),  # 256 bytes of UTF-8
        ],
    )
    def test_valid(self, text: str, expected: tuple[str, str | None]) -> None:
        assert parse_scope(text) == expected

    @pytest.mark.parametrize(
        ("text", "match"),
        [
            ("", "unknown scope kind"),
            ("Global", "unknown scope kind"),
            ("player:x", "unknown scope kind"),
            ("global:x", "no id"),
            ("global:", "no id"),
            ("server", "needs an id"),
            ("event", "needs an id"),
            ("server:", "bad server id"),
            ("season:", "bad season id"),
            ("event:" + "x" * 257, "bad event id"),
            ("server:" + "é" * 129, "bad server id"),  # 258 bytes
        ],
    )
    def test_invalid(self, text: str, match: str) -> None:
        with pytest.raises(ValueError, match=match):
            parse_scope(text)


# ---------------------------------------------------------------------------- calendar
class TestCalendar:
    @pytest.mark.parametrize(
        ("when", "monthly", "quarterly", "yearly"),
        [
            (
                (2025, 11, 24, 16),
                ("2025-11", (2025, 11, 1)),
                ("2025-Q4", (2025, 10, 1)),
                ("2025", (2025, 1, 1)),
            ),
            ((2026, 1, 1, 0), ("2026-01", (2026, 1, 1)), ("2026-Q1", (2026, 1, 1)), ("2026", (2026, 1, 1))),
            ((2026, 3, 31, 23), ("2026-03", (2026, 3, 1)), ("2026-Q1", (2026, 1, 1)), ("2026", (2026, 1, 1))),
            ((2026, 4, 1, 0), ("2026-04", (2026, 4, 1)), ("2026-Q2", (2026, 4, 1)), ("2026", (2026, 1, 1))),
            ((2026, 7, 1, 0), ("2026-07", (2026, 7, 1)), ("2026-Q3", (2026, 7, 1)), ("2026", (2026, 1, 1))),
            ((2026, 9, 30, 12), ("2026-09", (2026, 9, 1)), ("2026-Q3", (2026, 7, 1)), ("2026", (2026, 1, 1))),
            (
                (2026, 10, 1, 0),
                ("2026-10", (2026, 10, 1)),
                ("2026-Q4", (2026, 10, 1)),
                ("2026", (2026, 1, 1)),
            ),
            ((2028, 2, 29, 12), ("2028-02", (2028, 2, 1)), ("2028-Q1", (2028, 1, 1)), ("2028", (2028, 1, 1))),
        ],
    )
    def test_names_and_starts(
        self,
        when: tuple[int, int, int, int],
        monthly: tuple[str, tuple[int, int, int]],
        quarterly: tuple[str, tuple[int, int, int]],
        yearly: tuple[str, tuple[int, int, int]],
    ) -> None:
        t = utc(*when)
        for calendar, (name, start) in (("monthly", monthly), ("quarterly", quarterly), ("yearly", yearly)):
            assert calendar_season(calendar, t) == (name, utc(*start)), calendar
            assert calendar_season(calendar, t)[1] <= t

    @pytest.mark.parametrize("calendar", ["monthly", "quarterly", "yearly"])
    def test_one_second_before_a_start_is_the_previous_season(self, calendar: str) -> None:
        new_year = utc(2026, 1, 1)
        name, start = calendar_season(calendar, new_year - 1.0)
        assert name.startswith("2025")
        assert start < new_year
        assert calendar_season(calendar, new_year) == (
            {"monthly": "2026-01", "quarterly": "2026-Q1"}.get(calendar, "2026"),
            new_year,
        )

    @pytest.mark.parametrize("calendar", ["monthly", "quarterly", "yearly"])
    def test_just_below_a_start_is_still_the_previous_season(self, calendar: str) -> None:
        """The largest float below midnight (0.24 us before) is not rounded into the next season."""
        new_year = utc(2026, 1, 1)
        t = math.nextafter(new_year, 0.0)
        name, start = calendar_season(calendar, t)
        assert start <= t < new_year
        assert name.startswith("2025")

    def test_every_day_of_two_years(self) -> None:
        """Walk day by day (at noon) and compare with datetime's own month/quarter/year."""
        t = utc(2025, 1, 1, 12)
        for _ in range(2 * 366):
            d = datetime.fromtimestamp(t, UTC)
            q = (d.month - 1) // 3
            assert calendar_season("monthly", t) == (f"{d.year}-{d.month:02d}", utc(d.year, d.month, 1))
            assert calendar_season("quarterly", t) == (f"{d.year}-Q{q + 1}", utc(d.year, 3 * q + 1, 1))
            assert calendar_season("yearly", t) == (str(d.year), utc(d.year, 1, 1))
            t += DAY

    @pytest.mark.parametrize("calendar", ["none", "weekly", ""])
    def test_unknown_calendar(self, calendar: str) -> None:
        with pytest.raises(ValueError, match="no calendar"):
            calendar_season(calendar, T0)


# ---------------------------------------------------------------------------- server and global
class TestServerScopes:
    def test_each_server_equals_a_replay_of_its_own_kills(self) -> None:
        kills = multi_stream(3000, seed=1)
        scopes = fed(ScopeConfig(kinds=("global", "server")), kills)
        assert sorted(scopes.keys()) == ["global", *(f"server:{s}" for s in sorted(SERVERS))]
        for s in SERVERS:
            mine = plain([k for k in kills if k[3] == s])
            assert scopes.engines[f"server:{s}"].export_state() == mine.export_state(), s
        assert scopes.global_engine.export_state() == plain(kills).export_state()

    def test_first_kill_of_a_server_arriving_late(self) -> None:
        """us-1's first kill arrives 20 s behind the global clock (eu-1 ran ahead): global refuses
        it as out of order, but server:us-1, a plain replay of us-1's own kills, rates it; and so
        does an event scope on us-1 (a plain replay of the window's kills)."""
        kills: list[Kill] = [
            ("a", "b", T0, "eu-1"),
            ("c", "d", T0 + 100.0, "eu-1"),
            ("e", "f", T0 + 80.0, "us-1"),  # 20 s late for global, first kill of us-1
            ("g", "e", T0 + 101.0, "us-1"),
            ("f", "g", T0 + 99.0, "us-1"),  # 2 s late: applied at the clock everywhere
        ]
        cup = EventWindow("cup", T0 + 50.0, T0 + 200.0, frozenset({"us-1"}))
        scopes = ScopeSet(PARAMS, ScopeConfig(kinds=("global", "server", "event"), events=(cup,)))
        outcomes = [scopes.feed(*k) for k in kills]
        assert outcomes[2] is Outcome.OUT_OF_ORDER
        us = [k for k in kills if k[3] == "us-1"]
        assert plain(us).names == ["e", "f", "g"]
        assert scopes.engines["server:us-1"].export_state() == plain(us).export_state()
        event_params = replace(PARAMS, decay=False, idle_after=0.0)
        assert scopes.engines["event:cup"].export_state() == plain(us, event_params).export_state()
        assert scopes.global_engine.export_state() == plain(kills).export_state()

    def test_global_only_config_is_the_plain_engine(self) -> None:
        kills = multi_stream(1500, seed=2)
        scopes = fed(ScopeConfig(), kills)
        assert scopes.keys() == ["global"]
        assert scopes.global_engine.export_state() == plain(kills).export_state()

    def test_feed_returns_the_global_outcome(self) -> None:
        kills = multi_stream(800, seed=3, late=0.2)
        scopes = ScopeSet(PARAMS, ScopeConfig(kinds=("global", "server")))
        ref = Engine(PARAMS)
        outcomes = set()
        for a, b, t, s in kills:
            got = scopes.feed(a, b, t, s)
            assert got is ref.feed(a, b, t)
            outcomes.add(got)
        assert Outcome.OUT_OF_ORDER in outcomes

    def test_kills_without_a_server_go_to_global_only(self) -> None:
        kills = multi_stream(400, seed=4, servers=("eu-1",))
        kills = [(a, b, t, None if k % 3 == 0 else s) for k, (a, b, t, s) in enumerate(kills)]
        scopes = fed(ScopeConfig(kinds=("global", "server")), kills)
        assert scopes.keys() == ["global", "server:eu-1"]
        assert (
            scopes.engines["server:eu-1"].export_state() == plain([k for k in kills if k[3]]).export_state()
        )

    def test_max_servers_refuses_extra_scopes(self) -> None:
        servers = ("a", "b", "c", "d")
        kills = multi_stream(1200, seed=5, servers=servers, late=0.0)
        scopes = fed(ScopeConfig(kinds=("global", "server"), max_servers=2), kills)
        first_two: list[str] = []
        for _, _, _, s in kills:
            if s is not None and s not in first_two:
                first_two.append(s)
            if len(first_two) == 2:
                break
        assert sorted(k for k in scopes.engines if k.startswith("server:")) == sorted(
            f"server:{s}" for s in first_two
        )
        # Every kill that would have opened a third or fourth scope is counted as refused.
        extra = [k for k in kills if k[3] not in first_two]
        assert scopes.refused["server"] == len(extra) > 0
        assert scopes.kind_counts()["server"] == 2
        # The refused servers' kills still count on the global ladder, and the admitted ones are
        # plain replays of their own kills.
        assert scopes.global_engine.export_state() == plain(kills).export_state()
        for s in first_two:
            assert (
                scopes.engines[f"server:{s}"].export_state()
                == plain([k for k in kills if k[3] == s]).export_state()
            )
        with pytest.raises(KeyError, match="no scope"):
            scopes.resolve(f"server:{next(s for s in servers if s not in first_two)}")

    def test_resolve(self) -> None:
        scopes = fed(ScopeConfig(kinds=("global", "server")), multi_stream(50, seed=6, servers=("eu-1",)))
        assert scopes.resolve("global") == "global"
        assert scopes.resolve("server:eu-1") == "server:eu-1"
        with pytest.raises(KeyError, match="no scope"):
            scopes.resolve("server:nowhere")
        with pytest.raises(KeyError, match="not enabled"):
            scopes.resolve("event:cup")
        with pytest.raises(KeyError, match="no season"):
            scopes.resolve("season")
        with pytest.raises(ValueError, match="unknown scope kind"):
            scopes.resolve("bogus:1")


# ---------------------------------------------------------------------------- event windows
class TestEventScopes:
    CUP = EventWindow("cup", start=T0 + 2 * HOUR, end=T0 + 5 * HOUR, servers=frozenset({"eu-1", "eu-2"}))
    OPEN = EventWindow("open", start=T0 + 4 * HOUR, end=T0 + 9 * HOUR)

    def config(self) -> ScopeConfig:
        return ScopeConfig(kinds=("global", "event"), events=(self.CUP, self.OPEN))

    def test_event_gets_only_its_window_and_servers(self) -> None:
        kills = multi_stream(2000, seed=7)  # about 7.3 hours
        assert kills[-1][2] > self.CUP.end
        scopes = fed(self.config(), kills)
        event_params = replace(PARAMS, decay=False, idle_after=0.0)
        for ev in (self.CUP, self.OPEN):
            eng = scopes.engines[f"event:{ev.name}"]
            assert eng.params.decay is False
            assert eng.params.idle_after == 0.0
            mine = [k for k in kills if ev.start <= k[2] < ev.end and (not ev.servers or k[3] in ev.servers)]
            assert 0 < len(mine) < len(kills)
            assert eng.export_state() == plain(mine, event_params).export_state(), ev.name
        assert "event:cup" in scopes.closed
        assert "event:open" not in scopes.closed  # its window is still open at the end
        assert scopes.global_engine.export_state() == plain(kills).export_state()

    def test_event_closes_at_the_first_kill_after_its_end(self) -> None:
        kills = multi_stream(2000, seed=8, late=0.0)
        scopes = ScopeSet(PARAMS, self.config())
        closed_at = None
        for k, (a, b, t, s) in enumerate(kills):
            scopes.feed(a, b, t, s)
            if closed_at is None and "event:cup" in scopes.closed:
                closed_at = k
        assert closed_at is not None
        assert kills[closed_at][2] >= self.CUP.end
        assert all(t < self.CUP.end for _, _, t, _ in kills[:closed_at])
        # A late kill inside the window after it closed changes nothing there.
        eng = scopes.engines["event:cup"]
        before = eng.export_state()
        scopes.feed("p1", "p2", self.CUP.end - 1.0, "eu-1")
        assert eng.export_state() == before
        with pytest.raises(KeyError):
            scopes.resolve("event:later")

    def test_event_never_decays(self) -> None:
        """Inside a 30-day window a player's rating right before its next event is the stored one,
        however long the gap; the same stream on the global ladder does decay."""
        long = EventWindow("league", start=T0, end=T0 + 30 * DAY)
        # The paper's decay (no grace period), so that the global ladder decays at every gap.
        paper = ADRParams.paper(p_min=8, n_min=5, recalibrate_interval=600.0)
        scopes = ScopeSet(paper, ScopeConfig(kinds=("global", "event"), events=(long,)))
        rng = random.Random(9)
        t = T0
        decayed = checked = 0
        for _ in range(300):
            a, b = rng.sample([f"p{i}" for i in range(6)], 2)
            t += rng.choice([61.0, 62.0, 2 * HOUR, 3 * DAY])
            if t >= long.end:
                break
            ev = scopes.engines.get("event:league")
            g = scopes.global_engine
            pre_ev = ev.view(ev.ids[a]).mu if ev is not None and a in ev.ids else None
            pre_g = g.view(g.ids[a]).mu if a in g.ids else None
            # Recalibrations would shift the visible scale: only look at events without one.
            no_recal = not (ev is not None and ev.recalibration_due_before(a, b, t))
            no_recal_g = not g.recalibration_due_before(a, b, t)
            scopes.feed(a, b, t, "eu-1")
            ev = scopes.engines["event:league"]
            if pre_ev is not None and no_recal and ev.clock == t:
                assert ev.view(ev.ids[a]).mu - ev.last_delta_attacker == pytest.approx(pre_ev, abs=1e-9)
                checked += 1
            if pre_g is not None and no_recal_g and g.clock == t:
                got = g.view(g.ids[a]).mu - g.last_delta_attacker
                decayed += got != pytest.approx(pre_g, abs=1e-9)
        assert checked > 20
        assert decayed > 3


# ---------------------------------------------------------------------------- seasons
def season_shadow(kills: list[Kill], season_at: list[tuple[str, float]], reset: Reset) -> dict[str, Engine]:
    """Plain engines for global and each season, rolled over at the first kill at/after a start
    that the global ladder would accept: the new season is a copy of the previous one (the
    first: of global) just before that kill, with the reset applied."""
    g = Engine(PARAMS)
    out: dict[str, Engine] = {"global": g}
    current: Engine | None = None
    started = -math.inf
    for a, b, t, _ in kills:
        valid = a != b and math.isfinite(t) and t >= g.clock - PARAMS.late_tolerance
        if valid:
            due = [(name, start) for name, start in season_at if started < start <= t]
            if due:
                name, start = due[-1]
                base = g if current is None else current
                current = Engine.from_state(base.export_state())
                current.season_reset(reset.alpha, reset.lam)
                out[f"season:{name}"] = current
                started = start
        g.feed(a, b, t)
        if current is not None:
            current.feed(a, b, t)
    return out


class TestSeasons:
    def test_explicit_starts(self) -> None:
        starts = [("s1", T0 + 2 * HOUR), ("s2", T0 + 5 * HOUR)]
        reset = RESET_PRESETS["soft"]
        config = ScopeConfig(
            kinds=("global", "season"),
            seasons=tuple(SeasonStart(n, t) for n, t in starts),
            season_reset=reset,
        )
        kills = multi_stream(2000, seed=10)
        scopes = ScopeSet(PARAMS, config)
        seen: list[tuple[str | None, set[str]]] = []
        for a, b, t, s in kills:
            scopes.feed(a, b, t, s)
            if not seen or seen[-1][0] != scopes.season:
                seen.append((scopes.season, set(scopes.closed)))
                if scopes.season is not None:
                    assert scopes.season_start == dict(starts)[scopes.season]
                    assert t >= scopes.season_start
        assert seen == [(None, set()), ("s1", set()), ("s2", {"season:s1"})]
        shadow = season_shadow(kills, starts, reset)
        assert sorted(scopes.keys()) == sorted(shadow)
        for key, eng in shadow.items():
            assert scopes.engines[key].export_state() == eng.export_state(), key
        assert scopes.resolve("season") == "season:s2"
        assert scopes.resolve("season:s1") == "season:s1"

    def test_a_kill_exactly_at_the_start_opens_the_season(self) -> None:
        start = T0 + HOUR
        config = ScopeConfig(kinds=("global", "season"), seasons=(SeasonStart("s1", start),))
        scopes = ScopeSet(PARAMS, config)
        scopes.feed("a", "b", start - 0.001, "eu-1")
        assert scopes.season is None
        scopes.feed("b", "c", start, "eu-1")
        assert scopes.season == "s1"
        assert scopes.engines["season:s1"].names == ["a", "b", "c"]
        # Calendar seasons too: the first kill of 2026 at exactly midnight UTC opens "2026".
        new_year = utc(2026, 1, 1)
        config = ScopeConfig(kinds=("global", "season"), season_calendar="yearly")
        scopes = ScopeSet(PARAMS, config)
        scopes.feed("a", "b", new_year - 1.0, "eu-1")
        assert scopes.season == "2025"
        scopes.feed("b", "c", new_year, "eu-1")
        assert scopes.season == "2026"
        assert scopes.closed == {"season:2025"}

    def test_rollover_state_by_hand(self) -> None:
        """Right after the first kill of a season: its engine is global's state just before that
        kill, reset with the configured preset (checked on the visible ratings, by formula)."""
        start = T0 + 2 * HOUR
        reset = RESET_PRESETS["hard"]
        config = ScopeConfig(
            kinds=("global", "season"), seasons=(SeasonStart("s1", start),), season_reset=reset
        )
        kills = multi_stream(2000, seed=11, late=0.0)
        first = next(k for k, kill in enumerate(kills) if kill[2] >= start)
        scopes = fed(config, kills[:first])
        assert scopes.season is None
        g = scopes.global_engine
        views = {g.names[i]: g.view(i) for i in range(len(g))}
        bounds = [math.inf, *g.tier_info().boundaries, -math.inf]
        assert g.calibrations > 0 and any(v.tier for v in views.values())
        # Peek at the season engine before it rates the first kill of the season.
        snapshot: dict[str, PlayerView] = {}
        original = Engine.season_reset

        def spy(self: Engine, alpha: float, lam: float) -> None:
            original(self, alpha, lam)
            snapshot.update({self.names[i]: self.view(i) for i in range(len(self))})

        try:
            Engine.season_reset = spy  # type: ignore[method-assign]
            scopes.feed(*kills[first])
        finally:
            Engine.season_reset = original  # type: ignore[method-assign]
        assert scopes.season == "s1"
        for name, v in views.items():
            k = TIER_NAMES.index(v.tier) + 1 if v.tier else next(j for j in range(1, 16) if bounds[j] <= v.mu)
            if k == 1:
                centre = bounds[1] + (bounds[1] - bounds[2]) / 2
            elif k == 15:
                centre = bounds[14] - (bounds[13] - bounds[14]) / 2
            else:
                centre = (bounds[k] + bounds[k - 1]) / 2
            got = snapshot[name]
            assert got.mu == pytest.approx((1 - reset.lam) * v.mu + reset.lam * centre, rel=1e-12)
            assert got.sigma == pytest.approx(min(PARAMS.sigma_max, reset.alpha * v.sigma), rel=1e-12)
            assert got.tier is None

    @pytest.mark.parametrize("calendar", ["monthly", "quarterly"])
    def test_calendar(self, calendar: str) -> None:
        reset = RESET_PRESETS["softer"]
        config = ScopeConfig(kinds=("global", "season"), season_calendar=calendar, season_reset=reset)
        # ~2025-11-24 to ~2026-01-15: kills every 1-3 hours.
        kills = multi_stream(600, seed=12, step=(HOUR, 3 * HOUR), players=12, late=0.0)
        assert kills[-1][2] > utc(2026, 1, 10)
        scopes = fed(config, kills)
        if calendar == "monthly":
            starts = [
                ("2025-11", utc(2025, 11, 1)),
                ("2025-12", utc(2025, 12, 1)),
                ("2026-01", utc(2026, 1, 1)),
            ]
        else:
            starts = [("2025-Q4", utc(2025, 10, 1)), ("2026-Q1", utc(2026, 1, 1))]
        shadow = season_shadow(kills, starts, reset)
        assert sorted(scopes.keys()) == sorted(shadow)
        for key, eng in shadow.items():
            assert scopes.engines[key].export_state() == eng.export_state(), key
        assert scopes.season == starts[-1][0]
        assert scopes.season_start == starts[-1][1]
        assert scopes.closed == {f"season:{n}" for n, _ in starts[:-1]}

    def test_admin_started_season_and_duplicate_name(self) -> None:
        scopes = fed(ScopeConfig(kinds=("global", "season")), multi_stream(300, seed=13))
        assert scopes.season is None
        g_state = scopes.global_engine.export_state()
        eng = scopes.start_season("cup-1", scopes.global_engine.clock, Reset(1.0, 0.0))
        assert scopes.resolve("season") == "season:cup-1"
        assert scopes.global_engine.export_state() == g_state  # the copy leaves global alone
        assert eng.export_state()["columns"]["r"] == g_state["columns"]["r"]
        with pytest.raises(ValueError, match="exists already"):
            scopes.start_season("cup-1", scopes.global_engine.clock, Reset(1.0, 0.0))


# ---------------------------------------------------------------------------- exclusions
def full_config() -> ScopeConfig:
    return ScopeConfig(
        kinds=ALL_KINDS,
        seasons=(SeasonStart("s1", T0 + 1 * HOUR), SeasonStart("s2", T0 + 4 * HOUR)),
        season_reset=RESET_PRESETS["soft"],
        events=(EventWindow("cup", T0 + 2 * HOUR, T0 + 6 * HOUR, frozenset({"eu-2"})),),
    )


class TestExclusions:
    @pytest.mark.parametrize(
        "rule",
        [
            Rule(1, player="p3", reason="cheat"),
            Rule(2, server="eu-2", start=T0 + 90 * 60.0, end=T0 + 4.5 * HOUR, reason="broken"),
        ],
    )
    def test_excluded_kills_are_rated_nowhere(self, rule: Rule) -> None:
        kills = multi_stream(2500, seed=14)
        with_rule = ScopeSet(PARAMS, full_config())
        with_rule.exclusions = Exclusions([rule])
        for a, b, t, s in kills:
            with_rule.feed(a, b, t, s)
        kept = [k for k in kills if not rule_matches(rule, k)]
        assert 0 < len(kills) - len(kept) < len(kills) // 2
        without = fed(full_config(), kept)
        assert engines_state(with_rule) == engines_state(without)
        assert with_rule.closed == without.closed
        assert with_rule.season == without.season == "s2"
        assert with_rule.excluded == len(kills) - len(kept)
        if rule.player is not None:
            assert all(rule.player not in eng.ids for eng in with_rule.engines.values())

    def test_exclusions_match(self) -> None:
        ex = Exclusions([Rule(1, player="bad"), Rule(2, server="s", start=10.0, end=20.0)])
        assert ex.excludes("bad", "x", 0.0, None)
        assert ex.excludes("x", "bad", 0.0, "s")
        assert ex.excludes("x", "y", 10.0, "s")
        assert not ex.excludes("x", "y", 20.0, "s")
        assert not ex.excludes("x", "y", 9.99, "s")
        assert not ex.excludes("x", "y", 15.0, "other")
        assert not ex.excludes("x", "y", 15.0, None)
        assert ex.next_id() == 3
        removed = ex.remove(1)
        assert removed is not None and removed.player == "bad"
        assert not ex.excludes("bad", "x", 0.0, None)
        assert ex.remove(1) is None
        again = Exclusions.load(ex.export())
        assert again.rules == ex.rules
        assert Exclusions.load("junk").rules == []


def rule_matches(rule: Rule, kill: Kill) -> bool:
    a, b, t, s = kill
    if rule.player is not None:
        return rule.player in (a, b)
    return s == rule.server and rule.start <= t < rule.end


# ---------------------------------------------------------------------------- state
class TestState:
    @pytest.mark.parametrize("cut", [1, 700, 1500, 2300])
    def test_round_trip_then_continue(self, cut: int) -> None:
        kills = multi_stream(2500, seed=15)
        config = full_config()
        straight = ScopeSet(PARAMS, config)
        straight.exclusions = Exclusions([Rule(1, player="p7")])
        for a, b, t, s in kills[:cut]:
            straight.feed(a, b, t, s)
        state = straight.export_state()
        restored = ScopeSet.from_state(state, PARAMS, config)
        assert restored.export_state() == state
        for a, b, t, s in kills[cut:]:
            assert straight.feed(a, b, t, s) is restored.feed(a, b, t, s)
        assert restored.export_state() == straight.export_state()
        assert restored.engines["event:cup"].params.decay is False

    def test_refused_and_closed_survive_a_round_trip(self) -> None:
        kills = multi_stream(1500, seed=16, servers=("a", "b", "c"))
        config = replace(full_config(), max_servers=1)
        scopes = fed(config, kills[:1000])
        assert scopes.refused["server"] > 0
        restored = ScopeSet.from_state(scopes.export_state(), PARAMS, config)
        assert restored.refused == scopes.refused
        assert restored.closed == scopes.closed
        for a, b, t, s in kills[1000:]:
            scopes.feed(a, b, t, s)
            restored.feed(a, b, t, s)
        assert restored.kind_counts()["server"] == 1
        assert restored.export_state() == scopes.export_state()

    def test_state_without_global_is_refused(self) -> None:
        state = ScopeSet(PARAMS).export_state()
        del state["engines"]["global"]
        with pytest.raises(ValueError, match="no global"):
            ScopeSet.from_state(state, PARAMS, ScopeConfig())
        with pytest.raises(ValueError, match="version"):
            ScopeSet.from_state({"version": 99}, PARAMS, ScopeConfig())


@settings(max_examples=300, deadline=None)
@given(
    calendar=st.sampled_from(("monthly", "quarterly", "yearly")),
    t=st.floats(min_value=0.0, max_value=4_000_000_000.0),
)
def test_calendar_next_is_where_the_next_season_starts(calendar: str, t: float) -> None:
    name, start = calendar_season(calendar, t)
    nxt = calendar_next(calendar, t)
    assert start <= t < nxt
    assert calendar_season(calendar, nxt)[1] == nxt
    assert calendar_season(calendar, nxt)[0] != name
    assert calendar_season(calendar, nxt - 1.0)[0] == name
