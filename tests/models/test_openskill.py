"""OpenSkill (Weng-Lin Plackett-Luce, seed 003): the model gives the ``openskill`` package's numbers."""

from __future__ import annotations

import math
import random

import pytest
from openskill.models import PlackettLuce, PlackettLuceRating

from arenad.errors import ConfigError
from arenad.models.openskill import OpenSkill, OpenSkillParams

MU0 = 25.0
SIGMA0 = 25.0 / 3.0
BETA = SIGMA0 / 2.0
TAU = SIGMA0 / 100.0


def at(ratings: dict[str, tuple[float, float]]) -> OpenSkill:
    m = OpenSkill()
    m.import_state({**m.export_state(), "players": {p: list(r) for p, r in ratings.items()}})
    return m


def package_rate(
    ratings: list[tuple[float, float]], ranks: list[int] | None = None
) -> list[tuple[float, float]]:
    """The package itself, on fresh rating objects: one team of one per player."""
    model = PlackettLuce()
    teams = [[model.rating(mu=mu, sigma=sigma)] for mu, sigma in ratings]
    out = model.rate(teams, ranks=[float(r) for r in ranks]) if ranks is not None else model.rate(teams)
    return [(r.mu, r.sigma) for (r,) in out]


class TestKills:
    """A kill is the package's two-team match [[attacker], [victim]]."""

    def test_first_kill(self) -> None:
        m = OpenSkill()
        m.update("a", "b", 0.0)
        assert [m.state_of("a"), m.state_of("b")] == package_rate([(MU0, SIGMA0), (MU0, SIGMA0)])

    def test_rated_players(self) -> None:
        m = at({"a": (31.2, 2.5), "b": (22.0, 6.1)})
        m.update("b", "a", 0.0)  # the upset
        assert [m.state_of("b"), m.state_of("a")] == package_rate([(22.0, 6.1), (31.2, 2.5)])
        assert m.rating("b") > 22.0
        assert m.rating("a") < 31.2

    def test_a_stream_of_kills(self) -> None:
        rng = random.Random(4)
        m = OpenSkill()
        state: dict[str, tuple[float, float]] = {}
        for _ in range(300):
            a, b = rng.sample("abcdef", 2)
            m.update(a, b, 0.0)
            new = package_rate([state.get(a, (MU0, SIGMA0)), state.get(b, (MU0, SIGMA0))])
            state[a], state[b] = new
        assert {p: m.state_of(p) for p in m.players()} == state

    def test_kill_is_the_two_player_match(self) -> None:
        kill, match = at({"a": (27.0, 3.0), "b": (24.0, 5.0)}), at({"a": (27.0, 3.0), "b": (24.0, 5.0)})
        kill.update("a", "b", 0.0)
        match.update_match([["a"], ["b"]], 0.0)
        assert kill.state_of("a") == pytest.approx(match.state_of("a"), rel=1e-15)
        assert kill.state_of("b") == pytest.approx(match.state_of("b"), rel=1e-15)

    def test_self_kill_ignored(self) -> None:
        m = OpenSkill()
        m.update("a", "a", 0.0)
        assert m.players() == []


class TestMatches:
    """``update_match`` is the package's ``rate`` with ranks = the group index."""

    @pytest.mark.parametrize(
        ("ratings", "groups"),
        [
            ([(MU0, SIGMA0)] * 3, [[0], [1], [2]]),
            ([(30.0, 2.0), (24.0, 6.0), (26.0, 1.5), (20.0, 7.0)], [[0], [1, 2], [3]]),
            ([(25.0, 8.0), (30.0, 2.0), (21.0, 5.0), (28.0, 3.0), (18.0, 6.0)], [[0, 1, 2], [3], [4]]),
            ([(20.0 + k, 1.0 + k / 2) for k in range(8)], [[7], [6], [5, 4], [3], [2, 1], [0]]),
            ([(22.0, 4.0), (27.0, 3.0)], [[0, 1]]),
        ],
    )
    def test_against_the_package(self, ratings: list[tuple[float, float]], groups: list[list[int]]) -> None:
        names = [f"p{i}" for i in range(len(ratings))]
        m = at(dict(zip(names, ratings, strict=True)))
        m.update_match([[names[i] for i in g] for g in groups], 0.0)
        order = [i for g in groups for i in g]
        ranks = [k for k, g in enumerate(groups) for _ in g]
        want = package_rate([ratings[i] for i in order], ranks)
        assert [m.state_of(names[i]) for i in order] == want

    def test_tied_players_move_together(self) -> None:
        m = OpenSkill()
        m.update_match([["a"], ["b", "c"], ["d"]], 0.0)
        assert m.rating("b") == m.rating("c")
        assert m.rating("a") > m.rating("b") > m.rating("d")

    def test_players_first_seen_in_placement_order(self) -> None:
        m = OpenSkill()
        m.update_match([["c"], ["a", "d"], ["b"]], 0.0)
        assert m.players() == ["c", "a", "d", "b"]

    def test_one_player_changes_nothing(self) -> None:
        m = OpenSkill()
        m.update_match([["alone"]], 0.0)
        assert m.players() == []

    def test_player_placed_twice_refused(self) -> None:
        with pytest.raises(ValueError, match="'a' is placed twice"):
            OpenSkill().update_match([["a"], ["a"]], 0.0)

    def test_reused_inputs_do_not_leak_between_matches(self) -> None:
        # The model reuses its input rating objects: a big match, then a small one, then the
        # big one again must each see only their own players.
        m = OpenSkill()
        m.update_match([[f"x{i}"] for i in range(6)], 0.0)
        m.update_match([["y0"], ["y1"]], 0.0)
        m.update_match([["z0"], ["z1"], ["z2"]], 0.0)
        assert [m.state_of(f"z{i}") for i in range(3)] == package_rate([(MU0, SIGMA0)] * 3, [0, 1, 2])


class TestPredict:
    """P(a beats b) is the Plackett-Luce probability the package's update works with."""

    def test_recovered_from_the_package_update(self) -> None:
        # For two players the package moves the winner by σ_a²/c · (1 − p_a), σ_a² and c after
        # adding τ² (Algorithm 4, Ω_i). So p_a can be read off the package's own update.
        (mu_a, sig_a), (mu_b, sig_b) = (28.0, 3.0), (23.5, 5.5)
        (new_a, _), _ = package_rate([(mu_a, sig_a), (mu_b, sig_b)])
        var_a = sig_a**2 + TAU**2
        c = math.sqrt(var_a + sig_b**2 + TAU**2 + 2 * BETA**2)
        p_from_package = 1.0 - (new_a - mu_a) * c / var_a
        m = at({"a": (mu_a, sig_a), "b": (mu_b, sig_b)})
        assert m.predict("a", "b", 0.0) == pytest.approx(p_from_package, rel=1e-12)
        assert m.predict("a", "b", 0.0) == pytest.approx(1 / (1 + math.exp(-(mu_a - mu_b) / c)), rel=1e-15)

    def test_complementary_and_prior(self) -> None:
        m = at({"a": (40.0, 1.0), "b": (10.0, 1.0)})
        assert m.predict("a", "b", 0.0) + m.predict("b", "a", 0.0) == pytest.approx(1.0, abs=1e-15)
        assert OpenSkill().predict("x", "y", 0.0) == 0.5

    def test_extreme_gap_does_not_overflow(self) -> None:
        m = at({"a": (1e6, 1.0), "b": (-1e6, 1.0)})
        assert m.predict("a", "b", 0.0) == 1.0
        assert m.predict("b", "a", 0.0) == 0.0


class TestDisplayAndState:
    """Display is the package's ordinal μ − 3σ; state is plain values."""

    def test_display_is_the_ordinal(self) -> None:
        m = OpenSkill()
        m.update("a", "b", 0.0)
        mu, sigma = m.state_of("a")
        assert m.display("a") == PlackettLuceRating(mu, sigma).ordinal()
        assert m.display("nobody") == pytest.approx(MU0 - 3 * SIGMA0)

    def test_export_is_plain(self) -> None:
        m = OpenSkill()
        m.update("a", "b", 0.0)
        state = m.export_state()
        assert state["kind"] == "openskill"
        assert state["players"]["a"] == list(m.state_of("a"))
        assert all(type(x) is float for v in state["players"].values() for x in v)

    def test_params_reach_the_package(self) -> None:
        p = OpenSkillParams(mu0=30.0, sigma0=5.0, beta=2.0, tau=0.2, kappa=1e-3)
        m = OpenSkill(p)
        assert (m.package.mu, m.package.sigma, m.package.beta, m.package.tau, m.package.kappa) == (
            30.0,
            5.0,
            2.0,
            0.2,
            1e-3,
        )
        assert m.rating("nobody") == 30.0

    def test_bad_params(self) -> None:
        with pytest.raises(ConfigError, match=r"models\.openskill\.beta = 0\.0"):
            OpenSkillParams(beta=0.0)
        with pytest.raises(ConfigError, match=r"models\.openskill\.tau = -1\.0"):
            OpenSkillParams(tau=-1.0)
