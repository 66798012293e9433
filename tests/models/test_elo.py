"""Logistic Elo (seed 002): hand-computed updates, symmetry, and the dynamic K schedule."""

from __future__ import annotations

import pytest

from arenad.errors import ConfigError
from arenad.models.elo import DynamicElo, Elo, EloParams, KSchedule


def elo_at(ratings: dict[str, float], k: float = 24.0) -> Elo:
    m = Elo(EloParams(k=k))
    m.import_state({**m.export_state(), "ratings": ratings})
    return m


class TestExpectedScore:
    """E_A = 1 / (1 + 10^((R_B − R_A)/400)); complementary predictions."""

    def test_equal_ratings(self) -> None:
        assert Elo().predict("a", "b", 0.0) == 0.5

    def test_hand_computed(self) -> None:
        m = elo_at({"a": 1600.0, "b": 1400.0})
        assert m.predict("a", "b", 0.0) == pytest.approx(1 / (1 + 10 ** (-200 / 400)))
        assert m.predict("a", "b", 0.0) == pytest.approx(0.7597469, abs=1e-7)

    def test_predictions_sum_to_one(self) -> None:
        m = elo_at({"a": 1723.5, "b": 1311.0})
        assert m.predict("a", "b", 0.0) + m.predict("b", "a", 0.0) == pytest.approx(1.0, abs=1e-15)

    def test_extreme_gap_does_not_overflow(self) -> None:
        m = elo_at({"a": 1e6, "b": -1e6})
        assert m.predict("a", "b", 0.0) == 1.0
        assert m.predict("b", "a", 0.0) == 0.0


class TestFixedK:
    """R' = R ± K(1 − E) with K = 24: zero-sum, ±K/2 between equals."""

    def test_win_between_equals_moves_half_k(self) -> None:
        m = Elo()
        m.update("a", "b", 0.0)
        assert (m.rating("a"), m.rating("b")) == (1512.0, 1488.0)

    def test_win_and_loss_between_equals_are_symmetric(self) -> None:
        win, loss = Elo(), Elo()
        win.update("a", "b", 0.0)
        loss.update("b", "a", 0.0)
        assert win.rating("a") - 1500.0 == 1500.0 - loss.rating("a") == 12.0

    def test_hand_computed_upset_and_favourite(self) -> None:
        favourite = elo_at({"a": 1600.0, "b": 1400.0})
        favourite.update("a", "b", 0.0)
        step = 24 * (1 - 0.7597469266479578)
        assert favourite.rating("a") == pytest.approx(1600.0 + step)
        assert favourite.rating("b") == pytest.approx(1400.0 - step)
        upset = elo_at({"a": 1600.0, "b": 1400.0})
        upset.update("b", "a", 0.0)
        assert upset.rating("b") == pytest.approx(1400.0 + 24 * 0.7597469266479578)

    def test_zero_sum(self) -> None:
        m = Elo()
        for a, b in [("a", "b"), ("b", "c"), ("c", "a"), ("a", "c"), ("d", "a")]:
            m.update(a, b, 0.0)
        assert sum(m.rating(p) for p in m.players()) == pytest.approx(1500.0 * 4)

    def test_display_is_the_rating(self) -> None:
        m = Elo()
        m.update("a", "b", 0.0)
        assert m.display("a") == m.rating("a") == 1512.0
        assert m.display("nobody") == 1500.0

    def test_self_kill_ignored(self) -> None:
        m = Elo()
        m.update("a", "a", 0.0)
        assert m.players() == []


class TestKSchedule:
    """K = 40 for the first 30 events, then 20, and 10 at 2400 or above."""

    @pytest.mark.parametrize(
        ("events", "rating", "k"),
        [(0, 1500.0, 40.0), (29, 2600.0, 40.0), (30, 1500.0, 20.0), (30, 2399.9, 20.0), (30, 2400.0, 10.0)],
    )
    def test_schedule(self, events: int, rating: float, k: float) -> None:
        assert KSchedule()(events, rating) == k

    def test_new_players_move_by_forty(self) -> None:
        m = DynamicElo()
        m.update("a", "b", 0.0)
        assert (m.rating("a"), m.rating("b")) == (1520.0, 1480.0)
        assert m.events("a") == m.events("b") == 1

    def test_established_players_move_by_twenty(self) -> None:
        m = DynamicElo()
        for _ in range(15):  # 30 events each, even ratings
            m.update("a", "b", 0.0)
            m.update("b", "a", 0.0)
        ra, rb = m.rating("a"), m.rating("b")
        e = m.predict("a", "b", 0.0)
        m.update("a", "b", 0.0)
        assert m.rating("a") == pytest.approx(ra + 20 * (1 - e))
        assert m.rating("b") == pytest.approx(rb - 20 * (1 - e))

    def test_each_side_uses_its_own_k(self) -> None:
        m = DynamicElo()
        for i in range(30):
            m.update("vet", f"x{i}", 0.0)  # 30 events for "vet"
        r_vet = m.rating("vet")
        assert 1500.0 < r_vet < 2400.0
        e = m.predict("new", "vet", 0.0)
        m.update("new", "vet", 0.0)
        assert m.rating("new") == pytest.approx(1500.0 + 40 * (1 - e))
        assert m.rating("vet") == pytest.approx(r_vet - 20 * (1 - e))

    def test_high_rated_player_uses_k_high(self) -> None:
        m = DynamicElo(KSchedule(new_events=0, high_rating=1500.0))
        m.update("a", "b", 0.0)  # both at 1500 = high_rating: K = 10
        assert (m.rating("a"), m.rating("b")) == (1505.0, 1495.0)


class TestParams:
    """Invalid parameters are refused with the key and the value."""

    def test_bad_k(self) -> None:
        with pytest.raises(ConfigError, match=r"models\.elo\.k = 0\.0"):
            EloParams(k=0.0)

    def test_bad_schedule(self) -> None:
        with pytest.raises(ConfigError, match=r"models\.elo-dynamic\.new_events = -1"):
            KSchedule(new_events=-1)
