"""Glicko-2 (seed 001 §1): Glickman's worked example, the volatility solver, both variants."""

from __future__ import annotations

import math

import pytest

from arenad.errors import ConfigError
from arenad.models.glicko2 import (
    SCALE,
    Glicko2,
    Glicko2Params,
    Glicko2Period,
    Glicko2Rating,
    expected,
    g,
    pair_expected,
    rate_period,
    volatility,
)

# Glickman, "Example of the Glicko-2 system": a 1500/200/0.06 player beats 1400/30, loses to
# 1550/100 and to 1700/300 in one rating period, τ = 0.5.
PLAYER = Glicko2Rating.from_public(1500.0, 200.0, 0.06)
OPPONENTS = [
    (Glicko2Rating.from_public(1400.0, 30.0, 0.06), 1.0),
    (Glicko2Rating.from_public(1550.0, 100.0, 0.06), 0.0),
    (Glicko2Rating.from_public(1700.0, 300.0, 0.06), 0.0),
]
PRIOR = Glicko2Rating.from_public(1500.0, 350.0, 0.06)


class TestGlickmanExample:
    """The worked example reproduces Glickman's printed values."""

    def test_opponents_on_the_glicko2_scale(self) -> None:
        printed = [(-0.5756, 0.1727), (0.2878, 0.5756), (1.1513, 1.7269)]
        assert [(round(o.mu, 4), round(o.phi, 4)) for o, _ in OPPONENTS] == printed

    def test_g_and_expected_scores(self) -> None:
        assert [round(g(o.phi), 4) for o, _ in OPPONENTS] == [0.9955, 0.9531, 0.7242]
        assert [round(expected(PLAYER.mu, o.mu, o.phi), 3) for o, _ in OPPONENTS] == [0.639, 0.432, 0.303]

    def test_new_rating_to_four_decimals(self) -> None:
        new = rate_period(PLAYER, OPPONENTS, tau=0.5, epsilon=1e-6)
        assert round(new.mu, 4) == -0.2069
        assert round(new.phi, 4) == 0.8722
        # Glickman prints σ' = 0.05999 (truncated; the value is 0.0599960).
        assert new.sigma == pytest.approx(0.05999, abs=1e-5)

    def test_new_rating_on_the_public_scale(self) -> None:
        new = rate_period(PLAYER, OPPONENTS, tau=0.5)
        # Printed r' = 1464.06 and RD' = 151.52 come from the rounded μ' and φ'.
        assert new.r == pytest.approx(1464.06, abs=0.01)
        assert new.rd == pytest.approx(151.52, abs=0.01)

    def test_full_precision_values(self) -> None:
        # The same formulas evaluated without Glickman's intermediate rounding (as other
        # Glicko-2 implementations report them): pins the solver, not just four digits.
        new = rate_period(PLAYER, OPPONENTS, tau=0.5)
        assert new.r == pytest.approx(1464.0506705393013, abs=1e-7)
        assert new.rd == pytest.approx(151.51652412385727, abs=1e-7)
        assert new.sigma == pytest.approx(0.059995984286488495, abs=1e-9)

    def test_scale_constant(self) -> None:
        assert SCALE == 173.7178
        assert Glicko2Rating.from_public(1700.0, 300.0, 0.06).r == pytest.approx(1700.0)


class TestVolatility:
    """The Illinois iteration finds the root of Glickman's f(x) in both bracket cases."""

    @staticmethod
    def f(x: float, phi: float, sigma: float, delta: float, v: float) -> float:
        """Glickman's f(x) with τ = 0.5."""
        a = math.log(sigma * sigma)
        ex = math.exp(x)
        return ex * (delta**2 - phi**2 - v - ex) / (2 * (phi**2 + v + ex) ** 2) - (x - a) / 0.5**2

    @pytest.mark.parametrize(
        ("phi", "sigma", "delta", "v"),
        [
            (1.1513, 0.06, -0.4839, 1.7790),  # Δ² < φ² + v: bracket found by stepping down
            (0.3, 0.06, 3.0, 0.5),  # Δ² > φ² + v: a surprising result raises σ
            (2.0147, 0.06, 0.0, 10.0),
        ],
    )
    def test_root(self, phi: float, sigma: float, delta: float, v: float) -> None:
        s = volatility(phi, sigma, delta, v, tau=0.5, epsilon=1e-10)
        assert abs(self.f(math.log(s * s), phi, sigma, delta, v)) < 1e-8

    def test_surprise_raises_volatility(self) -> None:
        assert volatility(0.3, 0.06, 3.0, 0.5, tau=0.5, epsilon=1e-6) > 0.06
        assert volatility(0.3, 0.06, 0.0, 0.5, tau=0.5, epsilon=1e-6) < 0.06

    def test_no_games_only_grows_phi(self) -> None:
        new = rate_period(PLAYER, [], tau=0.5)
        assert (new.mu, new.sigma) == (PLAYER.mu, PLAYER.sigma)
        assert new.phi == pytest.approx(math.sqrt(PLAYER.phi**2 + 0.06**2))


class TestPairPrediction:
    """A pair's P(a beats b) uses g(√(φ_a² + φ_b²)) and is complementary."""

    def test_value(self) -> None:
        p = pair_expected(0.5, 0.3, -0.2, 0.4)
        assert p == pytest.approx(1 / (1 + math.exp(-g(0.5) * 0.7)))
        assert p + pair_expected(-0.2, 0.4, 0.5, 0.3) == pytest.approx(1.0)

    def test_model_uses_both_deviations(self) -> None:
        m = Glicko2()
        m.update("a", "b", 0.0)
        sa, sb = m.state_of("a"), m.state_of("b")
        want = pair_expected(sa.mu, sa.phi, sb.mu, sb.phi)
        assert m.predict("a", "b", 1.0) == want
        assert m.predict("newcomer", "other", 1.0) == 0.5


class TestPerEvent:
    """``glicko2``: every kill is one rating period for both players."""

    def test_first_kill_equals_one_period_each(self) -> None:
        m = Glicko2()
        m.update("a", "b", 0.0)
        assert m.state_of("a") == rate_period(PRIOR, [(PRIOR, 1.0)], tau=0.5)
        assert m.state_of("b") == rate_period(PRIOR, [(PRIOR, 0.0)], tau=0.5)

    def test_second_kill_uses_pre_kill_values_of_both(self) -> None:
        m = Glicko2()
        m.update("a", "b", 0.0)
        sa, sb = m.state_of("a"), m.state_of("b")
        m.update("b", "a", 1.0)
        assert m.state_of("b") == rate_period(sb, [(sa, 1.0)], tau=0.5)
        assert m.state_of("a") == rate_period(sa, [(sb, 0.0)], tau=0.5)

    def test_display_is_r_minus_three_rd(self) -> None:
        m = Glicko2()
        assert m.display("nobody") == pytest.approx(1500.0 - 3 * 350.0)
        m.update("a", "b", 0.0)
        s = m.state_of("a")
        assert m.display("a") == pytest.approx(s.r - 3 * s.rd)
        assert m.rating("a") == pytest.approx(s.r)

    def test_self_kill_ignored(self) -> None:
        m = Glicko2()
        m.update("a", "a", 0.0)
        assert m.players() == []


class TestRatingPeriods:
    """``glicko2-period``: outcomes collected per period, applied at the boundary."""

    def test_nothing_changes_inside_a_period(self) -> None:
        m = Glicko2Period(Glicko2Params(period_seconds=100.0))
        m.update("a", "b", 10.0)
        m.update("a", "c", 20.0)
        assert m.rating("a") == 1500.0
        assert m.predict("a", "b", 99.0) == 0.5

    def test_boundary_applies_the_whole_period(self) -> None:
        m = Glicko2Period(Glicko2Params(period_seconds=100.0))
        m.update("a", "b", 10.0)
        m.update("c", "a", 20.0)
        m.update("a", "c", 30.0)
        m.predict("x", "y", 100.0)  # the first event-time of period 1 closes period 0
        games = [(PRIOR, 1.0), (PRIOR, 0.0), (PRIOR, 1.0)]
        assert m.state_of("a") == rate_period(PRIOR, games, tau=0.5)
        assert m.state_of("b") == rate_period(PRIOR, [(PRIOR, 0.0)], tau=0.5)
        assert m.state_of("c") == rate_period(PRIOR, [(PRIOR, 1.0), (PRIOR, 0.0)], tau=0.5)

    def test_opponents_rated_at_period_start(self) -> None:
        m = Glicko2Period(Glicko2Params(period_seconds=100.0))
        m.update("a", "b", 10.0)
        m.update("b", "c", 150.0)  # closes period 0
        sa, sb = m.state_of("a"), m.state_of("b")
        m.update("a", "b", 160.0)
        m.update("x", "y", 250.0)  # closes period 1
        c0 = rate_period(PRIOR, [(PRIOR, 0.0)], tau=0.5)  # c after period 1 needs b's start
        assert m.state_of("c") == rate_period(PRIOR, [(sb, 0.0)], tau=0.5) != c0
        assert m.state_of("a") == rate_period(sa, [(sb, 1.0)], tau=0.5)
        assert m.state_of("b") == rate_period(sb, [(PRIOR, 1.0), (sa, 0.0)], tau=0.5)

    def test_idle_periods_grow_phi(self) -> None:
        m = Glicko2Period(Glicko2Params(period_seconds=100.0))
        m.update("a", "b", 10.0)
        m.predict("x", "y", 150.0)
        after = m.state_of("a")
        m.predict("x", "y", 350.0)  # now in period 3: periods 1 and 2 were idle for "a"
        grown = m.state_of("a")
        assert grown.mu == after.mu
        assert grown.sigma == after.sigma
        assert grown.phi == pytest.approx(math.sqrt(after.phi**2 + 2 * after.sigma**2))
        assert m.display("a") == pytest.approx(grown.r - 3 * grown.rd)

    def test_idle_growth_capped_at_rd_max(self) -> None:
        m = Glicko2Period(Glicko2Params(period_seconds=1.0))
        m.update("a", "b", 0.0)
        m.predict("x", "y", 1e7)
        assert m.state_of("a").rd == pytest.approx(350.0)

    def test_idle_player_plays_from_grown_phi(self) -> None:
        m = Glicko2Period(Glicko2Params(period_seconds=100.0))
        m.update("a", "b", 10.0)
        m.update("x", "y", 150.0)
        after = m.state_of("a")
        m.update("a", "c", 450.0)  # period 4: three idle periods before it
        m.update("x", "y", 550.0)
        start = Glicko2Rating(after.mu, math.sqrt(after.phi**2 + 3 * after.sigma**2), after.sigma)
        assert m.state_of("a") == rate_period(start, [(PRIOR, 1.0)], tau=0.5)

    def test_late_event_counts_in_open_period(self) -> None:
        m = Glicko2Period(Glicko2Params(period_seconds=100.0))
        m.update("a", "b", 150.0)
        m.update("a", "b", 50.0)  # older than the open period 1
        m.predict("x", "y", 200.0)
        assert m.state_of("a") == rate_period(PRIOR, [(PRIOR, 1.0), (PRIOR, 1.0)], tau=0.5)

    def test_non_finite_time_refused(self) -> None:
        m = Glicko2Period()
        with pytest.raises(ValueError, match="t=nan"):
            m.update("a", "b", math.nan)

    def test_differs_from_per_event(self) -> None:
        per_event, period = Glicko2(), Glicko2Period()
        for t in (0.0, 1.0, 2.0):
            per_event.update("a", "b", t)
            period.update("a", "b", t)
        period.predict("x", "y", 3600.0)
        assert per_event.rating("a") != period.rating("a")
        assert period.rating("a") > 1500.0 > period.rating("b")


class TestParams:
    """Invalid parameters are refused with the key and the value."""

    def test_bad_tau(self) -> None:
        with pytest.raises(ConfigError, match=r"models\.glicko2\.tau = -1\.0"):
            Glicko2Params(tau=-1.0)

    def test_every_problem_reported(self) -> None:
        with pytest.raises(ConfigError) as e:
            Glicko2Params(rd0=0.0, period_seconds=math.inf)
        assert [p.key for p in e.value.problems] == ["models.glicko2.rd0", "models.glicko2.period_seconds"]
