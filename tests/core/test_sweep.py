"""The inactivity sweep (ADRParams.idle_after) and the decay switch (ADRParams.decay).

Expectations are computed here from the §5 formulas, with the sweep time ``now`` and the time
``last`` decay was applied up to:

    r'     = mean + (r - mean) * exp(-(now - last) / tau)       (mean: the active mean, else all)
    sigma' = min(sigma_max, sigma + drift * (now - last))
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine, Outcome
from arenad.core.params import TIER_COUNT, TIER_NAMES, ADRParams

DAY = 86400.0
T0 = 1_764_000_000.0


def play(eng: Engine, names: list[str], t: float, events: int, rng: random.Random) -> float:
    """Kills among ``names`` a few seconds apart from ``t``; returns the last time."""
    for _ in range(events):
        a, b = rng.sample(names, 2)
        t += rng.uniform(1.0, 30.0)
        eng.feed(a, b, t)
    return t


def check_invariants(eng: Engine) -> None:
    p = eng.params
    views = [eng.view(i) for i in range(len(eng))]
    mus = np.array([v.mu for v in views])
    sig = np.array([v.sigma for v in views])
    act = np.array([v.active for v in views], dtype=bool)
    assert not np.isnan(mus).any() and not np.isnan(sig).any()
    assert (mus >= p.mu_min - 1e-9).all() and (mus <= p.mu_max + 1e-9).all()
    assert (sig >= p.sigma_min).all() and (sig <= p.sigma_max).all()
    assert eng.ladder_is_consistent()
    assert int(act.sum()) == eng.active_count
    mean = float(np.mean(mus[act])) if act.any() else float(np.mean(mus))
    assert eng.active_mean() == pytest.approx(mean, rel=1e-6)
    assert eng.mean_sigma == pytest.approx(float(np.mean(sig)), rel=1e-6)
    counts = [0] * TIER_COUNT
    for v in views:
        if v.tier is not None:
            counts[TIER_NAMES.index(v.tier)] += 1
    assert list(eng.tier_info().counts) == counts


class TestOffByDefault:
    def test_default_params_do_not_sweep(self) -> None:
        assert ADRParams.paper().idle_after == 0.0
        assert ADRParams.paper().decay is True

    def test_no_sweep_leaves_ratings_alone(self) -> None:
        """Without idle_after a recalibration long after everyone's last event moves no rating
        (anchor off, so the recalibration itself has nothing to shift)."""
        eng = Engine(ADRParams.paper(anchor=False))
        rng = random.Random(1)
        t = play(eng, [f"p{i}" for i in range(12)], T0, 400, rng)
        before = eng.export_state()
        eng.recalibrate(t + 90 * DAY)
        after = eng.export_state()
        assert after["columns"] == before["columns"]
        assert eng.sweeps == 0

    def test_the_same_with_idle_after_does_sweep(self) -> None:
        """The counterpart of the test above, so that one can fail: a sweep would move them."""
        eng = Engine(ADRParams.paper(anchor=False, idle_after=10.0))
        rng = random.Random(1)
        t = play(eng, [f"p{i}" for i in range(12)], T0, 400, rng)
        before = eng.export_state()
        sweeps = eng.sweeps
        eng.recalibrate(t + 90 * DAY)
        assert eng.export_state()["columns"]["r"] != before["columns"]["r"]
        assert eng.sweeps == sweeps + 1

    def test_sweep_interval_alone_changes_nothing(self) -> None:
        rng = random.Random(2)
        stream: list[tuple[str, str, float]] = []
        t = T0
        for _ in range(1500):
            i, j = rng.sample(range(15), 2)
            t += rng.choice([5.0, 30.0, 600.0, 3 * DAY])
            stream.append((f"p{i}", f"p{j}", t))
        plain = Engine(ADRParams.paper())
        other = Engine(ADRParams.paper(sweep_interval=60.0))
        for a, b, ts in stream:
            assert plain.feed(a, b, ts) is other.feed(a, b, ts)
        s1 = plain.export_state()
        s2 = other.export_state()
        del s1["params"], s2["params"]
        assert s1 == s2
        assert other.sweeps == 0


class TestClosedForm:
    # Sweeps are due every 10 days, so no sweep happens while the scenario is played (the first
    # recalibration sweeps nobody); the test then forces one at `now`.
    PARAMS = ADRParams.paper(idle_after=2.0, sweep_interval=10 * DAY, tau=20.0, sigma_drift=7.0)

    def scenario(self) -> tuple[Engine, float, dict[str, list[float]]]:
        """Twelve players play on day 0; p0..p4 stop; p5..p11 play on day 1; p5..p8 on day 4;
        p9..p11 on day 9.4. At a sweep at day 9.5, p0..p8 are idle (p5..p8 still active, as their
        events lie within t_active = 7 days) and p9..p11 are not."""
        eng = Engine(self.PARAMS)
        rng = random.Random(7)
        times: dict[str, list[float]] = {}
        names = [f"p{i}" for i in range(12)]

        def run(group: list[str], start: float, events: int) -> None:
            t = start
            for _ in range(events):
                a, b = rng.sample(group, 2)
                t += rng.uniform(1.0, 60.0)
                if eng.feed(a, b, t) is Outcome.APPLIED:
                    times.setdefault(a, []).append(t)
                    times.setdefault(b, []).append(t)

        run(names, T0, 600)
        run(names[5:], T0 + 1 * DAY, 300)
        run(names[5:9], T0 + 4 * DAY, 200)
        run(names[9:], T0 + 9.4 * DAY, 30)
        assert eng.sweeps == 1
        return eng, T0 + 9.5 * DAY, times

    def test_swept_ratings_follow_the_decay_formula(self) -> None:
        eng, now, times = self.scenario()
        p = eng.params
        # Start from a state where every sweep so far has happened: force the next one at `now`.
        eng.next_sweep = now
        size = len(eng)
        r = [eng.mu(i) - eng.offset for i in range(size)]
        sigma = [eng.view(i).sigma for i in range(size)]
        last = list(eng._last)
        # Who is active at `now` (§2.3): the n_active-th latest event within t_active days.
        active = [
            len(times[eng.names[i]]) >= p.n_active
            and times[eng.names[i]][-p.n_active] + p.t_active * DAY > now
            for i in range(size)
        ]
        assert 0 < sum(active) < size
        pool = [r[i] for i in range(size) if active[i]]
        mean = math.fsum(pool) / len(pool)
        idle = [i for i in range(size) if now - last[i] > p.idle_after * DAY]
        assert {eng.names[i] for i in idle} == {f"p{i}" for i in range(9)}
        still_active_idle = [i for i in idle if active[i]]
        assert still_active_idle  # p5..p8 idle 6.5 days but active for 7
        offset = eng.offset
        eng.begin_recalibration(now)
        assert eng.offset == offset  # the sweep runs before the anchor shift (finish step)
        for i in range(size):
            v = eng.view(i)
            if i in idle:
                dt = now - last[i]
                exp_r = mean + (r[i] - mean) * math.exp(-dt / (p.tau * DAY))
                exp_s = min(p.sigma_max, sigma[i] + p.sigma_drift * dt / DAY)
                assert v.mu - offset == pytest.approx(exp_r, rel=1e-9), v.player
                assert v.sigma == pytest.approx(exp_s, rel=1e-12), v.player
                assert eng._last[i] == now
            else:
                assert v.mu - offset == r[i], v.player
                assert v.sigma == sigma[i]
                assert eng._last[i] == last[i]
            # The view reports the real last event, not the sweep.
            assert v.last_t == times[v.player][-1]
        assert eng.next_sweep == now + p.sweep_interval
        check_invariants(eng)

    def test_idle_means_more_than_idle_after_days(self) -> None:
        eng = Engine(ADRParams.paper(idle_after=2.0, anchor=False))
        now = T0 + 10 * DAY
        lasts = {"under": now - 2 * DAY + 1.0, "exact": now - 2 * DAY, "over": now - 2 * DAY - 1.0}
        for name, last in lasts.items():
            eng.seed_player(name, mu=1500.0, sigma=100.0, n=2, last_t=last)
        eng.seed_player("anchor", mu=500.0, sigma=100.0, n=2, last_t=now)
        eng.recalibrate(now)
        assert eng._last[eng.ids["under"]] == lasts["under"]
        assert eng._last[eng.ids["exact"]] == lasts["exact"]
        assert eng._last[eng.ids["over"]] == now
        assert eng.view(eng.ids["under"]).mu == eng.view(eng.ids["exact"]).mu == 1500.0
        # mean (1500 * 3 + 500) / 4 = 1250; dt = 2 days + 1 s, tau = 30 days.
        shrink = math.exp(-(2 * DAY + 1.0) / (30 * DAY))
        assert eng.view(eng.ids["over"]).mu == pytest.approx(1250.0 + 250.0 * shrink, rel=1e-12)

    def test_sweep_does_not_repeat_before_the_interval(self) -> None:
        eng, now, _ = self.scenario()
        eng.next_sweep = now
        eng.begin_recalibration(now)
        count = eng.sweeps
        cols = eng.export_state()["columns"]
        eng.begin_recalibration(now + eng.params.sweep_interval - 1.0)
        assert eng.sweeps == count
        assert eng.export_state()["columns"] == cols
        eng.begin_recalibration(now + eng.params.sweep_interval)
        assert eng.sweeps == count + 1

    def test_all_idle_decay_keeps_the_mean(self) -> None:
        """Nobody active, everyone idle for the same time: decay toward the all-player mean keeps
        that mean (a linear map fixing it), while the spread shrinks by exactly exp(-dt / tau)."""
        p = self.PARAMS
        eng = Engine(replace(p, anchor=False))
        mus = [700.0, 900.0, 1000.0, 1300.0, 1600.0]
        for k, mu in enumerate(mus):
            eng.seed_player(f"s{k}", mu=mu, sigma=100.0, n=2, last_t=T0)
        assert eng.active_count == 0
        dt = 10 * DAY
        eng.recalibrate(T0 + dt)
        mean = sum(mus) / len(mus)
        shrink = math.exp(-dt / (p.tau * DAY))
        # By hand: mean = 1100; tau = 20 days, dt = 10 days -> shrink = e^-0.5 = 0.60653066.
        assert mean == 1100.0
        assert shrink == pytest.approx(0.60653066, abs=1e-8)
        # 700 -> 1100 - 400 * 0.60653066 = 857.3877; 900 -> 978.6939; 1000 -> 1039.3469;
        # 1300 -> 1221.3061; 1600 -> 1403.2653.
        expected = [857.3877, 978.6939, 1039.3469, 1221.3061, 1403.2653]
        got = [eng.view(eng.ids[f"s{k}"]).mu for k in range(len(mus))]
        assert got == pytest.approx(expected, abs=1e-3)
        assert eng.active_mean() == pytest.approx(1100.0, abs=1e-9)
        # sigma: 100 + 7/day * 10 days = 170.
        assert all(eng.view(i).sigma == pytest.approx(170.0) for i in range(len(mus)))

    def test_lazy_decay_after_a_sweep_starts_from_the_sweep(self) -> None:
        """After a sweep the next event decays only the time since the sweep: a player's rating
        right before the event is the swept one decayed over (t - sweep)."""
        p = replace(self.PARAMS, anchor=False)
        eng = Engine(p)
        eng.seed_player("ghost", mu=1500.0, sigma=100.0, n=3, last_t=T0)
        eng.seed_player("a", mu=1000.0, sigma=100.0, n=3, last_t=T0)
        eng.seed_player("b", mu=800.0, sigma=100.0, n=3, last_t=T0)
        sweep_t = T0 + 5 * DAY
        eng.recalibrate(sweep_t)
        assert eng._last[eng.ids["ghost"]] == sweep_t
        r_swept = eng.view(eng.ids["ghost"]).mu
        mean = (r_swept + eng.view(eng.ids["a"]).mu + eng.view(eng.ids["b"]).mu) / 3.0
        t = sweep_t + 1 * DAY
        eng.apply("ghost", "newbie", t)
        # The mean at the event includes the newcomer at mu0 = 1000 (all players, none active).
        mean = (3 * mean + p.mu0) / 4.0
        pre = mean + (r_swept - mean) * math.exp(-1.0 / p.tau)
        assert eng.view(eng.ids["ghost"]).mu - eng.last_delta_attacker == pytest.approx(pre, rel=1e-12)


class TestReturning:
    """A sweep moves ``_last`` but not the real last event: §8 "returning" is unchanged by it."""

    P = ADRParams.paper(idle_after=5.0, sweep_interval=DAY / 2, t_return=60.0)

    def stream(self, gap_days: float) -> list[tuple[str, str, float]]:
        rng = random.Random(11)
        out = []
        t = T0
        names = [f"p{i}" for i in range(10)]
        for _ in range(300):  # everyone, ghost included
            a, b = rng.sample([*names, "ghost"], 2)
            t += rng.uniform(1.0, 30.0)
            out.append((a, b, t))
        ghost_last = max(ts for a, b, ts in out if "ghost" in (a, b))
        end = ghost_last + gap_days * DAY
        while t < end - 2 * 3600:  # the others keep playing, so recalibrations and sweeps happen
            a, b = rng.sample(names, 2)
            t += rng.uniform(600.0, 4 * 3600.0)
            out.append((a, b, t))
        out.append(("ghost", "p0", end))
        for _ in range(40):
            a, b = rng.sample([*names, "ghost"], 2)
            t = max(t, end) + rng.uniform(1.0, 30.0)
            out.append((a, b, t))
        return out

    @pytest.mark.parametrize(("gap_days", "returning"), [(70.0, True), (30.0, False), (59.0, False)])
    def test_sweep_keeps_the_returning_rule(self, gap_days: float, returning: bool) -> None:
        stream = self.stream(gap_days)
        swept = Engine(self.P)
        lazy = Engine(replace(self.P, idle_after=0.0))
        ghost_return = next(
            k for k, (a, b, ts) in enumerate(stream) if a == "ghost" and b == "p0" and ts > stream[300][2]
        )
        ghost_last = -math.inf
        for k, (a, b, ts) in enumerate(stream):
            o1 = swept.feed(a, b, ts)
            o2 = lazy.feed(a, b, ts)
            assert o1 is o2
            if k < ghost_return and o1 is Outcome.APPLIED and "ghost" in (a, b):
                ghost_last = ts
            if k == ghost_return - 1:
                g = swept.ids["ghost"]
                assert swept._last[g] > ghost_last  # the sweep moved decay on...
                assert swept.view(g).last_t == ghost_last  # ...but not the last event
                assert lazy.view(lazy.ids["ghost"]).last_t == ghost_last
            if k == ghost_return:
                assert o1 is Outcome.APPLIED
                vs = swept.view(swept.ids["ghost"])
                vl = lazy.view(lazy.ids["ghost"])
                left = swept.params.returning_events - 1 if returning else 0
                assert vs.returning_left == vl.returning_left == left
        assert swept.sweeps > 0
        g = swept.ids["ghost"]
        assert swept._ret[g] == lazy._ret[lazy.ids["ghost"]]
        check_invariants(swept)


class TestDecaySwitch:
    def test_no_decay_rating_before_an_event_is_the_stored_one(self) -> None:
        self.run(decay=False)

    def test_with_decay_it_is_not(self) -> None:
        self.run(decay=True)

    def run(self, decay: bool) -> None:
        eng = Engine(ADRParams.paper(decay=decay, idle_after=1.0, sweep_interval=3600.0))
        rng = random.Random(5)
        names = [f"p{i}" for i in range(8)]
        t = T0
        differ = 0
        for _ in range(600):
            a, b = rng.sample(names, 2)
            t += rng.choice([2.0, 40.0, 3600.0, 5 * DAY, 20 * DAY])
            if eng.recalibration_due_before(a, b, t):
                eng.recalibrate(t)
            pre_a = eng.view(eng.ids[a]).mu if a in eng.ids else None
            pre_b = eng.view(eng.ids[b]).mu if b in eng.ids else None
            if eng.apply(a, b, t) is not Outcome.APPLIED or pre_a is None or pre_b is None:
                continue
            got_a = eng.view(eng.ids[a]).mu - eng.last_delta_attacker
            got_b = eng.view(eng.ids[b]).mu - eng.last_delta_victim
            same = got_a == pytest.approx(pre_a, abs=1e-9) and got_b == pytest.approx(pre_b, abs=1e-9)
            if decay:
                differ += not same
            else:
                assert same, (a, b, t)
        if decay:
            assert differ > 100
        else:
            assert eng.next_sweep > T0  # sweeps were due (and did nothing: decay is off)
        check_invariants(eng)

    def test_sweep_without_decay_changes_nothing(self) -> None:
        eng = Engine(ADRParams.paper(decay=False, idle_after=1.0, anchor=False))
        rng = random.Random(6)
        t = play(eng, [f"p{i}" for i in range(10)], T0, 300, rng)
        before = eng.export_state()["columns"]
        assert eng.sweep(t + 50 * DAY) == 0
        assert eng.export_state()["columns"] == before


class TestLadder:
    def test_ghost_leaves_the_top(self) -> None:
        """A top player who stops playing sinks toward the mean at the sweep, without an event."""
        eng = Engine(ADRParams.paper(idle_after=3.0, sweep_interval=DAY, tau=10.0))
        eng.seed_player("ghost", mu=2500.0, sigma=60.0, n=40, last_t=T0)
        rng = random.Random(8)
        names = [f"p{i}" for i in range(12)]
        for name in names:
            eng.seed_player(name, mu=1000.0, sigma=100.0, n=40, last_t=T0)
        t = play(eng, names, T0, 200, rng)
        assert eng.rank(eng.ids["ghost"]) == 1
        t = T0
        for _ in range(60):  # two months of play without the ghost
            t = play(eng, names, t + DAY, 10, rng)
        ghost = eng.view(eng.ids["ghost"])
        assert ghost.rank > 1
        assert ghost.mu < 1500.0
        assert ghost.last_t == T0
        assert ghost.n == 40
        check_invariants(eng)

    def test_sweep_moves_tiers_through_the_accumulators(self) -> None:
        """A placed ghost swept far out of its band drops one tier per sweep with h_req = 0."""
        p = ADRParams.paper(idle_after=1.0, sweep_interval=DAY, tau=5.0, h_req=0.0, n_min=3, p_min=5)
        eng = Engine(p)
        rng = random.Random(9)
        names = [f"p{i}" for i in range(10)]
        eng.seed_player("ghost", mu=2400.0, sigma=50.0, n=40, last_t=T0)
        eng.apply("ghost", "p0", T0 + 1.0)  # places the ghost (n >= n_min, sigma small)
        tier0 = eng.view(eng.ids["ghost"]).tier
        assert tier0 is not None
        t = play(eng, names, T0 + 2.0, 300, rng)
        before = eng.tier_changes
        for day in range(1, 6):
            t = play(eng, names, max(t, T0 + day * 2 * DAY), 20, rng)
        tier = eng.view(eng.ids["ghost"]).tier
        assert tier is not None
        assert TIER_NAMES.index(tier) > TIER_NAMES.index(tier0)
        assert eng.tier_changes > before
        check_invariants(eng)


# ---------------------------------------------------------------------------- properties
GAPS = st.sampled_from([0.5, 3.0, 20.0, 90.0, 3600.0, 0.6 * DAY, 2 * DAY, 9 * DAY, 70 * DAY])
KILLS = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), GAPS), min_size=60, max_size=400)
SWEEPY = ADRParams.paper(
    idle_after=0.5, sweep_interval=3 * 3600.0, recalibrate_interval=600.0, p_min=4, n_min=4, n_active=3
)


def stream_of(kills: list[tuple[int, int, float]]) -> list[tuple[str, str, float]]:
    t = T0
    out = []
    for a, b, gap in kills:
        t += gap
        out.append((f"p{a}", f"p{b}", t))
    return out


class TestProperties:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(kills=KILLS)
    def test_sweeps_keep_the_engine_consistent(self, kills: list[tuple[int, int, float]]) -> None:
        eng = Engine(SWEEPY)
        stream = stream_of(kills)
        for k, (a, b, t) in enumerate(stream):
            eng.feed(a, b, t)
            if k % 25 == 0 and len(eng):
                check_invariants(eng)
        if len(eng):
            # Force one more sweep well after the end, then check again.
            eng.recalibrate(stream[-1][2] + 30 * DAY)
            check_invariants(eng)
            assert all(eng._last[i] <= eng.clock for i in range(len(eng)))

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(kills=KILLS)
    def test_replay_is_deterministic(self, kills: list[tuple[int, int, float]]) -> None:
        stream = stream_of(kills)
        e1 = Engine(SWEEPY)
        e2 = Engine(SWEEPY)
        for a, b, t in stream:
            assert e1.feed(a, b, t) is e2.feed(a, b, t)
        assert e1.export_state() == e2.export_state()
        assert e1.sweeps == e2.sweeps

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(kills=KILLS, cut=st.integers(0, 400))
    def test_state_round_trip_mid_stream(self, kills: list[tuple[int, int, float]], cut: int) -> None:
        stream = stream_of(kills)
        cut = min(cut, len(stream))
        e1 = Engine(SWEEPY)
        for a, b, t in stream[:cut]:
            e1.feed(a, b, t)
        e2 = Engine.from_state(e1.export_state())
        assert e2.next_sweep == e1.next_sweep and e2.sweeps == e1.sweeps
        for a, b, t in stream[cut:]:
            assert e1.feed(a, b, t) is e2.feed(a, b, t)
        assert e1.export_state() == e2.export_state()

    def test_long_random_stream(self) -> None:
        """The same invariants over one long stream: 40 players, gaps up to 70 days."""
        eng = Engine(replace(SWEEPY, idle_after=2.0, n_active=5, n_min=8, p_min=10))
        rng = random.Random(12)
        t = T0
        gaps = [1.0, 5.0, 30.0, 300.0, 3 * 3600.0, DAY, 4 * DAY, 70 * DAY]
        weights = [30, 30, 20, 10, 5, 3, 1, 0.2]
        for k in range(6000):
            a, b = rng.sample(range(40), 2)
            t += rng.choices(gaps, weights)[0]
            eng.feed(f"p{a}", f"p{b}", t)
            if k % 500 == 0:
                check_invariants(eng)
        check_invariants(eng)
        assert eng.sweeps > 10
        assert eng.calibrations > 0
        assert sum(eng.tier_info().counts) > 0
