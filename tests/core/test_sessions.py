"""Play sessions (arenad/sessions.py): the C tally against the Python one, and what the sessions
of a stream add up to through the one applier."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.records import ControlRecord, JournalRecord, PlacementRecord
from arenad.scopes import ScopeConfig, ScopeSet
from arenad.sessions import Session, Sessions

pytestmark = pytest.mark.skipif(not Sessions(60.0).native, reason="the C extension is not built")

names = st.sampled_from([f"p{k}" for k in range(12)] + ["ghost", "", "x" * 40])
servers = st.sampled_from([None, "eu-1", "eu-2", "us-1", "δ", "srv" * 30])


@st.composite
def records(draw: Any) -> list[JournalRecord | None]:
    out: list[JournalRecord | None] = []
    for k in range(draw(st.integers(0, 120))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            out.append(None)
        elif kind == 1:
            out.append(PlacementRecord(k, 1.0, (("p1",), ("p2",)), "eu-1", None))
        elif kind == 2:
            out.append(ControlRecord(k, 1.0, "hide", {"player": "p1"}))
        else:
            out.append((k, 1.0 + k, draw(names), draw(names), draw(servers), None))
    return out


@settings(max_examples=200, deadline=None)
@given(records(), st.integers(0, 130), st.integers(0, 130), st.integers(0, 130))
def test_the_c_tally_is_the_python_tally(
    recs: list[JournalRecord | None], lo: int, cut: int, hi: int
) -> None:
    ids = {f"p{k}": k for k in range(10)}  # "ghost", p10, p11... are not tracked
    c, py = Sessions(60.0, 2.0), Sessions(60.0, 2.0)
    py.native = False
    for s in (c, py):
        s.code("eu-1")  # one server known beforehand, the others met on the way
        s.tally(recs, lo, min(cut, hi), ids)  # cut in two: the running clock carries over
        s.tally(recs, max(lo, min(cut, hi)), hi, ids)
    assert (c.kills, c.deaths, c.server) == (py.kills, py.deaths, py.server)
    assert c.servers == py.servers and c.codes == py.codes and c.clock == py.clock


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 14), st.integers(0, 14), st.floats(-40, 6)), max_size=300), st.data()
)
def test_the_kills_counted_are_the_kills_the_engine_took(
    steps: list[tuple[int, int, float]], data: Any
) -> None:
    """Late, out-of-order, self- and newcomers' kills, cut into tallies anywhere: each player's
    count is the number of kills the engine took (applied or filtered) as attacker."""
    recs: list[JournalRecord | None] = []
    t = 1.8e9
    for k, (a, v, dt) in enumerate(steps):
        t += max(dt, 0.0)
        recs.append((k + 1, t + min(dt, 0.0), f"p{a}", f"p{v}", "eu-1", None))  # dt < 0: late
    eng = Engine(ADRParams())
    took: Counter[str] = Counter()
    for rec in recs:
        assert isinstance(rec, tuple)
        if eng.apply(rec[2], rec[3], rec[1]).name in ("APPLIED", "FILTERED"):
            took[rec[2]] += 1
    cuts = sorted(data.draw(st.lists(st.integers(0, len(recs)), max_size=4)))
    for native in (True, False):
        scopes = ScopeSet(ADRParams(), ScopeConfig(session_gap=1800.0))
        assert scopes.sessions is not None
        scopes.sessions.native = native
        applier = Applier(scopes, rules="fixed")
        for lo, hi in itertools.pairwise([0, *cuts, len(recs)]):
            applier.apply_chunk(list(recs[lo:hi]))
        counted = {n: scopes.sessions.kills[i] for n, i in scopes.global_engine.ids.items()}
        assert {n: k for n, k in counted.items() if k} == dict(took)


def stream(seed: int, hours: float = 6.0) -> list[JournalRecord]:
    """Players who come and go: each plays a few sessions, on one server per session."""
    rng = random.Random(seed)
    out: list[JournalRecord] = []
    visits = []
    for p in range(30):
        t = rng.uniform(0, 3600)
        while t < hours * 3600:
            length = rng.uniform(300, 2400)
            visits.append((t, t + length, f"p{p}", rng.choice(("eu-1", "eu-2", "us-1"))))
            t += length + rng.uniform(2000, 9000)  # away for longer than the gap
    events = []
    for start, end, player, server in visits:
        t = start
        while t < end:
            events.append((t, player, server))
            t += rng.uniform(5, 40)
    events.sort()
    for t, player, server in events:
        # Someone on the same server at about that time is the other side.
        others = [e for e in visits if e[3] == server and e[0] <= t <= e[1] and e[2] != player]
        if not others:
            continue
        other = rng.choice(others)[2]
        a, v = (player, other) if rng.random() < 0.5 else (other, player)
        out.append((len(out) + 1, 1.8e9 + t, a, v, server, None))
    return out


def run(recs: list[JournalRecord], gap: float = 1800.0) -> ScopeSet:
    scopes = ScopeSet(ADRParams(), ScopeConfig(session_gap=gap))
    Applier(scopes, rules="fixed").apply_all(recs)
    return scopes


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_kill_and_death_lands_in_exactly_one_session(seed: int) -> None:
    recs = stream(seed)
    scopes = run(recs)
    sessions = scopes.sessions
    assert sessions is not None
    eng = scopes.global_engine
    closed = sessions.take_closed()
    current = [s for i in range(len(eng)) if (s := sessions.current(eng, i)) is not None]
    kills: Counter[str] = Counter()
    deaths: Counter[str] = Counter()
    for s in [*closed, *current]:
        kills[s.player] += s.kills
        deaths[s.player] += s.deaths
    want_k = Counter(r[2] for r in recs if isinstance(r, tuple))
    want_d = Counter(r[3] for r in recs if isinstance(r, tuple))
    assert kills == want_k and deaths == want_d
    assert len(closed) > 30  # players came back: more sessions than players


@pytest.mark.parametrize("seed", [1, 2])
def test_sessions_follow_one_another_and_chain_their_ratings(seed: int) -> None:
    scopes = run(stream(seed))
    assert scopes.sessions is not None
    by_player: dict[str, list[Session]] = {}
    for s in scopes.sessions.take_closed():
        by_player.setdefault(s.player, []).append(s)
    interval = ADRParams().recalibrate_interval
    for player, ss in by_player.items():
        assert ss[0].rating_before == ADRParams().mu0, player
        for s in ss:
            assert s.t_start <= s.t_end and s.server in ("eu-1", "eu-2", "us-1")
            assert (s.kills + s.deaths > 0 and 1 <= s.tier_after <= 15) or s.tier_after == 0
            assert math.isfinite(s.rating_after) and math.isfinite(s.display_after)
        for a, b in itertools.pairwise(ss):
            assert b.rating_before == pytest.approx(a.rating_after, abs=1e-3)  # float32 column
            # One tick of slack: boundaries are resolved to the global ladder's recalibrations.
            assert b.t_start >= a.t_end - interval


def test_a_state_restored_mid_stream_goes_on_as_if_uninterrupted() -> None:
    recs = stream(4)
    whole = run(recs)
    half = len(recs) // 2
    first = run(recs[:half])
    resumed = ScopeSet.from_state(first.export_state(), ADRParams(), first.config)
    Applier(resumed, rules="fixed").apply_all(recs[half:])
    assert whole.sessions is not None and resumed.sessions is not None
    assert whole.sessions.export_state() == resumed.sessions.export_state()


def test_no_sessions_kept_unless_asked() -> None:
    scopes = ScopeSet(ADRParams(), ScopeConfig())
    assert scopes.sessions is None and "sessions" not in scopes.export_state()
    with pytest.raises(ValueError, match="positive"):
        Sessions(0.0)


def test_the_engine_alone_is_not_touched() -> None:
    """Sessions only count: the ladder of a stream is the same with and without them."""
    recs = stream(5, hours=2)
    with_sessions = run(recs).global_engine.export_state()
    without = ScopeSet(ADRParams(), ScopeConfig())
    Applier(without, rules="fixed").apply_all(recs)
    assert without.global_engine.export_state() == with_sessions
    assert isinstance(Engine(), Engine)
