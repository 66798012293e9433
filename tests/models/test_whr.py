"""Whole-History Rating (seed 001 §3): Thomas, the Newton steps, the fit, predictions, state."""

from __future__ import annotations

import copy
import itertools
import json
import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.errors import ConfigError
from arenad.models.base import is_offline
from arenad.models.bradley_terry import BradleyTerry, BradleyTerryParams
from arenad.models.elo import Elo
from arenad.models.whr import SEED_W2, HistoryGraph, WholeHistoryRating, WHRParams, thomas

ELO = 400.0 / math.log(10.0)  # natural units -> Elo points
DAY = 86400.0
FloatArray = npt.NDArray[np.float64]
Kills = list[tuple[int, int, int]]  # attacker, victim, day


def random_history(players: int, kills: int, days: int, seed: int) -> Kills:
    """Kills among ``players`` with a hidden ladder (lower index stronger), on random days."""
    rng = np.random.default_rng(seed)
    out: Kills = []
    for _ in range(kills):
        a, b = (int(x) for x in rng.choice(players, 2, replace=False))
        if rng.random() >= 1.0 / (1.0 + math.exp(0.3 * (a - b))):
            a, b = b, a
        out.append((a, b, int(rng.integers(0, days))))
    return sorted(out, key=lambda k: k[2])


def model_of(kills: Kills, params: WHRParams | None = None) -> WholeHistoryRating:
    model = WholeHistoryRating(params)
    for i, (a, b, day) in enumerate(kills):
        model.update(f"p{a}", f"p{b}", day * DAY + i % 1000)
    model.fit()
    return model


def graph_of(kills: Kills, players: int, w2: float = SEED_W2, virtual: float = 1.0) -> HistoryGraph:
    att, vic, day = zip(*kills, strict=True)
    return HistoryGraph(att, vic, day, players, w2=w2 / ELO**2, virtual_games=virtual)


def node_map(graph: HistoryGraph, players: int) -> dict[tuple[int, int], int]:
    """(player, day) -> node, read from the graph's public layout."""
    out = {}
    for p in range(players):
        for node in graph.nodes_of(p).tolist():
            out[(p, int(graph.node_day[node]))] = node
    return out


def dense_problem(
    theta: FloatArray,
    kills: Kills,
    graph: HistoryGraph,
    players: int,
    *,
    w2: float = SEED_W2,
    virtual: float = 1.0,
) -> tuple[float, FloatArray, FloatArray]:
    """Log posterior, gradient and negative Hessian, assembled densely kill by kill in the test."""
    nodes = node_map(graph, players)
    size = len(nodes)
    value = 0.0
    g = np.zeros(size)
    h = np.zeros((size, size))
    for a, b, day in kills:
        u, v = nodes[(a, day)], nodes[(b, day)]
        p = 1.0 / (1.0 + math.exp(-(theta[u] - theta[v])))
        value += math.log(p)
        g[u] += 1.0 - p
        g[v] -= 1.0 - p
        for x, y, sign in [(u, u, 1), (v, v, 1), (u, v, -1), (v, u, -1)]:
            h[x, y] += sign * p * (1.0 - p)
    w2_natural = w2 / ELO**2
    for p_ in range(players):
        days = sorted(d for q, d in nodes if q == p_)
        first = nodes[(p_, days[0])]
        s = 1.0 / (1.0 + math.exp(-theta[first]))  # a virtual win and a virtual loss vs rating 0
        value += virtual * (math.log(s) + math.log(1.0 - s))
        g[first] += virtual * (1.0 - 2.0 * s)
        h[first, first] += 2.0 * virtual * s * (1.0 - s)
        for d0, d1 in itertools.pairwise(days):
            x, y = nodes[(p_, d0)], nodes[(p_, d1)]
            c = 1.0 / (w2_natural * (d1 - d0))
            value -= 0.5 * c * (theta[y] - theta[x]) ** 2
            g[y] -= c * (theta[y] - theta[x])
            g[x] += c * (theta[y] - theta[x])
            h[x, x] += c
            h[y, y] += c
            h[x, y] -= c
            h[y, x] -= c
    return value, g, h


HISTORY = random_history(8, 400, 80, seed=3)  # ~100 kills per player on ~57 of 80 days: gaps


class TestParams:
    """Parameters validate themselves and name the key; the default w² is seed 001 §3.1's."""

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("w2", 0.0),
            ("virtual_games", 0.0),
            ("day_seconds", -1.0),
            ("refit_every", 0),
            ("solver", "lbfgs"),
        ],
    )
    def test_rejects(self, field: str, value: object) -> None:
        with pytest.raises(ConfigError, match=f"models.whr.{field}"):
            WHRParams(**{field: value})  # type: ignore[arg-type]

    def test_default_w2_is_the_seed_value_in_elo(self) -> None:
        assert WHRParams().w2 == pytest.approx(0.002 * ELO**2)
        assert WHRParams().w2 == pytest.approx(60.36, abs=0.01)

    def test_offline_and_named(self) -> None:
        model = WholeHistoryRating()
        assert is_offline(model)
        assert model.name == "whr"


class TestThomas:
    """The tridiagonal solver agrees with numpy.linalg.solve."""

    @settings(max_examples=200, deadline=None)
    @given(
        data=st.integers(1, 30).flatmap(
            lambda n: st.tuples(
                st.lists(st.floats(-5, 5), min_size=n - 1, max_size=n - 1),
                st.lists(st.floats(-5, 5), min_size=n - 1, max_size=n - 1),
                st.lists(st.floats(0.1, 5), min_size=n, max_size=n),
                st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n),
                st.lists(st.floats(-100, 100), min_size=n, max_size=n),
            )
        )
    )
    def test_matches_dense_solve(
        self, data: tuple[list[float], list[float], list[float], list[float], list[float]]
    ) -> None:
        lower, upper, margin, sign, rhs = data
        n = len(rhs)
        # Strictly diagonally dominant rows, of either sign.
        diag = [
            s * (m + (abs(lower[i - 1]) if i else 0.0) + (abs(upper[i]) if i < n - 1 else 0.0))
            for i, (m, s) in enumerate(zip(margin, sign, strict=True))
        ]
        dense = np.diag(diag) + np.diag(lower, -1) + np.diag(upper, 1)
        np.testing.assert_allclose(
            thomas(lower, diag, upper, rhs), np.linalg.solve(dense, rhs), rtol=1e-9, atol=1e-9
        )

    def test_size_mismatch(self) -> None:
        with pytest.raises(ValueError, match="sizes"):
            thomas([1.0], [2.0, 2.0, 2.0], [1.0, 1.0], [0.0, 0.0, 0.0])


class TestHistoryGraph:
    """The layered node layout, the per-player blocks and the posterior's derivatives."""

    def test_layout(self) -> None:
        graph = graph_of(HISTORY, 8)
        seen = {(a, d) for a, _, d in HISTORY} | {(b, d) for _, b, d in HISTORY}
        assert graph.n_nodes == len(seen)
        nodes = node_map(graph, 8)
        assert set(nodes) == seen
        assert sorted(nodes.values()) == list(range(graph.n_nodes))
        for p in range(8):
            days = graph.node_day[graph.nodes_of(p)]
            assert list(days) == sorted({d for q, d in seen if q == p})
        # Layer 0 holds each player's first day.
        assert sorted(int(graph.node_player[n]) for n in range(8)) == list(range(8))

    def test_block_solve_and_inverse_diagonal_match_dense(self) -> None:
        graph = graph_of(HISTORY, 8)
        rng = np.random.default_rng(1)
        diag = graph.link_to_prev + graph.link_to_next + rng.uniform(0.1, 3.0, graph.n_nodes)
        rhs = rng.normal(size=graph.n_nodes)
        x = graph.block_solve(diag, rhs)
        var = graph.block_inverse_diagonal(diag)
        for p in range(8):
            nodes = graph.nodes_of(p)
            link = graph.link_to_prev[nodes[1:]]
            block = np.diag(diag[nodes]) - np.diag(link, 1) - np.diag(link, -1)
            np.testing.assert_allclose(x[nodes], np.linalg.solve(block, rhs[nodes]), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(var[nodes], np.diag(np.linalg.inv(block)), rtol=1e-9)

    def test_log_posterior_and_gradient_match_the_dense_assembly(self) -> None:
        graph = graph_of(HISTORY, 8)
        rng = np.random.default_rng(2)
        one, two = rng.normal(0, 0.5, graph.n_nodes), rng.normal(0, 0.5, graph.n_nodes)
        v1, g1, h1 = dense_problem(one, HISTORY, graph, 8)
        v2, _, _ = dense_problem(two, HISTORY, graph, 8)
        # The model drops constants (−log 4 per virtual draw is kept, the Gaussian's is not).
        assert graph.log_posterior(one) - graph.log_posterior(two) == pytest.approx(v1 - v2, rel=1e-10)
        g, w, diag = graph.gradient(one)
        np.testing.assert_allclose(g, g1, atol=1e-9)
        np.testing.assert_allclose(diag, np.diag(h1), rtol=1e-12)
        x = rng.normal(size=graph.n_nodes)
        np.testing.assert_allclose(graph.hessian_vector(w, diag, x), h1 @ x, rtol=1e-9, atol=1e-9)

    def test_gradient_matches_finite_differences(self) -> None:
        graph = graph_of(HISTORY, 8)
        theta = np.random.default_rng(4).normal(0, 0.5, graph.n_nodes)
        g, _, _ = graph.gradient(theta)
        h = 1e-5
        for node in range(0, graph.n_nodes, 7):
            e = np.zeros(graph.n_nodes)
            e[node] = h
            slope = (graph.log_posterior(theta + e) - graph.log_posterior(theta - e)) / (2 * h)
            assert slope == pytest.approx(g[node], abs=1e-5)


class TestNewtonSteps:
    """Coulom's per-player step and the joint step equal dense Newton steps computed with numpy."""

    def test_player_step_is_the_dense_block_newton_step(self) -> None:
        graph = graph_of(HISTORY, 8)
        theta = np.random.default_rng(5).normal(0, 0.5, graph.n_nodes)
        _, g, h = dense_problem(theta, HISTORY, graph, 8)
        for p in range(8):
            nodes = graph.nodes_of(p)
            assert len(nodes) > 3  # a real tridiagonal system, not a scalar
            dense_step = np.linalg.solve(h[np.ix_(nodes, nodes)], g[nodes])
            np.testing.assert_allclose(graph.player_step(theta, p), dense_step, rtol=1e-9, atol=1e-12)

    def test_joint_step_is_the_dense_newton_step(self) -> None:
        graph = graph_of(HISTORY, 8)
        theta = np.random.default_rng(6).normal(0, 0.5, graph.n_nodes)
        _, g, h = dense_problem(theta, HISTORY, graph, 8)
        _, delta = graph.newton_direction(theta, rtol=1e-13)
        np.testing.assert_allclose(delta, np.linalg.solve(h, g), rtol=1e-7, atol=1e-9)


def trajectory_theta(model: WholeHistoryRating, graph: HistoryGraph, players: int) -> FloatArray:
    """The fitted ratings as the graph's node vector (natural units)."""
    theta = np.zeros(graph.n_nodes)
    for p in range(players):
        history = model.history(f"p{p}")
        theta[graph.nodes_of(p)] = [(r - 1500.0) / ELO for _, r, _ in history]
    return theta


class TestFit:
    """The MAP: stationary, the same from both solvers, tracking change, and BT in the limit w² → 0."""

    def test_gradient_is_zero_at_the_fit(self) -> None:
        model = model_of(HISTORY)
        graph = graph_of(HISTORY, 8)
        theta = trajectory_theta(model, graph, 8)
        _, g, _ = dense_problem(theta, HISTORY, graph, 8)
        assert np.abs(g).max() < 1e-6

    def test_sigma_is_coulom_s_block_inverse(self) -> None:
        model = model_of(HISTORY)
        graph = graph_of(HISTORY, 8)
        _, _, h = dense_problem(trajectory_theta(model, graph, 8), HISTORY, graph, 8)
        for p in range(8):
            nodes = graph.nodes_of(p)
            sigma = ELO * np.sqrt(np.diag(np.linalg.inv(h[np.ix_(nodes, nodes)])))
            np.testing.assert_allclose([s for _, _, s in model.history(f"p{p}")], sigma, rtol=1e-6)

    def test_coulom_cycles_reach_the_same_map(self) -> None:
        newton = model_of(HISTORY)
        coulom = model_of(HISTORY, WHRParams(solver="coulom"))
        for p in range(8):
            a = np.array(newton.history(f"p{p}"))
            b = np.array(coulom.history(f"p{p}"))
            np.testing.assert_allclose(a[:, 1], b[:, 1], atol=1e-4)
            np.testing.assert_allclose(a[:, 2], b[:, 2], atol=1e-4)

    def test_stops_where_floating_point_stops_improving(self) -> None:
        """An unreachable tolerance: both solvers still end, at the optimum, before max_iterations."""
        reference = model_of(HISTORY)
        assert reference.iterations < 15
        for solver in ("newton", "coulom"):
            strict = model_of(HISTORY, WHRParams(tolerance=1e-300, solver=solver))
            assert strict.iterations < 100
            for p in range(8):
                ours = [r for _, r, _ in strict.history(f"p{p}")]
                assert ours == pytest.approx([r for _, r, _ in reference.history(f"p{p}")], abs=1e-4)

    def test_tracks_a_mid_way_skill_change_that_bradley_terry_averages(self) -> None:
        """p0 plays at −250 for 30 days, then at +250; the field stays put (mean +20)."""
        rng = np.random.default_rng(4)
        field = np.linspace(-300.0, 300.0, 16)
        whr, bt = WholeHistoryRating(), BradleyTerry()
        for day in range(60):
            skill = field.copy()
            skill[0] = -250.0 if day < 30 else 250.0
            for k in range(80):
                a, b = (int(x) for x in rng.choice(16, 2, replace=False))
                if rng.random() >= 1.0 / (1.0 + 10.0 ** ((skill[b] - skill[a]) / 400.0)):
                    a, b = b, a
                for model in (whr, bt):
                    model.update(f"p{a}", f"p{b}", day * DAY + 600.0 * k)

        def vs_field(model: WholeHistoryRating | BradleyTerry, rating: float) -> float:
            return rating - float(np.mean([model.rating(f"p{i}") for i in range(1, 16)]))

        by_day = {d: r for d, r, _ in whr.history("p0")}
        early, late = vs_field(whr, by_day[10]), vs_field(whr, by_day[50])
        static = vs_field(bt, bt.rating("p0"))
        truth_early, truth_late = -250.0 - 20.0, 250.0 - 20.0
        assert late - early > 250.0  # the true jump is 500
        assert abs(late - truth_late) < 100.0
        assert abs(early - truth_early) < 150.0
        # BT's single number sits between the two levels, far from today's skill.
        assert abs(static - truth_late) > abs(late - truth_late) + 100.0
        assert early < static < late

    def test_without_drift_it_is_bradley_terry(self) -> None:
        """w² → 0 collapses each trajectory to one rating: BT's, up to the anchor.

        The first-day virtual draw acts near 0 like a Gaussian prior of precision
        virtual_games/2 (module docstring), so BT gets that prior. The two anchors still differ
        away from 0, so the overall level is compared after centring.
        """
        kills = random_history(12, 3000, 20, seed=9)
        virtual = 0.01
        whr = model_of(kills, WHRParams(w2=1e-3, virtual_games=virtual))
        bt = BradleyTerry(BradleyTerryParams(prior_sd=math.sqrt(2.0 / virtual) * ELO))
        for a, b, _ in kills:
            bt.update(f"p{a}", f"p{b}", 0.0)
        for p in range(12):
            levels = [r for _, r, _ in whr.history(f"p{p}")]
            assert len(levels) > 10
            assert max(levels) - min(levels) < 0.01  # flat trajectories
        diff = np.array([whr.rating(f"p{p}") - bt.rating(f"p{p}") for p in range(12)])
        spread = np.ptp([bt.rating(f"p{p}") for p in range(12)])
        assert spread > 500.0  # a real ladder, so agreement is not trivial
        assert np.abs(diff - diff.mean()).max() < 0.1

    def test_more_drift_moves_trajectories_more(self) -> None:
        def wiggle(w2: float) -> float:
            model = model_of(HISTORY, WHRParams(w2=w2))
            return max(float(np.ptp([r for _, r, _ in model.history(f"p{p}")])) for p in range(8))

        assert wiggle(1.0) < wiggle(SEED_W2) < wiggle(1000.0)

    def test_more_games_less_sigma_and_the_unknown_player(self) -> None:
        model = model_of(HISTORY)
        sigma = [model.history(f"p{p}")[-1][2] for p in range(8)]
        assert all(0.0 < s < 246.0 for s in sigma)
        unknown_sigma = math.sqrt(2.0) * ELO  # one virtual draw: precision 1/2 (natural)
        assert model.display("nobody") == pytest.approx(1500.0 - 2.0 * unknown_sigma)
        assert model.rating("nobody") == 1500.0


class TestPredict:
    """A prediction uses each player's rating on the latest day ≤ t; display is r − 2σ."""

    def test_day_lookup(self) -> None:
        model = model_of(HISTORY)
        a, b = model.history("p0"), model.history("p1")

        def at(history: list[tuple[int, float, float]], day: int) -> float:
            earlier = [r for d, r, _ in history if d <= day]
            return earlier[-1] if earlier else history[0][1]

        for day in [-3, 0, 4, 11, 17, 24, 400]:
            diff = at(a, day) - at(b, day)
            p = model.predict("p0", "p1", day * DAY + 5.0)
            assert p == pytest.approx(1.0 / (1.0 + 10.0 ** (-diff / 400.0)), rel=1e-12)
        assert model.rating("p0") == a[-1][1]
        assert model.display("p0") == pytest.approx(a[-1][1] - 2.0 * a[-1][2])

    def test_unknown_players_and_bad_times(self) -> None:
        model = model_of(HISTORY)
        assert model.predict("x", "y", 0.0) == 0.5
        assert model.predict("p0", "x", 3.0 * DAY) > 0.5  # p0 is the strongest
        with pytest.raises(ValueError, match="not finite"):
            model.predict("p0", "p1", math.nan)
        with pytest.raises(ValueError, match="not finite"):
            model.update("p0", "p1", math.inf)

    def test_self_kill_ignored_and_first_seen_order(self) -> None:
        model = WholeHistoryRating()
        model.update("c", "c", 0.0)
        model.update("b", "a", 0.0)
        model.update("a", "c", 10.0)
        assert model.players() == ["b", "a", "c"]
        assert model.export_state()["kills"] == [[0, 1, 0.0], [1, 2, 10.0]]


class TestRefitRule:
    """As Bradley–Terry: predict refits on doubling, then every ``refit_every`` kills."""

    def test_refit_points(self) -> None:
        model = WholeHistoryRating(WHRParams(refit_every=50))
        fitted_at = []
        for n, (a, b, day) in enumerate(HISTORY[:300]):
            before = model.fits
            model.predict(f"p{a}", f"p{b}", day * DAY)
            if model.fits != before:
                fitted_at.append(n)
            model.update(f"p{a}", f"p{b}", day * DAY)
        assert fitted_at == [1, 2, 4, 8, 16, 32, 64, 114, 164, 214, 264]
        rating = model.rating("p0")  # a read refits at once
        assert model.fits == len(fitted_at) + 1
        model.update("p0", "p1", 30 * DAY)
        assert model.rating("p0") > rating


class TestState:
    """Export, import and continue exactly; refuse foreign or broken states."""

    def test_json_round_trip_continues_exactly(self) -> None:
        params = WHRParams(refit_every=40)
        original = WholeHistoryRating(params)
        for a, b, day in HISTORY[:300]:
            original.predict(f"p{a}", f"p{b}", day * DAY)
            original.update(f"p{a}", f"p{b}", day * DAY)
        restored = WholeHistoryRating(params)
        restored.import_state(json.loads(json.dumps(original.export_state())))
        assert [restored.history(p) for p in restored.players()] == [
            original.history(p) for p in original.players()
        ]
        for a, b, day in HISTORY[300:]:
            assert restored.predict(f"p{a}", f"p{b}", day * DAY) == original.predict(
                f"p{a}", f"p{b}", day * DAY
            )
            original.update(f"p{a}", f"p{b}", day * DAY)
            restored.update(f"p{a}", f"p{b}", day * DAY)
        assert [restored.display(p) for p in restored.players()] == [
            original.display(p) for p in original.players()
        ]

    def test_refuses_other_kinds_and_broken_states(self) -> None:
        with pytest.raises(ValueError, match="state kind"):
            WholeHistoryRating().import_state(Elo().export_state())
        model = WholeHistoryRating()
        model.update("a", "b", 0.0)
        state = model.export_state()
        for broken in (
            {**state, "kills": [[0, 5, 0.0]]},
            {**state, "kills": [[0, 1, math.nan]]},
            {**state, "fit_kills": 3},
            {**state, "fit": [[], []]},
        ):
            with pytest.raises(ValueError, match="state"):
                WholeHistoryRating().import_state(copy.deepcopy(broken))


STREAMS = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 4), st.floats(0.0, 3 * DAY, allow_nan=False)), max_size=60
)


class TestProperties:
    """Hypothesis invariants over arbitrary streams among five players."""

    @settings(max_examples=50, deadline=None)
    @given(events=STREAMS)
    def test_predictions_are_complementary_probabilities(self, events: list[tuple[int, int, float]]) -> None:
        model = WholeHistoryRating()
        t = 0.0
        for a, b, dt in events:
            t += dt
            model.update(f"p{a}", f"p{b}", t)
        for a in range(5):
            for b in range(5):
                p = model.predict(f"p{a}", f"p{b}", t)
                assert 0.0 < p < 1.0
                assert p + model.predict(f"p{b}", f"p{a}", t) == pytest.approx(1.0, abs=1e-12)
        for player in model.players():
            assert all(math.isfinite(r) and s > 0.0 for _, r, s in model.history(player))
