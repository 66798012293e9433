"""Two-player TrueSkill (seed 002): the first game's known values, symmetry, shrinking σ."""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist

import pytest

from arenad.errors import ConfigError
from arenad.models.trueskill import TrueSkill, TrueSkillParams, draw_margin, v_w

N = NormalDist()
MU0 = 25.0
SIGMA0 = 25.0 / 3.0
BETA = SIGMA0 / 2.0
TAU = SIGMA0 / 100.0


def first_game(eps: float) -> tuple[float, float, float]:
    """Winner μ, both σ, loser μ after one game of two new players, straight from the formulas."""
    var = SIGMA0**2 + TAU**2
    c = math.sqrt(2 * BETA**2 + 2 * var)
    x = -eps / c
    v = N.pdf(x) / N.cdf(x)
    w = v * (v + x)
    return MU0 + var / c * v, math.sqrt(var * (1 - var / c**2 * w)), MU0 - var / c * v


class TestFirstGame:
    """Two new players: the winner and loser values everyone quotes."""

    def test_well_known_values(self) -> None:
        # The quoted 29.396 / 7.171 / 20.604 are those of the reference ``trueskill`` package,
        # whose default draw probability is 0.10: a draw margin of Φ⁻¹(0.55)·√2·β.
        eps = N.inv_cdf(0.55) * math.sqrt(2) * BETA
        assert draw_margin(0.1, BETA) == pytest.approx(eps)
        m = TrueSkill(TrueSkillParams(draw_margin=eps))
        m.update("winner", "loser", 0.0)
        (mu_w, s_w), (mu_l, s_l) = m.state_of("winner"), m.state_of("loser")
        assert (round(mu_w, 3), round(s_w, 3), round(mu_l, 3), round(s_l, 3)) == (
            29.396,
            7.171,
            20.604,
            7.171,
        )
        want_w, want_s, want_l = first_game(eps)
        assert mu_w == pytest.approx(want_w, rel=1e-12)
        assert s_w == pytest.approx(want_s, rel=1e-12)
        assert mu_l == pytest.approx(want_l, rel=1e-12)

    def test_no_draw_margin_for_kills(self) -> None:
        # The registered model: a kill is never a draw, ε = 0 (v(0) = 2N(0), w(0) = 2/π).
        m = TrueSkill()
        m.update("winner", "loser", 0.0)
        (mu_w, s_w), (mu_l, s_l) = m.state_of("winner"), m.state_of("loser")
        want_w, want_s, want_l = first_game(0.0)
        assert (mu_w, s_w, mu_l, s_l) == pytest.approx((want_w, want_s, want_l, want_s), rel=1e-12)
        assert (round(mu_w, 3), round(s_w, 3), round(mu_l, 3)) == (29.205, 7.195, 20.795)


class TestUpdate:
    """Mean moves are mirrored, surprises move more, σ shrinks with games."""

    def test_symmetry(self) -> None:
        m = TrueSkill()
        m.update("a", "b", 0.0)
        (mu_a, s_a), (mu_b, s_b) = m.state_of("a"), m.state_of("b")
        assert mu_a - MU0 == pytest.approx(MU0 - mu_b)
        assert s_a == s_b
        swapped = TrueSkill()
        swapped.update("b", "a", 0.0)
        assert swapped.state_of("b") == (mu_a, s_a)
        assert swapped.state_of("a") == (mu_b, s_b)

    def test_upset_moves_more(self) -> None:
        m = TrueSkill()
        for _ in range(5):
            m.update("strong", "weak", 0.0)
        mu_s, mu_w = m.rating("strong"), m.rating("weak")
        expected_win, upset = TrueSkill(), TrueSkill()
        expected_win.import_state(m.export_state())
        upset.import_state(m.export_state())
        expected_win.update("strong", "weak", 0.0)
        upset.update("weak", "strong", 0.0)
        assert upset.rating("weak") - mu_w > expected_win.rating("strong") - mu_s > 0

    def test_sigma_shrinks(self) -> None:
        m = TrueSkill()
        sigmas = [m.state_of("a")[1]]
        for i in range(10):
            m.update("a", f"b{i}", 0.0)
            sigmas.append(m.state_of("a")[1])
        assert all(later < earlier for earlier, later in itertools.pairwise(sigmas))

    def test_display_is_mu_minus_three_sigma(self) -> None:
        m = TrueSkill()
        assert m.display("nobody") == pytest.approx(0.0)
        m.update("a", "b", 0.0)
        mu, sigma = m.state_of("a")
        assert m.display("a") == mu - 3 * sigma

    def test_self_kill_ignored(self) -> None:
        m = TrueSkill()
        m.update("a", "a", 0.0)
        assert m.players() == []


class TestPredict:
    """P(a kills b) = Φ((μ_a − μ_b)/c), c including the pre-game dynamics."""

    def test_value_and_complement(self) -> None:
        m = TrueSkill()
        m.import_state({**m.export_state(), "players": {"a": [30.0, 4.0], "b": [24.0, 6.0]}})
        c = math.sqrt(2 * BETA**2 + 4.0**2 + 6.0**2 + 2 * TAU**2)
        p = m.predict("a", "b", 0.0)
        assert p == pytest.approx(N.cdf(6.0 / c), rel=1e-12)
        assert p + m.predict("b", "a", 0.0) == pytest.approx(1.0, abs=1e-15)

    def test_unknown_players(self) -> None:
        assert TrueSkill().predict("x", "y", 0.0) == 0.5


class TestTruncationFunctions:
    """v and w stay finite with 0 ≤ w ≤ 1 far into both tails, and join up at the switch."""

    @pytest.mark.parametrize("x", [-1e6, -200.0, -37.5, -36.5, -10.0, -1.0, 0.0, 1.0, 10.0, 50.0])
    def test_bounds(self, x: float) -> None:
        v, w = v_w(x)
        assert math.isfinite(v)
        assert v >= 0
        assert 0.0 <= w <= 1.0

    @pytest.mark.parametrize("x", [-3.0, -0.5, 0.0, 2.0])
    def test_against_statistics(self, x: float) -> None:
        v, w = v_w(x)
        want = N.pdf(x) / N.cdf(x)
        assert (v, w) == pytest.approx((want, want * (want + x)), rel=1e-12)

    def test_tail_switch_is_continuous(self) -> None:
        (v_lo, w_lo), (v_hi, w_hi) = v_w(-37.0 - 1e-12), v_w(-37.0 + 1e-12)
        assert v_lo == pytest.approx(v_hi, rel=1e-12)
        # w = v(v + x) cancels: a 1e-13 relative error in v is ~1e-10 in w at x = -37.
        assert w_lo == pytest.approx(w_hi, abs=1e-9)


class TestParams:
    """Invalid parameters are refused with the key and the value."""

    def test_bad_beta(self) -> None:
        with pytest.raises(ConfigError, match=r"models\.trueskill\.beta = 0\.0"):
            TrueSkillParams(beta=0.0)

    def test_bad_draw_probability(self) -> None:
        with pytest.raises(ValueError, match=r"draw_probability=1\.0"):
            draw_margin(1.0, BETA)
