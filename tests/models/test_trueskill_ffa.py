"""TrueSkill over FFA placements (``trueskill-ffa``): factor-graph EP against the reference package.

The reference is the ``trueskill`` package (0.4.5, Heungsub Lee), run with two settings that
take its own approximations out of the comparison: exact Φ/N/Φ⁻¹ (its default backend uses a
Numerical Recipes erfc, good to ~1e-7) and ``min_delta`` = 1e-12 (its default stops the sweeps
at a change of 1e-4). It caps the sweeps at 10, enough for these matches to converge.
"""

from __future__ import annotations

import itertools
import math
import random
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest
import trueskill  # type: ignore[import-untyped]  # no type information in the package
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.errors import ConfigError
from arenad.models.trueskill import (
    TrueSkill,
    TrueSkillFFA,
    TrueSkillParams,
    _cut_win,
    draw_margin,
    rate_match,
    v_w,
    v_w_draw,
)

N = NormalDist()
MU0 = 25.0
SIGMA0 = 25.0 / 3.0
BETA = SIGMA0 / 2.0
TAU = SIGMA0 / 100.0
EPS = draw_margin(0.10, BETA)  # the default match draw margin


def _cdf(x: float, mu: float = 0.0, sigma: float = 1.0) -> float:
    return 0.5 * math.erfc(-(x - mu) / (sigma * math.sqrt(2.0)))


def _pdf(x: float, mu: float = 0.0, sigma: float = 1.0) -> float:
    return NormalDist(mu, sigma).pdf(x)


def _ppf(p: float, mu: float = 0.0, sigma: float = 1.0) -> float:
    return NormalDist(mu, sigma).inv_cdf(p)


EXACT = trueskill.TrueSkill(draw_probability=0.10, backend=(_cdf, _pdf, _ppf))
PACKAGE_DEFAULT = trueskill.TrueSkill()  # draw probability 0.10, its own erfc


def reference(
    ratings: list[tuple[float, float]], ranks: list[int], env: Any = EXACT, min_delta: float = 1e-12
) -> list[tuple[float, float]]:
    """The package's ``rate`` with every player a team of one."""
    groups = [(env.create_rating(mu, sigma),) for mu, sigma in ratings]
    out = env.rate(groups, ranks=ranks, min_delta=min_delta)
    return [(float(g[0].mu), float(g[0].sigma)) for g in out]


def ties_of(ranks: list[int]) -> list[bool]:
    return [ranks[k] == ranks[k + 1] for k in range(len(ranks) - 1)]


def groups_of(names: list[str], ranks: list[int]) -> list[list[str]]:
    """Placements from names in order and their (sorted) ranks."""
    return [
        [n for n, _ in group]
        for _, group in itertools.groupby(zip(names, ranks, strict=True), lambda x: x[1])
    ]


def ours(ratings: list[tuple[float, float]], ranks: list[int]) -> list[tuple[float, float]]:
    return rate_match(ratings, ties_of(ranks), beta=BETA, tau=TAU, margin=EPS)


def assert_close(got: list[tuple[float, float]], want: list[tuple[float, float]], tol: float) -> None:
    assert len(got) == len(want)
    for (mu, sigma), (mu_w, sigma_w) in zip(got, want, strict=True):
        assert mu == pytest.approx(mu_w, abs=tol)
        assert sigma == pytest.approx(sigma_w, abs=tol)


# (μ, σ) of each player in placement order, best first, and the ranks (equal = tied).
MATCHES: dict[str, tuple[list[tuple[float, float]], list[int]]] = {
    "3 new players": ([(MU0, SIGMA0)] * 3, [0, 1, 2]),
    "3, favourites win": ([(31.0, 2.5), (26.0, 4.0), (19.5, 3.1)], [0, 1, 2]),
    "4, tie in the middle": ([(27.0, 3.0), (24.0, 6.0), (25.5, 1.5), (22.0, 7.5)], [0, 1, 1, 2]),
    "5, three-way tie on top": (
        [(25.0, 8.0), (30.0, 2.0), (21.0, 5.0), (28.0, 3.0), (18.0, 6.0)],
        [0, 0, 0, 1, 2],
    ),
    "6, the favourite last": (
        [(22.0, 3.0), (23.0, 3.5), (21.0, 2.0), (24.0, 4.0), (20.0, 3.0), (38.0, 1.2)],
        [0, 1, 2, 3, 4, 5],
    ),
    "7, mixed": (
        [(29.1, 1.1), (17.3, 7.9), (25.0, SIGMA0), (33.0, 4.4), (24.0, 0.9), (26.6, 2.2), (12.0, 5.0)],
        [0, 1, 2, 2, 3, 4, 4],
    ),
    "8 new players, two ties": ([(MU0, SIGMA0)] * 8, [0, 1, 1, 2, 3, 4, 4, 5]),
    "8, everyone tied": ([(20.0 + k, 1.0 + k / 2) for k in range(8)], [0] * 8),
}


class TestAgainstReferencePackage:
    """``rate_match`` converges to the package's EP fixed point on 3-8 player matches with ties."""

    @pytest.mark.parametrize("case", list(MATCHES))
    def test_hand_picked_matches(self, case: str) -> None:
        ratings, ranks = MATCHES[case]
        assert_close(ours(ratings, ranks), reference(ratings, ranks), 1e-9)

    @pytest.mark.parametrize("seed", range(12))
    def test_random_matches(self, seed: int) -> None:
        rng = random.Random(seed)
        n = rng.randint(3, 8)
        ratings = [(rng.uniform(15.0, 35.0), rng.uniform(1.0, SIGMA0)) for _ in range(n)]
        ranks = sorted(rng.randrange(n) for _ in range(n))
        assert_close(ours(ratings, ranks), reference(ratings, ranks), 1e-9)

    def test_model_on_its_state(self) -> None:
        ratings, ranks = MATCHES["7, mixed"]
        names = [f"p{i}" for i in range(len(ratings))]
        m = TrueSkillFFA()
        m.import_state(
            {**m.export_state(), "players": {n: list(r) for n, r in zip(names, ratings, strict=True)}}
        )
        m.update_match(groups_of(names, ranks), 0.0)
        assert_close([m.state_of(n) for n in names], reference(ratings, ranks), 1e-9)

    def test_package_defaults_agree_to_its_own_precision(self) -> None:
        # The package's fallback erfc (fractional error < 1.2e-7) and its early stop (1e-4)
        # leave differences of order 1e-7 on μ: the same fixed point, less precisely.
        ratings, ranks = MATCHES["6, the favourite last"]
        assert_close(ours(ratings, ranks), reference(ratings, ranks, PACKAGE_DEFAULT, 1e-4), 1e-5)

    def test_unsorted_ranks_are_the_same_match(self) -> None:
        # The package sorts by rank (stably): our placement order is that sorted order.
        ratings, ranks = MATCHES["4, tie in the middle"]
        shuffled = [3, 0, 1, 2]
        got = reference([ratings[i] for i in shuffled], [ranks[i] for i in shuffled])
        assert_close([got[shuffled.index(i)] for i in range(4)], ours(ratings, ranks), 1e-9)


class TestTwoPlayers:
    """Two players: one comparison, exact; equal to the pairwise update with the same ε."""

    @pytest.mark.parametrize(
        "ratings", [[(MU0, SIGMA0), (MU0, SIGMA0)], [(30.0, 4.0), (24.0, 6.0)], [(18.0, 1.5), (35.0, 2.0)]]
    )
    def test_equals_the_pairwise_update(self, ratings: list[tuple[float, float]]) -> None:
        pairwise = TrueSkill(TrueSkillParams(draw_margin=EPS))
        match = TrueSkillFFA()
        state = {"players": {"a": list(ratings[0]), "b": list(ratings[1])}}
        pairwise.import_state({**pairwise.export_state(), **state})
        match.import_state({**match.export_state(), **state})
        pairwise.update("a", "b", 0.0)
        match.update_match([["a"], ["b"]], 0.0)
        for p in ("a", "b"):
            assert match.state_of(p) == pytest.approx(pairwise.state_of(p), rel=1e-12)

    def test_without_draw_margin_equals_the_kill_model(self) -> None:
        kills = TrueSkill()
        match = TrueSkillFFA(TrueSkillParams(match_draw_probability=0.0))
        kills.update("a", "b", 0.0)
        match.update_match([["a"], ["b"]], 0.0)
        assert match.state_of("a") == pytest.approx(kills.state_of("a"), rel=1e-12)
        assert match.state_of("b") == pytest.approx(kills.state_of("b"), rel=1e-12)

    def test_well_known_first_game(self) -> None:
        m = TrueSkillFFA()
        m.update_match([["winner"], ["loser"]], 0.0)
        (mu_w, s_w), (mu_l, s_l) = m.state_of("winner"), m.state_of("loser")
        assert (round(mu_w, 3), round(s_w, 3), round(mu_l, 3), round(s_l, 3)) == (
            29.396,
            7.171,
            20.604,
            7.171,
        )

    def test_a_draw(self) -> None:
        ratings = [(27.0, 3.0), (22.0, 5.0)]
        assert_close(ours(ratings, [0, 0]), reference(ratings, [0, 0]), 1e-12)

    def test_kills_are_the_pairwise_model(self) -> None:
        kills, ffa = TrueSkill(), TrueSkillFFA()
        for a, b in [("a", "b"), ("c", "a"), ("a", "c")]:
            kills.update(a, b, 0.0)
            ffa.update(a, b, 0.0)
        assert [ffa.state_of(p) for p in "abc"] == [kills.state_of(p) for p in "abc"]


class TestMatchUpdate:
    """Placements: order, symmetry, shrinking σ, and the inputs a match refuses."""

    def test_equal_players_mirror_around_the_prior(self) -> None:
        m = TrueSkillFFA()
        names = [f"p{i}" for i in range(6)]
        m.update_match([[n] for n in names], 0.0)
        mus = [m.rating(n) for n in names]
        assert mus == sorted(mus, reverse=True)
        for k in range(3):
            assert mus[k] - MU0 == pytest.approx(MU0 - mus[5 - k], abs=1e-12)
            assert m.state_of(names[k])[1] == pytest.approx(m.state_of(names[5 - k])[1], abs=1e-12)

    def test_sigma_never_grows_beyond_the_dynamics(self) -> None:
        ratings, ranks = MATCHES["7, mixed"]
        for (_, before), (_, after) in zip(ratings, ours(ratings, ranks), strict=True):
            assert after < math.sqrt(before**2 + TAU**2)

    def test_is_a_fixed_point(self) -> None:
        ratings, ranks = MATCHES["8 new players, two ties"]
        settled = rate_match(
            ratings, ties_of(ranks), beta=BETA, tau=TAU, margin=EPS, tolerance=0.0, max_sweeps=40
        )
        assert_close(ours(ratings, ranks), settled, 1e-11)
        one_sweep = rate_match(ratings, ties_of(ranks), beta=BETA, tau=TAU, margin=EPS, max_sweeps=1)
        assert max(abs(a[0] - b[0]) for a, b in zip(one_sweep, settled, strict=True)) > 1e-3

    def test_order_inside_a_tie_matters_a_little(self) -> None:
        # A draw factor links neighbours only (Herbrich et al.'s chain, the package's too): in
        # [[a], [b, c], [d]] b meets a and c meets d, so swapping b and c changes the result.
        ratings, ranks = MATCHES["4, tie in the middle"]
        swapped = [ratings[0], ratings[2], ratings[1], ratings[3]]
        one, two = ours(ratings, ranks), ours(swapped, ranks)
        gap = max(abs(one[1][0] - two[2][0]), abs(one[2][0] - two[1][0]))
        assert 1e-4 < gap < 0.05
        assert_close(two, reference(swapped, ranks), 1e-9)

    def test_players_first_seen_in_placement_order(self) -> None:
        m = TrueSkillFFA()
        m.update_match([["c"], ["a", "d"], ["b"]], 0.0)
        assert m.players() == ["c", "a", "d", "b"]

    def test_one_player_or_none_changes_nothing(self) -> None:
        m = TrueSkillFFA()
        m.update_match([["alone"]], 0.0)
        m.update_match([[], []], 0.0)
        assert m.players() == []

    def test_player_placed_twice_refused(self) -> None:
        with pytest.raises(ValueError, match="'a' is placed twice"):
            TrueSkillFFA().update_match([["a"], ["b", "a"]], 0.0)

    def test_tie_needs_a_draw_margin(self) -> None:
        m = TrueSkillFFA(TrueSkillParams(match_draw_probability=0.0))
        m.update_match([["a"], ["b"], ["c"]], 0.0)  # no tie: fine at ε = 0
        with pytest.raises(ValueError, match=r"match_draw_probability > 0, got 0\.0"):
            m.update_match([["a", "b"], ["c"]], 0.0)

    def test_ties_length_checked(self) -> None:
        with pytest.raises(ValueError, match="ties has 1 entries, expected 2"):
            rate_match([(MU0, SIGMA0)] * 3, [False], beta=BETA, tau=TAU, margin=EPS)
        assert rate_match([], [], beta=BETA, tau=TAU, margin=EPS) == []

    def test_tie_without_margin_refused(self) -> None:
        with pytest.raises(ValueError, match=r"margin=0\.0"):
            rate_match([(MU0, SIGMA0)] * 2, [True], beta=BETA, tau=TAU, margin=0.0)

    def test_a_full_server_converges(self) -> None:
        rng = random.Random(5)
        ratings = [(rng.uniform(10.0, 40.0), rng.uniform(0.8, SIGMA0)) for _ in range(256)]
        ties = [rng.random() < 0.2 for _ in range(255)]
        got = rate_match(ratings, ties, beta=BETA, tau=TAU, margin=EPS)
        settled = rate_match(ratings, ties, beta=BETA, tau=TAU, margin=EPS, tolerance=0.0, max_sweeps=60)
        assert_close(got, settled, 1e-8)

    def test_bad_draw_probability(self) -> None:
        with pytest.raises(ConfigError, match=r"models\.trueskill\.match_draw_probability = 1\.0"):
            TrueSkillParams(match_draw_probability=1.0)


class TestTruncation:
    """The draw cut and the tail of the win cut, against the textbook formulas."""

    @pytest.mark.parametrize(("t", "e"), [(0.0, 0.05), (0.7, 0.05), (-1.3, 0.3), (3.0, 1.0), (-4.0, 0.2)])
    def test_draw_against_statistics(self, t: float, e: float) -> None:
        a, b = e - abs(t), -e - abs(t)
        z = N.cdf(a) - N.cdf(b)
        v = (N.pdf(b) - N.pdf(a)) / z * (1.0 if t >= 0 else -1.0)
        w = v * v + (a * N.pdf(a) - b * N.pdf(b)) / z
        assert v_w_draw(t, e) == pytest.approx((v, w), rel=1e-10, abs=1e-15)

    def test_draw_against_the_package(self) -> None:
        for t, e in [(0.4, 0.06), (-2.5, 0.1), (6.0, 0.5)]:
            assert v_w_draw(t, e) == pytest.approx((EXACT.v_draw(t, e), EXACT.w_draw(t, e)), rel=1e-9)

    def test_draw_tail_switch_is_continuous(self) -> None:
        # a = e − |t| crosses −5 at |t| = 5.3: direct formula on one side, Mills ratios on the other.
        below, above = v_w_draw(5.3 - 1e-9, 0.3), v_w_draw(5.3 + 1e-9, 0.3)
        assert below == pytest.approx(above, rel=1e-7)

    @pytest.mark.parametrize("t", [-1e4, -200.0, -40.0, 40.0, 200.0])
    def test_draw_far_tail_stays_finite(self, t: float) -> None:
        v, w = v_w_draw(t, 0.4)
        assert math.isfinite(v)
        assert 0.0 < w <= 1.0
        assert (v < 0) == (t > 0)  # a tie pulls the two together

    def test_win_tail_switch_is_continuous(self) -> None:
        (v_lo, w_lo, r_lo), (v_hi, w_hi, r_hi) = _cut_win(-5.0 - 1e-12), _cut_win(-5.0 + 1e-12)
        assert (v_lo, w_lo) == pytest.approx((v_hi, w_hi), rel=1e-12)
        assert r_lo == pytest.approx(r_hi, rel=1e-10)

    @pytest.mark.parametrize("y", [5.0, 6.0, 12.0, 30.0, 100.0])
    def test_win_tail_against_quadrature(self, y: float) -> None:
        # The Gaussian cut at x = −y: z > y. Its mean excess E[z − y] = v + x and its variance
        # 1 − w, by Simpson's rule on the density of u = z − y, exp(−y·u − u²/2), u in [0, 60/y].
        n = 400_000
        u = np.linspace(0.0, 60.0 / y, n + 1)
        f = np.exp(-y * u - 0.5 * u * u)
        simpson = np.ones(n + 1)
        simpson[1:-1:2] = 4.0
        simpson[2:-1:2] = 2.0
        m0, m1, m2 = (float((simpson * f * u**k).sum()) for k in range(3))
        v, w, rest = _cut_win(-y)
        assert v - y == pytest.approx(m1 / m0, rel=1e-12)
        assert rest == pytest.approx(m2 / m0 - (m1 / m0) ** 2, rel=1e-12)
        assert w == pytest.approx(v * (v - y), rel=1e-15)

    @pytest.mark.parametrize("x", [-6.0, -12.0, -30.0])
    def test_win_tail_agrees_with_v_w(self, x: float) -> None:
        # v_w's w = v(v + x) cancels: its error grows like x⁴·1e-16 (a few times that), which
        # bounds the agreement; the quadrature test above pins _cut_win itself.
        v, w, _ = _cut_win(x)
        v_ref, w_ref = v_w(x)
        assert v == pytest.approx(v_ref, rel=1e-13)
        assert w == pytest.approx(w_ref, rel=1e-15 * x**4)

    def test_win_tail_variance_left(self) -> None:
        # Far out, 1 − w = 1/x² − 6/x⁴ + O(x⁻⁶) (the truncated Gaussian's variance).
        x = -1e4
        assert _cut_win(x)[2] == pytest.approx(1 / x**2 - 6 / x**4, rel=1e-12)


def distinct(raw: list[list[int]]) -> list[list[str]]:
    """Placements from drawn groups of player numbers: each player kept where first placed."""
    seen: set[int] = set()
    groups: list[list[str]] = []
    for group in raw:
        names = [f"p{i}" for i in dict.fromkeys(group) if i not in seen]
        seen.update(group)
        if names:
            groups.append(names)
    return groups


PLACEMENTS = st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=3), min_size=1, max_size=6)


class TestRobustness:
    """Any sequence of matches keeps every rating finite and σ within its prior."""

    @settings(max_examples=60, deadline=None)
    @given(matches=st.lists(PLACEMENTS, max_size=40))
    def test_random_matches(self, matches: list[list[list[int]]]) -> None:
        m = TrueSkillFFA()
        for raw in matches:
            m.update_match(distinct(raw), 0.0)
        for p in m.players():
            mu, sigma = m.state_of(p)
            assert math.isfinite(mu)
            assert 0.0 < sigma <= math.sqrt(SIGMA0**2 + len(matches) * TAU**2)

    def test_repeated_upsets(self) -> None:
        m = TrueSkillFFA()
        for _ in range(200):
            m.update_match([["strong"], ["mid"], ["weak"]], 0.0)
        for _ in range(20):
            m.update_match([["weak"], ["mid"], ["strong"]], 0.0)
        assert all(math.isfinite(v) for p in m.players() for v in m.state_of(p))
