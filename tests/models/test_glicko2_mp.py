"""Glicko-2 MP-weighted (seed 001 §2): a match is one period, each pair a game of weight 1/(N − 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arenad.models.glicko2 import SCALE, Glicko2, Glicko2MP, Glicko2Params, Glicko2Rating, rate_period

# Glickman's four players of "Example of the Glicko-2 system" (r, RD, σ), now in one match.
PUBLIC = {
    "A": (1500.0, 200.0, 0.06),
    "B": (1400.0, 30.0, 0.06),
    "C": (1550.0, 100.0, 0.06),
    "D": (1700.0, 300.0, 0.06),
}
# The underdog B wins, A and D tie for second, the favourite-by-rating C comes last.
PLACEMENTS = [["B"], ["A", "D"], ["C"]]
TAU = 0.5


def model_at(params: Glicko2Params | None = None) -> Glicko2MP:
    m = Glicko2MP(params)
    players = {p: [(r - 1500.0) / SCALE, rd / SCALE, s] for p, (r, rd, s) in PUBLIC.items()}
    m.import_state({**m.export_state(), "players": players})
    return m


def by_hand(placements: list[list[str]]) -> dict[str, tuple[float, float, float]]:
    """Seed 001 §1.2 and §2.3 written out with numpy, independent of arenad.models.glicko2."""
    names = [p for group in placements for p in group]
    place = np.array([k for k, group in enumerate(placements) for _ in group], dtype=np.float64)
    n = len(names)
    r = np.array([PUBLIC[p][0] for p in names])
    rd = np.array([PUBLIC[p][1] for p in names])
    sigma = np.array([PUBLIC[p][2] for p in names])
    # Step 2: to the Glicko-2 scale.
    mu = (r - 1500.0) / 173.7178
    phi = rd / 173.7178
    # Step 3: g(φ_j) and E(μ_i, μ_j, φ_j) for every ordered pair (row i plays column j).
    g = 1.0 / np.sqrt(1.0 + 3.0 * phi**2 / np.pi**2)
    e = 1.0 / (1.0 + np.exp(-g[None, :] * (mu[:, None] - mu[None, :])))
    # Scores: 1 against players placed below, ½ against the tied, 0 against those above.
    s = np.where(place[:, None] < place[None, :], 1.0, np.where(place[:, None] == place[None, :], 0.5, 0.0))
    # §2.2: weight 1/(N − 1) for every other player, 0 for oneself.
    w = (1.0 - np.eye(n)) / (n - 1)
    # §2.3 step 1 and 2: weighted v and Δ.
    v = 1.0 / (w * g[None, :] ** 2 * e * (1.0 - e)).sum(axis=1)
    gain = (w * g[None, :] * (s - e)).sum(axis=1)
    delta = v * gain
    # Step 5 (§1.2 step 3): σ' = exp(x/2) at the root of f, by plain bisection to the last bit.
    new_sigma = np.array([_volatility_root(phi[i], sigma[i], delta[i], v[i]) for i in range(n)])
    # Steps 6-7 (§2.3 step 4): φ*, φ', μ'.
    phi_star = np.sqrt(phi**2 + new_sigma**2)
    new_phi = 1.0 / np.sqrt(1.0 / phi_star**2 + 1.0 / v)
    new_mu = mu + new_phi**2 * gain
    return {p: (float(new_mu[i]), float(new_phi[i]), float(new_sigma[i])) for i, p in enumerate(names)}


def _volatility_root(phi: float, sigma: float, delta: float, v: float) -> float:
    a = math.log(sigma**2)

    def f(x: float) -> float:
        ex = math.exp(x)
        return ex * (delta**2 - phi**2 - v - ex) / (2.0 * (phi**2 + v + ex) ** 2) - (x - a) / TAU**2

    lo, hi = a - 30.0, a + 30.0
    assert f(lo) > 0.0 > f(hi)  # f falls through its one root
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) > 0.0:
            lo = mid
        else:
            hi = mid
    x = 0.5 * (lo + hi)
    return math.exp(x / 2.0)


class TestHandComputed:
    """A four-player match with a tie, against the formulas evaluated independently."""

    def test_to_1e_12(self) -> None:
        # With the Illinois tolerance ε at 1e-12 both sides sit on the same root of f.
        m = model_at(Glicko2Params(epsilon=1e-12))
        m.update_match(PLACEMENTS, 0.0)
        for p, (mu, phi, sigma) in by_hand(PLACEMENTS).items():
            got = m.state_of(p)
            assert got.mu == pytest.approx(mu, abs=1e-12)
            assert got.phi == pytest.approx(phi, abs=1e-12)
            assert got.sigma == pytest.approx(sigma, abs=1e-12)
            assert got.r == pytest.approx(1500.0 + 173.7178 * mu, abs=1e-9)
            assert got.rd == pytest.approx(173.7178 * phi, abs=1e-9)

    def test_default_tolerance(self) -> None:
        # Glickman's ε = 1e-6 on x = ln σ'²: σ' within about σ'·ε/2, which moves r by < 1e-5.
        m = model_at()
        m.update_match(PLACEMENTS, 0.0)
        for p, (mu, phi, sigma) in by_hand(PLACEMENTS).items():
            got = m.state_of(p)
            assert got.sigma == pytest.approx(sigma, abs=1e-7)
            assert got.r == pytest.approx(1500.0 + 173.7178 * mu, abs=1e-5)
            assert got.rd == pytest.approx(173.7178 * phi, abs=1e-5)

    def test_the_example_moves_as_expected(self) -> None:
        m = model_at()
        m.update_match(PLACEMENTS, 0.0)
        assert m.rating("B") > 1400.0  # won against three stronger players
        assert m.rating("C") < 1550.0  # last
        assert m.state_of("D").rd < 300.0


class TestWeights:
    """The weights add up to one game per match: N = 2 is per-event Glicko-2."""

    @pytest.mark.parametrize("placements", [[["A"], ["C"]], [["D"], ["B"]], [["A", "B"]]])
    def test_two_player_match_is_glicko2(self, placements: list[list[str]]) -> None:
        m = model_at()
        m.update_match(placements, 0.0)
        players = [p for group in placements for p in group]
        a, b = players
        score = 0.5 if len(placements) == 1 else 1.0
        ra, rb = model_at().state_of(a), model_at().state_of(b)
        assert m.state_of(a) == rate_period(ra, [(rb, score)], tau=TAU)
        assert m.state_of(b) == rate_period(rb, [(ra, 1.0 - score)], tau=TAU)

    def test_kill_equals_glicko2_and_the_two_player_match(self) -> None:
        per_event, kill, match = Glicko2(), Glicko2MP(), Glicko2MP()
        for attacker, victim in [("a", "b"), ("c", "a"), ("a", "c"), ("b", "c")]:
            per_event.update(attacker, victim, 0.0)
            kill.update(attacker, victim, 0.0)
            match.update_match([[attacker], [victim]], 0.0)
        for p in "abc":
            assert kill.state_of(p) == per_event.state_of(p) == match.state_of(p)

    def test_winner_among_equals_gains_one_games_worth(self) -> None:
        # Three opponents of weight ⅓ equal to the prior: the same v and Δ as one won game.
        four, two = Glicko2MP(), Glicko2MP()
        four.update_match([["w"], ["x"], ["y"], ["z"]], 0.0)
        two.update_match([["w"], ["x"]], 0.0)
        got, want = four.state_of("w"), two.state_of("w")
        assert (got.mu, got.phi, got.sigma) == pytest.approx((want.mu, want.phi, want.sigma), rel=1e-12)

    def test_unweighted_games_would_overcount(self) -> None:
        # §2.1: three unweighted games shrink φ as if three matches had been played.
        m = Glicko2MP()
        m.update_match([["w"], ["x"], ["y"], ["z"]], 0.0)
        prior = Glicko2Rating.from_public(1500.0, 350.0, 0.06)
        naive = rate_period(prior, [(prior, 1.0)] * 3, tau=TAU)
        assert naive.phi < m.state_of("w").phi - 0.05

    def test_all_tied_moves_no_mean(self) -> None:
        m = Glicko2MP()
        m.update_match([["a", "b", "c"]], 0.0)
        for p in "abc":
            s = m.state_of(p)
            assert s.mu == 0.0
            assert s.rd < 350.0


class TestMatchInputs:
    """Placement order, display, and what a match refuses."""

    def test_placement_order_sets_the_ratings(self) -> None:
        m = Glicko2MP()
        m.update_match([["a"], ["b"], ["c"], ["d"]], 0.0)
        ratings = [m.rating(p) for p in "abcd"]
        assert ratings == sorted(ratings, reverse=True)
        assert ratings[0] - 1500.0 == pytest.approx(1500.0 - ratings[3], abs=1e-9)
        assert m.players() == ["a", "b", "c", "d"]

    def test_display_is_r_minus_three_rd(self) -> None:
        m = Glicko2MP()
        m.update_match([["a"], ["b", "c"]], 0.0)
        s = m.state_of("a")
        assert m.display("a") == pytest.approx(s.r - 3 * s.rd)

    def test_one_player_changes_nothing(self) -> None:
        m = Glicko2MP()
        m.update_match([["alone"], []], 0.0)
        assert m.players() == []

    def test_player_placed_twice_refused(self) -> None:
        with pytest.raises(ValueError, match="'a' is placed twice"):
            Glicko2MP().update_match([["a", "b"], ["a"]], 0.0)

    def test_state_kind(self) -> None:
        state = Glicko2MP().export_state()
        assert state["kind"] == "glicko2-mp"
        with pytest.raises(ValueError, match="state kind 'glicko2'"):
            Glicko2MP().import_state(Glicko2().export_state())
