"""§10.6 for any model: the paper's Elo figure, ADR's bounded steps, and the fallback for unknown models."""

from __future__ import annotations

import math
from typing import Any

import pytest

from arenad.core.params import ADRParams
from arenad.evaluation.returning import openskill_points, returning_toy, trueskill_points
from arenad.models.adr import ADRModel
from arenad.models.elo import Elo, EloParams, logistic
from arenad.models.glicko2 import Glicko2
from arenad.models.trueskill import TrueSkill, cdf


class TestPaperDefinition:
    """The paper's "standardized increase" is the rise on the model's own scale: Elo reproduces it."""

    def test_elo_k32_against_a_held_opponent_is_the_papers_1166_94(self) -> None:
        result = returning_toy(Elo(EloParams(k=32.0)), fixed_opponent=True)
        assert result is not None
        assert (result.initial, result.opponent) == (1000.0, 2000.0)
        assert round(result.increase, 2) == 1166.94
        assert result.increase_gap == pytest.approx(result.increase)

    def test_an_opponent_that_learns_too_gives_less(self) -> None:
        held = returning_toy(Elo(EloParams(k=32.0)), fixed_opponent=True)
        free = returning_toy(Elo(EloParams(k=32.0)))
        assert held is not None and free is not None
        assert free.increase < held.increase
        assert free.ratings[0] == held.ratings[0]  # the first kill is the same either way


class TestADR:
    """ADR is seeded through its engine; its visible rating never moves by more than delta_max at a kill."""

    def test_bounded_steady_rise(self) -> None:
        result = returning_toy(ADRModel(ADRParams(farm_damping=0.0)))
        assert result is not None
        assert result.seeding == "adr"
        assert (result.initial, result.opponent) == (1000.0, 2000.0)
        steps = result.steps
        assert len(steps) == 50
        assert all(0 < s <= ADRParams().delta_max for s in steps)
        assert 500 < result.increase < 1000
        # §8.2/§8.3 damp the first kill against the full-size updates that follow the returning phase.
        assert steps[0] < 0.5 * max(steps)

    def test_fifty_upsets_in_a_row_are_not_a_farm(self) -> None:
        """The 50 kills are one run on one victim, but upsets: farm_damping weighs a repeat by
        how expected it was, so the returning player rises nearly as far as undamped."""
        damped = returning_toy(ADRModel())
        plain = returning_toy(ADRModel(ADRParams(farm_damping=0.0)))
        assert damped is not None and plain is not None
        assert ADRParams().farm_damping > 0
        assert 0.9 * plain.increase < damped.increase < plain.increase

    def test_the_opponent_cannot_be_held(self) -> None:
        assert returning_toy(ADRModel(), fixed_opponent=True) is None


class TestSeeding:
    """Known state layouts are seeded on one public scale; the comparable numbers are scale-free."""

    def test_trueskill_scale_matches_elo_slope(self) -> None:
        k = trueskill_points(25.0 / 6.0)
        assert k == pytest.approx(0.02126, abs=1e-5)
        beta = 25.0 / 6.0
        # Two established players 50 Elo points apart: both models give nearly the same probability.
        p_ts = cdf(50.0 * k / math.sqrt(2.0) / beta)
        p_elo = logistic(50.0 * math.log(10.0) / 400.0)
        assert p_ts == pytest.approx(p_elo, abs=0.002)

    def test_openskill_scale_matches_elo_slope(self) -> None:
        k = openskill_points(25.0 / 6.0)
        c = math.sqrt(2.0) * 25.0 / 6.0
        assert logistic(50.0 * k / c) == pytest.approx(logistic(50.0 * math.log(10.0) / 400.0), abs=1e-12)

    def test_trueskill_and_glicko2_are_seeded(self) -> None:
        ts = returning_toy(TrueSkill())
        g2 = returning_toy(Glicko2())
        assert ts is not None and g2 is not None
        assert ts.seeding == g2.seeding == "state"
        assert ts.initial == pytest.approx(25.0)
        assert ts.opponent == pytest.approx(25.0 + 1000.0 * trueskill_points(25.0 / 6.0))
        assert (g2.initial, g2.opponent) == pytest.approx((1000.0, 2000.0))
        # The background has the same spread on every scale, so the sd figures compare.
        assert ts.spread / trueskill_points(25.0 / 6.0) == pytest.approx(g2.spread, rel=1e-6)

    def test_unknown_model_learns_from_history(self) -> None:
        class Opaque(Elo):
            """An Elo whose state layout the toy does not know."""

            def export_state(self) -> dict[str, Any]:
                return {"kind": "opaque"}

        result = returning_toy(Opaque())
        assert result is not None
        assert result.seeding == "history"
        assert result.opponent - result.initial > 300  # history made the opponent much stronger
        assert result.increase > 0 and math.isfinite(result.increase_gap) and result.increase_z > 0
        assert returning_toy(Opaque(), fixed_opponent=True) is None

    def test_arguments_are_checked(self) -> None:
        with pytest.raises(ValueError, match="kills must be at least 1, got 0"):
            returning_toy(Elo(), kills=0)
        with pytest.raises(ValueError, match="absence_days"):
            returning_toy(Elo(), absence_days=-1.0)
