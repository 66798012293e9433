"""ADR's own live quality without a daemon: the one scoring rule (``shadows.score``) is the offline
metrics on the oriented predictions, and without shadows the primary is scored from the engine's
own ring of predictions (``RingScores``), at most once per ``max_age``, nothing per event."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import QUALITY_WINDOW, Engine
from arenad.daemon.config import ModelsSettings
from arenad.daemon.shadows import ECE_BINS, NO_SCORES, ModelSet, RingScores, Scores, oriented, score
from arenad.evaluation import metrics
from arenad.models import BUILTIN_MODELS

probabilities = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def by_hand(predictions: Sequence[float], first: int) -> Scores:
    """Prediction number m = first + k shown as (1 - p, 0) when m is odd, then the offline metrics."""
    shown = [1.0 - p if (first + k) % 2 else p for k, p in enumerate(predictions)]
    y = [0.0 if (first + k) % 2 else 1.0 for k in range(len(predictions))]
    return Scores(
        metrics.log_loss(shown, y), metrics.brier(shown, y), metrics.ece(shown, y), metrics.auc(shown, y)
    )


def same(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(
        (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-12, abs=1e-15)
        for x, y in zip(a, b, strict=True)
    )


def kills(engine: Engine, n: int, seed: int = 1, players: int = 12, t0: float = 1000.0) -> None:
    """``n`` kills among ``players``, 2 s apart: repeats inside the 60 s cooldown happen."""
    rng = random.Random(seed)
    for k in range(n):
        a, b = rng.sample(range(players), 2)
        engine.feed(f"p{a}", f"p{b}", t0 + 2.0 * k)


class Ring:
    """A stand-in for ``Engine.recent_predictions`` that counts its calls."""

    def __init__(self, predictions: Sequence[float] = (), count: int | None = None) -> None:
        self.set(predictions, count)
        self.calls = 0

    def set(self, predictions: Sequence[float], count: int | None = None) -> None:
        self.p = np.asarray(predictions, dtype=np.float64)
        self.count = len(predictions) if count is None else count

    def __call__(self) -> tuple[npt.NDArray[np.float64], int]:
        self.calls += 1
        return self.p.copy(), self.count


class TestScore:
    """One scoring rule for every window: the offline metrics of the oriented predictions."""

    @settings(max_examples=300, deadline=None)
    @given(st.lists(probabilities, max_size=80), st.integers(min_value=0, max_value=10**9))
    def test_equals_the_offline_metrics_of_the_oriented_predictions(
        self, predictions: list[float], first: int
    ) -> None:
        got = score(np.asarray(predictions, dtype=np.float64), first)
        assert isinstance(got, Scores)
        assert same(got, by_hand(predictions, first) if predictions else NO_SCORES)

    def test_the_numbering_picks_which_predictions_are_reversed(self) -> None:
        p = np.array([0.9, 0.8, 0.3])
        shown, y = oriented(p, 0)
        assert list(y) == [1.0, 0.0, 1.0] and list(shown) == pytest.approx([0.9, 0.2, 0.3])
        shown, y = oriented(p, 7)
        assert list(y) == [0.0, 1.0, 0.0] and list(shown) == pytest.approx([0.1, 0.8, 0.7])
        # Reversing every other prediction gives AUC both classes (all shown as kills: none).
        assert score(p, 0).auc == 1.0 and math.isnan(metrics.auc(p, np.ones(3)))
        # The parity of the first number mirrors the whole picture to (1 - p, 1 - y), which
        # leaves every score as it is: only the alternation matters.
        assert same(score(p, 0), score(p, 7))

    def test_ece_uses_ten_equal_width_bins_weighted_by_count(self) -> None:
        assert ECE_BINS == 10
        got = score(np.array([0.75, 0.75, 0.71, 0.79]), 0)
        # Shown: bin [0.7, 0.8) holds 0.75 and 0.71 (m = 0, 2: outcome 1), bin [0.2, 0.3) holds
        # 0.25 and 0.21 (m = 1, 3 reversed: outcome 0).
        expected = (2 * abs(0.73 - 1.0) + 2 * abs(0.23 - 0.0)) / 4
        assert got.ece == pytest.approx(expected)
        assert got.ece == pytest.approx(metrics.ece([0.75, 0.25, 0.71, 0.21], [1, 0, 1, 0], bins=10))

    def test_nothing_to_score_is_nan(self) -> None:
        assert all(math.isnan(x) for x in score(np.zeros(0), 5))


class TestRingScores:
    """The primary's figures from the engine's ring: its newest ``size`` predictions, numbered by
    the engine's count, read at most once per ``max_age``."""

    def test_the_newest_predictions_numbered_by_the_count(self) -> None:
        ring = Ring([0.6, 0.7, 0.2, 0.9, 0.55], count=12)  # predictions 7..11 of 12
        scores = RingScores(ring, size=3)
        assert same(scores.scores(), by_hand([0.2, 0.9, 0.55], 9))
        assert (scores.count, scores.filled) == (12, 3)

    def test_scores_of_a_real_engine_equal_the_offline_metrics_of_its_ring(self) -> None:
        engine = Engine()
        kills(engine, 3 * QUALITY_WINDOW // 2 + 1, seed=3)
        p, count = engine.recent_predictions()
        assert count == 3 * QUALITY_WINDOW // 2 + 1 and len(p) == QUALITY_WINDOW
        assert engine.filtered > 0  # cooldown repeats are predicted and in the ring too
        for size in (2, 500, QUALITY_WINDOW, 10_000):
            scores = RingScores(engine.recent_predictions, size)
            kept = list(p[-size:])
            assert same(scores.scores(), by_hand(kept, count - len(kept))), size
            assert scores.filled == min(size, QUALITY_WINDOW)

    def test_read_at_most_once_per_max_age(self) -> None:
        ring = Ring([0.7, 0.4])
        scores = RingScores(ring, size=10)
        first = scores.scores(max_age=3600.0)  # the first reading is never held back
        ring.set([0.7, 0.4, 0.9])
        assert scores.scores(max_age=3600.0) is first and ring.calls == 1
        assert scores.count == 2
        again = scores.scores(max_age=0.0)
        assert ring.calls == 2 and scores.count == 3
        assert same(again, by_hand([0.7, 0.4, 0.9], 0))

    def test_the_same_predictions_are_not_scored_again(self) -> None:
        ring = Ring([0.7, 0.4, 0.1])
        scores = RingScores(ring, size=10)
        first = scores.scores()
        assert scores.scores() is first and ring.calls == 2  # read again, nothing new

    def test_figures_are_the_same_object_until_new_predictions(self) -> None:
        ring = Ring([0.7, 0.4, 0.1])
        scores = RingScores(ring, size=10)
        first = scores.figures("adr", max_age=0.0)
        assert (first.model, first.role, first.predictions, first.window, first.scored) == (
            "adr",
            "primary",
            3,
            3,
            3,
        )
        assert scores.figures("adr", max_age=0.0) is first
        ring.set([0.7, 0.4, 0.1, 0.8])
        assert scores.figures("adr", max_age=3600.0) is first  # not read again yet
        again = scores.figures("adr", max_age=0.0)
        assert again.predictions == 4 and same(
            (again.log_loss, again.brier, again.ece, again.auc), by_hand([0.7, 0.4, 0.1, 0.8], 0)
        )

    def test_a_replaced_engine_is_scored_from_its_own_ring(self) -> None:
        # A restart or a recompute: a new engine whose ring and count start again.
        ring = Ring([0.6, 0.7, 0.8, 0.9])
        scores = RingScores(ring, size=10)
        scores.scores()
        ring.set([0.3])
        assert same(scores.scores(), by_hand([0.3], 0)) and scores.count == 1
        ring.set([])
        assert all(math.isnan(x) for x in scores.scores()) and (scores.count, scores.filled) == (0, 0)

    def test_a_window_under_two_is_refused(self) -> None:
        with pytest.raises(ValueError, match="size must be at least 2, got 1"):
            RingScores(Ring(), 1)


class TestModelSetWithoutShadows:
    """Without shadows the engine task scores nothing; the primary's figures come from the ring."""

    def test_the_primary_is_scored_from_the_ring(self) -> None:
        engine = Engine()
        kills(engine, 700, seed=4)
        models = ModelSet(ModelsSettings(window=300), BUILTIN_MODELS, recent=engine.recent_predictions)
        assert not models.scoring  # nothing per event in the engine task
        (figures,) = models.figures()
        p, count = engine.recent_predictions()
        assert (figures.model, figures.role, figures.predictions, figures.window) == (
            "adr",
            "primary",
            700,
            300,
        )
        assert figures.scored == 700 and figures.matches == 0 and figures.failed is None
        assert same(
            (figures.log_loss, figures.brier, figures.ece, figures.auc), by_hand(list(p[-300:]), count - 300)
        )
        assert models.primary.count == 0  # the record-by-record window stays unused
        assert models.figures()[0].as_dict()["ece"] == figures.ece

    def test_with_shadows_the_ring_is_not_used(self) -> None:
        # Every model is scored on the same predictions, record by record (test_shadows.py).
        engine = Engine()
        kills(engine, 50)
        models = ModelSet(
            ModelsSettings(shadows=("elo",), window=30), BUILTIN_MODELS, recent=engine.recent_predictions
        )
        assert models.scoring and models.ring is None
        assert [(f.model, f.predictions) for f in models.figures()] == [("adr", 0), ("elo", 0)]

    def test_without_a_ring_nothing_is_scored(self) -> None:
        assert ModelSet(ModelsSettings(), BUILTIN_MODELS).figures() == []
