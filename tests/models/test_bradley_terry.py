"""Bradley–Terry (seed 002, the Arena section): the MAP fit, its uncertainty, the refit rule, state."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.errors import ConfigError
from arenad.models.base import is_offline
from arenad.models.bradley_terry import (
    Z95,
    BradleyTerry,
    BradleyTerryParams,
    pair_counts,
)
from arenad.models.elo import Elo

ELO = 400.0 / math.log(10.0)  # natural units -> Elo points
Kills = list[tuple[int, int]]


def simulate(players: int, kills: int, seed: int, sd: float = 150.0) -> tuple[npt.NDArray[np.float64], Kills]:
    """Hidden strengths (Elo, around 0) and kills drawn from them with the Bradley–Terry law."""
    rng = np.random.default_rng(seed)
    strength = rng.normal(0.0, sd, players)
    out: Kills = []
    for _ in range(kills):
        a, b = (int(x) for x in rng.choice(players, 2, replace=False))
        if rng.random() >= 1.0 / (1.0 + 10.0 ** ((strength[b] - strength[a]) / 400.0)):
            a, b = b, a
        out.append((a, b))
    return strength, out


def fitted(kills: Kills, params: BradleyTerryParams | None = None) -> BradleyTerry:
    model = BradleyTerry(params)
    for a, b in kills:
        model.update(f"p{a}", f"p{b}", 0.0)
    model.fit()
    return model


def ratings(model: BradleyTerry, players: int) -> npt.NDArray[np.float64]:
    return np.array([model.rating(f"p{i}") for i in range(players)])


def log_posterior(theta: npt.NDArray[np.float64], kills: Kills, prior_sd: float) -> float:
    """The objective written out kill by kill (natural units), independently of the model's code."""
    value = 0.0
    for a, b in kills:
        value -= math.log1p(math.exp(-(theta[a] - theta[b])))
    return value - 0.5 * float(theta @ theta) * (ELO / prior_sd) ** 2


def win_matrix(kills: Kills, players: int) -> npt.NDArray[np.float64]:
    wins = np.zeros((players, players))
    for a, b in kills:
        wins[a, b] += 1.0
    return wins


_, KILLS = simulate(20, 2000, seed=1)


class TestParams:
    """Parameters validate themselves and name the key."""

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("prior_sd", 0.0),
            ("scale", -1.0),
            ("refit_every", 0),
            ("tolerance", math.nan),
            ("dense_max", -1),
        ],
    )
    def test_rejects(self, field: str, value: float) -> None:
        with pytest.raises(ConfigError, match=f"models.bradley-terry.{field}"):
            BradleyTerryParams(**{field: value})  # type: ignore[arg-type]

    def test_offline_and_named(self) -> None:
        model = BradleyTerry()
        assert is_offline(model)
        assert model.name == "bradley-terry"
        assert not is_offline(Elo())


class TestPairCounts:
    """Kills aggregate into one row per unordered pair with the lower index's wins."""

    def test_counts(self) -> None:
        pairs = pair_counts([0, 1, 0, 2, 2], [1, 0, 1, 0, 1], 3)
        rows = sorted(
            zip(pairs.i.tolist(), pairs.j.tolist(), pairs.n.tolist(), pairs.wins.tolist(), strict=True)
        )
        assert rows == [(0, 1, 3.0, 2.0), (0, 2, 1.0, 0.0), (1, 2, 1.0, 0.0)]


class TestFit:
    """The MAP recovers simulated strengths and agrees with independent solvers."""

    def test_recovers_simulated_strengths(self) -> None:
        strength, kills = simulate(30, 6000, seed=2)
        r = ratings(fitted(kills), 30)
        assert np.corrcoef(r, strength)[0, 1] > 0.97
        # The shared Gaussian prior anchors the mean exactly (module docstring).
        assert r.mean() == pytest.approx(1500.0, abs=1e-6)
        assert np.abs((r - 1500.0) - (strength - strength.mean())).max() < 120.0

    def test_gradient_is_zero_at_the_optimum(self) -> None:
        model = fitted(KILLS)
        theta = (ratings(model, 20) - 1500.0) / ELO
        h = 1e-4
        for i in range(20):
            e = np.zeros(20)
            e[i] = h
            slope = (log_posterior(theta + e, KILLS, 1000.0) - log_posterior(theta - e, KILLS, 1000.0)) / (
                2 * h
            )
            assert abs(slope) < 1e-5, i
        # ... and it is a maximum: a step off it in any direction lowers the posterior.
        rng = np.random.default_rng(0)
        best = log_posterior(theta, KILLS, 1000.0)
        for _ in range(5):
            assert log_posterior(theta + 0.01 * rng.standard_normal(20), KILLS, 1000.0) < best

    def test_matches_plain_gradient_ascent(self) -> None:
        """An independent fit: fixed-step gradient ascent on the same log posterior, from zero."""
        prior_sd = 300.0
        model = fitted(KILLS, BradleyTerryParams(prior_sd=prior_sd))
        wins = win_matrix(KILLS, 20)
        games = wins + wins.T
        precision = (ELO / prior_sd) ** 2
        step = 1.0 / (precision + 0.5 * games.sum(axis=1).max())  # 1/L: Gershgorin bound
        theta = np.zeros(20)
        for _ in range(20000):
            p = 1.0 / (1.0 + np.exp(-(theta[:, None] - theta[None, :])))
            grad = (wins - games * p).sum(axis=1) - precision * theta
            theta += step * grad
            if np.abs(grad).max() < 1e-10:
                break
        assert np.abs(grad).max() < 1e-10
        np.testing.assert_allclose(ratings(model, 20), 1500.0 + ELO * theta, atol=1e-6)

    def test_matches_hunter_mm_without_prior(self) -> None:
        """With a negligible prior the fit is the MLE, which Hunter's MM algorithm (2004) reaches."""
        model = fitted(KILLS, BradleyTerryParams(prior_sd=1e5))
        wins = win_matrix(KILLS, 20)
        games = wins + wins.T
        won = wins.sum(axis=1)
        gamma = np.ones(20)
        for _ in range(100000):
            nxt = won / (games / (gamma[:, None] + gamma[None, :])).sum(axis=1)
            nxt /= np.exp(np.log(nxt).mean())  # the same anchor: mean log-strength 0
            done = np.abs(np.log(nxt / gamma)).max() < 1e-13
            gamma = nxt
            if done:
                break
        np.testing.assert_allclose(ratings(model, 20), 1500.0 + ELO * np.log(gamma), atol=1e-3)

    def test_dense_and_conjugate_gradient_steps_agree(self) -> None:
        dense = fitted(KILLS)
        cg = fitted(KILLS, BradleyTerryParams(dense_max=0))
        np.testing.assert_allclose(ratings(cg, 20), ratings(dense, 20), atol=1e-6)

    def test_newton_converges_in_few_iterations(self) -> None:
        model = fitted(KILLS)
        assert 2 <= model.iterations <= 15

    def test_stops_where_floating_point_stops_improving(self) -> None:
        """An unreachable tolerance: the fit still ends, at the optimum, not at max_iterations."""
        strict = fitted(KILLS, BradleyTerryParams(tolerance=1e-300, dense_max=0))
        assert strict.iterations < 20
        np.testing.assert_allclose(ratings(strict, 20), ratings(fitted(KILLS), 20), atol=1e-6)

    def test_only_wins_stay_finite_and_prior_bounded(self) -> None:
        model = BradleyTerry()
        for i in range(300):
            model.update("champ", f"v{i % 3}", 0.0)
        champ = model.rating("champ")
        assert math.isfinite(champ)
        assert 2000.0 < champ < 1500.0 + 5 * 1000.0
        assert sum(model.rating(p) for p in model.players()) == pytest.approx(4 * 1500.0)
        # A stronger prior holds the only-wins player closer to the mean.
        strong = BradleyTerry(BradleyTerryParams(prior_sd=200.0))
        for i in range(300):
            strong.update("champ", f"v{i % 3}", 0.0)
        assert 1500.0 < strong.rating("champ") < champ

    def test_elo_scale(self) -> None:
        """P(a beats b) = 1/(1 + 10^((R_b − R_a)/400)) from the reported ratings."""
        model = fitted(KILLS)
        for a, b in [(0, 1), (3, 17), (12, 5)]:
            diff = model.rating(f"p{a}") - model.rating(f"p{b}")
            assert model.predict(f"p{a}", f"p{b}", 0.0) == pytest.approx(1 / (1 + 10 ** (-diff / 400)))

    def test_custom_scale_and_initial(self) -> None:
        base = fitted(KILLS)
        other = fitted(KILLS, BradleyTerryParams(initial=1000.0, scale=800.0, prior_sd=2000.0))
        # Same model in other units: ratings map linearly and predictions do not change.
        np.testing.assert_allclose(ratings(other, 20) - 1000.0, 2.0 * (ratings(base, 20) - 1500.0), atol=1e-6)
        assert other.predict("p0", "p1", 0.0) == pytest.approx(base.predict("p0", "p1", 0.0), abs=1e-12)


class TestUncertainty:
    """Confidence intervals from the inverse Hessian, the display rule, rank spread, leaderboard."""

    def test_interval_coverage_is_roughly_nominal(self) -> None:
        covered = total = 0
        for seed in range(60):
            strength, kills = simulate(20, 1500, seed=100 + seed)
            intervals = fitted(kills).confidence_intervals(0.95)
            truth = 1500.0 + strength - strength.mean()  # the anchored truth: mean 1500
            for i in range(20):
                low, high = intervals[f"p{i}"]
                covered += low <= truth[i] <= high
                total += 1
        # 1200 intervals: nominal 1140 covered, binomial sd ≈ 7.5.
        assert 1104 <= covered <= 1170, covered / total

    def test_standard_errors_match_the_projected_inverse_fisher_information(self) -> None:
        model = fitted(KILLS)
        theta = (ratings(model, 20) - 1500.0) / ELO
        fisher = np.zeros((20, 20))
        for a, b in KILLS:  # built kill by kill: Σ p(1 − p)(e_a − e_b)(e_a − e_b)ᵀ
            p = 1.0 / (1.0 + math.exp(-(theta[a] - theta[b])))
            e = np.zeros(20)
            e[a], e[b] = 1.0, -1.0
            fisher += p * (1.0 - p) * np.outer(e, e)
        cov = np.linalg.inv(fisher + (ELO / 1000.0) ** 2 * np.eye(20))
        center = np.eye(20) - 1.0 / 20  # the mean is anchored: project out the common shift
        se = ELO * np.sqrt(np.diag(center @ cov @ center))
        np.testing.assert_allclose([model.standard_error(f"p{i}") for i in range(20)], se, rtol=1e-6)

    def test_display_is_the_lower_95_bound(self) -> None:
        model = fitted(KILLS)
        low, _ = model.confidence_intervals()["p3"]
        assert model.display("p3") == pytest.approx(low)
        assert model.display("p3") == pytest.approx(
            model.rating("p3") - 1.959964 * model.standard_error("p3")
        )
        assert abs(Z95 - 1.959964) < 1e-6
        assert model.display("nobody") == pytest.approx(1500.0 - Z95 * 1000.0)

    def test_more_data_narrows_the_interval(self) -> None:
        few = fitted(KILLS[:500]).standard_error("p0")
        many = fitted(KILLS).standard_error("p0")
        assert many < few * 0.7

    def test_interval_level(self) -> None:
        model = fitted(KILLS)
        narrow = model.confidence_intervals(0.5)["p0"]
        wide = model.confidence_intervals(0.99)["p0"]
        assert wide[0] < narrow[0] < model.rating("p0") < narrow[1] < wide[1]
        with pytest.raises(ValueError, match="level"):
            model.confidence_intervals(1.0)

    def test_rank_spread_separated_ladder(self) -> None:
        """Strengths 600 Elo apart: every draw ranks them the same, so the spread is the raw rank."""
        kills: Kills = []
        rng = np.random.default_rng(5)
        strength = [1800.0, 1200.0, 600.0, 0.0]
        for _ in range(800):
            a, b = (int(x) for x in rng.choice(4, 2, replace=False))
            if rng.random() >= 1.0 / (1.0 + 10.0 ** ((strength[b] - strength[a]) / 400.0)):
                a, b = b, a
            kills.append((a, b))
        spread = fitted(kills).rank_spread(samples=500, seed=1)
        assert spread == {"p0": (1, 1, 1), "p1": (2, 2, 2), "p2": (3, 3, 3), "p3": (4, 4, 4)}

    def test_rank_spread_of_equal_players_overlaps(self) -> None:
        _, kills = simulate(8, 400, seed=3, sd=1.0)  # all about equal
        model = fitted(kills)
        spread = model.rank_spread(samples=1000, seed=2)
        for low, median, high in spread.values():
            assert 1 <= low <= median <= high <= 8
            assert high - low >= 3  # 400 kills cannot order 8 equal players
        assert model.rank_spread(samples=1000, seed=2) == spread  # seeded, so reproducible
        with pytest.raises(ValueError, match="samples"):
            model.rank_spread(samples=0)

    def test_leaderboard(self) -> None:
        model = fitted(KILLS)
        rows = model.leaderboard(samples=300, seed=0)
        assert [row.rank for row in rows] == list(range(1, 21))
        assert [row.rating for row in rows] == sorted((row.rating for row in rows), reverse=True)
        kills = {f"p{i}": sum(a == i for a, _ in KILLS) for i in range(20)}
        deaths = {f"p{i}": sum(b == i for _, b in KILLS) for i in range(20)}
        for row in rows:
            assert row.lower < row.rating < row.upper
            assert row.rank_low <= row.rank_median <= row.rank_high
            assert (row.kills, row.deaths) == (kills[row.player], deaths[row.player])
        assert rows[0].player == f"p{int(np.argmax(ratings(model, 20)))}"

    def test_empty_model(self) -> None:
        model = BradleyTerry()
        assert model.rank_spread() == {}
        assert model.leaderboard() == []
        assert model.confidence_intervals() == {}


class TestRefitRule:
    """``predict`` lags the history by a bounded number of kills; reads of ratings never lag."""

    def test_predict_refits_on_doubling_then_every_refit_every(self) -> None:
        model = BradleyTerry(BradleyTerryParams(refit_every=100))
        fitted_at = []
        for n, (a, b) in enumerate(KILLS[:700]):
            before = model.fits
            model.predict(f"p{a}", f"p{b}", 0.0)
            if model.fits != before:
                fitted_at.append(n)
            model.update(f"p{a}", f"p{b}", 0.0)
        assert fitted_at == [1, 2, 4, 8, 16, 32, 64, 128, 228, 328, 428, 528, 628]

    def test_predict_between_refits_uses_the_last_fit(self) -> None:
        model = BradleyTerry(BradleyTerryParams(refit_every=100))
        reference = BradleyTerry()
        for a, b in KILLS[:128]:
            model.update(f"p{a}", f"p{b}", 0.0)
            reference.update(f"p{a}", f"p{b}", 0.0)
        p = model.predict("p0", "p1", 0.0)  # refits: 128 pending kills
        assert p == reference.predict("p0", "p1", 0.0)
        for a, b in KILLS[128:200]:
            model.update(f"p{a}", f"p{b}", 0.0)
        assert model.predict("p0", "p1", 0.0) == p  # 72 new kills < 100: still the old fit
        model.update("p0", "p1", 0.0)
        assert model.rating("p0") > reference.rating("p0")  # rating() refits at once

    def test_player_new_since_the_last_fit_is_predicted_at_the_prior(self) -> None:
        model = BradleyTerry(BradleyTerryParams(refit_every=100))
        for a, b in KILLS[:300]:
            model.update(f"p{a}", f"p{b}", 0.0)
        model.predict("p0", "p1", 0.0)
        model.update("newcomer", "p0", 0.0)
        assert model.predict("newcomer", "p5", 0.0) == model.predict("nobody", "p5", 0.0)
        assert model.rating("newcomer") > 1500.0


class TestState:
    """Export, import and continue exactly; refuse foreign or broken states."""

    def test_json_round_trip_continues_exactly(self) -> None:
        params = BradleyTerryParams(refit_every=50)
        original = BradleyTerry(params)
        for a, b in KILLS[:300]:
            original.predict(f"p{a}", f"p{b}", 0.0)
            original.update(f"p{a}", f"p{b}", 0.0)
        restored = BradleyTerry(params)
        restored.import_state(json.loads(json.dumps(original.export_state())))
        fits_before = original.fits  # export_state refitted: the 300 kills are all in the fit
        assert restored.players() == original.players()
        for a, b in KILLS[300:600]:
            assert restored.predict(f"p{a}", f"p{b}", 0.0) == original.predict(f"p{a}", f"p{b}", 0.0)
            original.update(f"p{a}", f"p{b}", 0.0)
            restored.update(f"p{a}", f"p{b}", 0.0)
        assert restored.fits == original.fits - fits_before == 5  # at kills 350, 400, ..., 550
        assert [restored.display(p) for p in restored.players()] == [
            original.display(p) for p in original.players()
        ]

    def test_export_refits_and_holds_history_and_fit(self) -> None:
        model = BradleyTerry()
        model.update("a", "b", 0.0)
        model.update("b", "c", 0.0)
        state = model.export_state()
        assert state["kind"] == "bradley-terry"
        assert state["players"] == ["a", "b", "c"]
        assert state["kills"] == [[0, 1], [1, 2]]
        assert state["fit_kills"] == 2
        assert len(state["fit"]) == 3

    def test_refuses_other_kinds_and_broken_states(self) -> None:
        with pytest.raises(ValueError, match="state kind"):
            BradleyTerry().import_state(Elo().export_state())
        model = BradleyTerry()
        model.update("a", "b", 0.0)
        state = model.export_state()
        for broken in (
            {**state, "kills": [[0, 5]]},
            {**state, "kills": [[1, 1]]},
            {**state, "fit_kills": 2},
            {**state, "players": ["a", "a"]},
            {**state, "fit": [0.0, 0.0, 0.0]},
        ):
            with pytest.raises(ValueError, match="state"):
                BradleyTerry().import_state(copy.deepcopy(broken))

    def test_self_kill_ignored_and_first_seen_order(self) -> None:
        model = BradleyTerry()
        model.update("c", "c", 0.0)
        model.update("b", "a", 0.0)
        model.update("a", "c", 0.0)
        assert model.players() == ["b", "a", "c"]
        assert model.export_state()["kills"] == [[0, 1], [1, 2]]


KILL_LISTS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=60).map(
    lambda ks: [(a, b) for a, b in ks if a != b]
)


class TestProperties:
    """Hypothesis invariants over arbitrary kill lists among five players."""

    @settings(max_examples=60, deadline=None)
    @given(kills=KILL_LISTS)
    def test_predictions_are_complementary_probabilities(self, kills: Kills) -> None:
        model = fitted(kills)
        for a in range(5):
            for b in range(5):
                p = model.predict(f"p{a}", f"p{b}", 0.0)
                assert 0.0 < p < 1.0
                assert p + model.predict(f"p{b}", f"p{a}", 0.0) == pytest.approx(1.0, abs=1e-12)

    @settings(max_examples=60, deadline=None)
    @given(kills=KILL_LISTS, extra=st.tuples(st.integers(0, 4), st.integers(0, 4)))
    def test_a_win_never_lowers_the_winner(self, kills: Kills, extra: tuple[int, int]) -> None:
        a, b = extra
        if a == b:
            b = (a + 1) % 5
        before = fitted(kills)
        after = fitted([*kills, (a, b)])
        assert after.rating(f"p{a}") >= before.rating(f"p{a}") - 1e-6
        assert after.rating(f"p{b}") <= before.rating(f"p{b}") + 1e-6

    @settings(max_examples=40, deadline=None)
    @given(kills=KILL_LISTS, perm=st.permutations(range(5)))
    def test_relabelling_players_changes_nothing(self, kills: Kills, perm: list[int]) -> None:
        model = fitted(kills)
        relabelled = fitted([(perm[a], perm[b]) for a, b in kills])
        for i in range(5):
            assert relabelled.rating(f"p{perm[i]}") == pytest.approx(model.rating(f"p{i}"), abs=1e-6)

    @settings(max_examples=40, deadline=None)
    @given(kills=KILL_LISTS)
    def test_reversing_every_kill_mirrors_the_ratings(self, kills: Kills) -> None:
        model = fitted(kills)
        mirrored = fitted([(b, a) for a, b in kills])
        for i in range(5):
            assert mirrored.rating(f"p{i}") - 1500.0 == pytest.approx(
                1500.0 - model.rating(f"p{i}"), abs=1e-6
            )
            assert mirrored.standard_error(f"p{i}") == pytest.approx(model.standard_error(f"p{i}"), rel=1e-6)
