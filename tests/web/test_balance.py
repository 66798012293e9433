"""Team balance (arenad.web.balance): optimal where exhaustive, never worse than greedy above."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.web.balance import (
    EXHAUSTIVE_LIMIT,
    EXHAUSTIVE_LIMIT_TWO,
    MAX_PLAYERS,
    _exhaustive_general,
    balance,
    exhaustive,
    greedy,
    improve,
    split_count,
    spread_of,
    team_sizes,
    win_probability,
)

RATING = st.floats(min_value=0.0, max_value=3000.0, allow_nan=False, allow_infinity=False)


def brute_force(ratings: list[float], k: int) -> float:
    """The smallest spread over every assignment of players to labelled teams."""
    n = len(ratings)
    want = sorted(team_sizes(n, k))
    best = math.inf
    for labels in itertools.product(range(k), repeat=n):
        teams = [[i for i in range(n) if labels[i] == t] for t in range(k)]
        if sorted(len(t) for t in teams) != want:
            continue
        best = min(best, spread_of(ratings, teams))
    return best


def check_partition(teams: object, n: int, k: int) -> None:
    assert isinstance(teams, (list, tuple))
    assert len(teams) == k
    placed = sorted(i for t in teams for i in t)
    assert placed == list(range(n)), "every player placed exactly once"
    sizes = [len(t) for t in teams]
    assert max(sizes) - min(sizes) <= 1


class TestExhaustive:
    """Small splits are optimal: the same spread as trying every labelled assignment."""

    @settings(max_examples=60, deadline=None)
    @given(st.data())
    def test_equals_brute_force(self, data: st.DataObject) -> None:
        k = data.draw(st.integers(2, 3))
        n = data.draw(st.integers(k, 8 if k == 2 else 7))
        ratings = data.draw(st.lists(RATING, min_size=n, max_size=n))
        teams = exhaustive(ratings, k)
        check_partition(teams, n, k)
        assert spread_of(ratings, teams) == pytest.approx(brute_force(ratings, k), abs=1e-9)

    def test_split_count_is_what_it_enumerates(self) -> None:
        # 2 teams of 3 from 6: C(6,3)/2 = 10; 3 teams of 2: 6!/(2!^3 3!) = 15.
        assert split_count(6, 2) == 10
        assert split_count(6, 3) == 15
        assert split_count(5, 2) == 10  # sizes 3 and 2 are not interchangeable
        assert split_count(16, 2) == 6435 <= EXHAUSTIVE_LIMIT_TWO < split_count(17, 2)
        assert split_count(9, 3) <= EXHAUSTIVE_LIMIT < split_count(10, 3)

    def test_small_requests_use_it(self) -> None:
        assert balance([1.0, 2.0, 3.0, 4.0], 2).method == "exhaustive"
        assert balance([float(i) for i in range(16)], 2).method == "exhaustive"
        assert balance([float(i) for i in range(17)], 2).method == "heuristic"
        assert balance([float(i) for i in range(10)], 3).method == "heuristic"

    @settings(max_examples=40, deadline=None)
    @given(st.lists(RATING, min_size=2, max_size=9))
    def test_two_team_fast_path_equals_the_recursion(self, ratings: list[float]) -> None:
        fast = exhaustive(ratings, 2)
        slow = _exhaustive_general(ratings, 2)
        check_partition(fast, len(ratings), 2)
        assert spread_of(ratings, fast) == pytest.approx(spread_of(ratings, slow), abs=1e-9)


class TestHeuristic:
    """Above the limit: every player placed once, sizes within one, never worse than greedy."""

    @settings(max_examples=80, deadline=None)
    @given(st.data())
    def test_never_worse_than_greedy(self, data: st.DataObject) -> None:
        k = data.draw(st.integers(2, 8))
        n = data.draw(st.integers(max(k, 2), MAX_PLAYERS))
        ratings = data.draw(st.lists(RATING, min_size=n, max_size=n))
        start = greedy(ratings, k)
        check_partition(start, n, k)
        better = improve(ratings, start)
        check_partition(better, n, k)
        assert spread_of(ratings, better) <= spread_of(ratings, start) + 1e-9

    @settings(max_examples=40, deadline=None)
    @given(st.data())
    def test_balance_places_everyone(self, data: st.DataObject) -> None:
        k = data.draw(st.integers(2, 8))
        n = data.draw(st.integers(max(k, 2), MAX_PLAYERS))
        ratings = data.draw(st.lists(RATING, min_size=n, max_size=n))
        split = balance(ratings, k)
        check_partition(split.teams, n, k)
        assert list(split.means) == sorted(split.means, reverse=True), "strongest team first"
        assert split.spread == pytest.approx(split.means[0] - split.means[-1])

    def test_it_finds_the_obvious_split(self) -> None:
        ratings = [100.0, 100.0, 0.0, 0.0] * 5  # 20 players: heuristic
        split = balance(ratings, 2)
        assert split.method == "heuristic"
        assert split.spread == 0.0


class TestArguments:
    """Errors name the argument."""

    @pytest.mark.parametrize(
        ("ratings", "k", "word"),
        [
            ([1.0], 2, "players"),
            ([1.0] * 65, 2, "players"),
            ([1.0, 2.0], 1, "teams"),
            ([1.0, 2.0], 3, "teams"),
        ],
    )
    def test_refused(self, ratings: list[float], k: int, word: str) -> None:
        with pytest.raises(ValueError, match=word):
            balance(ratings, k)

    def test_probability_is_the_prediction_of_the_gap(self) -> None:
        split = balance([10.0, 0.0, 0.0, 0.0], 2)
        assert win_probability(split, lambda gap: 0.5 + gap / 100) == pytest.approx(0.5 + 5.0 / 100)
