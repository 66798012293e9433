"""Evaluation metrics: hand-computed values, edge cases and Hypothesis invariants (§10.3)."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import arenad.evaluation
from arenad.evaluation.metrics import (
    accuracy,
    auc,
    brier,
    calibration_curve,
    convergence_events,
    ece,
    log_loss,
    orient,
    response_delay,
    spearman,
    tier_changes_per_1k,
    tier_share_error,
)

# Any probability, including 0, 1 and subnormals: for the bounds.
PROBS = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=60)
# Multiples of 1/1024: 1 − p is exact for these, so a symmetry check compares the same numbers,
# not two roundings. The coarse grid also makes ties common.
GRID_PROBS = st.lists(st.integers(0, 1024).map(lambda k: k / 1024), min_size=1, max_size=60)


@st.composite
def labelled(draw: st.DrawFn, probs: st.SearchStrategy[list[float]] = PROBS) -> tuple[list[float], list[int]]:
    p = draw(probs)
    y = draw(st.lists(st.integers(0, 1), min_size=len(p), max_size=len(p)))
    return p, y


class TestLogLoss:
    """Log loss is the mean negative log-likelihood, finite even for a confident miss."""

    def test_half_everywhere_is_ln_2(self) -> None:
        assert log_loss([0.5] * 4, [1, 0, 1, 1]) == pytest.approx(math.log(2))

    def test_hand_example(self) -> None:
        # -(ln 0.8 + ln(1 - 0.4)) / 2
        assert log_loss([0.8, 0.4], [1, 0]) == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2)

    def test_confident_miss_is_clipped_at_1e_15(self) -> None:
        assert log_loss([0.0], [1]) == pytest.approx(-math.log(1e-15))
        assert log_loss([1.0], [0]) == pytest.approx(-math.log(1e-15))

    def test_perfect_prediction_is_near_zero(self) -> None:
        assert log_loss([1.0, 0.0], [1, 0]) == pytest.approx(0.0, abs=1e-12)

    @given(labelled())
    def test_is_non_negative(self, case: tuple[list[float], list[int]]) -> None:
        assert log_loss(*case) >= 0.0


class TestBrier:
    """Brier is the mean squared error of the probability, between 0 (perfect) and 1."""

    def test_perfect_is_zero(self) -> None:
        assert brier([1.0, 0.0, 1.0], [1, 0, 1]) == 0.0

    def test_hand_example(self) -> None:
        # ((0.8 - 1)² + (0.4 - 0)² + (0.5 - 1)²) / 3 = (0.04 + 0.16 + 0.25) / 3
        assert brier([0.8, 0.4, 0.5], [1, 0, 1]) == pytest.approx(0.15)

    def test_completely_wrong_is_one(self) -> None:
        assert brier([0.0, 1.0], [1, 0]) == 1.0

    @given(labelled())
    def test_is_within_unit_interval(self, case: tuple[list[float], list[int]]) -> None:
        assert 0.0 <= brier(*case) <= 1.0


class TestAccuracy:
    """Accuracy thresholds at 0.5; a prediction of exactly 0.5 is half right."""

    def test_hand_example(self) -> None:
        # right, right, wrong, half
        assert accuracy([0.9, 0.2, 0.3, 0.5], [1, 0, 1, 0]) == pytest.approx(2.5 / 4)

    def test_all_ties_is_one_half(self) -> None:
        assert accuracy([0.5, 0.5, 0.5], [1, 1, 0]) == 0.5


class TestAuc:
    """AUC is the Mann–Whitney probability that a positive outranks a negative, ties half."""

    def test_perfect_ranking_is_one(self) -> None:
        assert auc([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0]) == 1.0

    def test_reversed_ranking_is_zero(self) -> None:
        assert auc([0.1, 0.3, 0.8, 0.9], [1, 1, 0, 0]) == 0.0

    def test_all_ties_is_one_half(self) -> None:
        assert auc([0.7] * 6, [1, 0, 1, 0, 0, 1]) == 0.5

    def test_three_by_three_hand_example(self) -> None:
        # Positives 0.9, 0.6, 0.4 against negatives 0.7, 0.4, 0.1: 0.9 beats all three (3), 0.6 beats
        # two (2), 0.4 ties one and beats one (1.5). That is 6.5 of 9 pairs.
        assert auc([0.9, 0.6, 0.4, 0.7, 0.4, 0.1], [1, 1, 1, 0, 0, 0]) == pytest.approx(6.5 / 9)

    def test_order_of_the_events_does_not_matter(self) -> None:
        assert auc([0.4, 0.1, 0.9, 0.4, 0.7, 0.6], [0, 0, 1, 1, 0, 1]) == pytest.approx(6.5 / 9)

    def test_one_class_is_undefined(self) -> None:
        assert math.isnan(auc([0.2, 0.9], [1, 1]))
        assert math.isnan(auc([0.2, 0.9], [0, 0]))

    @given(labelled())
    def test_is_within_unit_interval(self, case: tuple[list[float], list[int]]) -> None:
        value = auc(*case)
        assert math.isnan(value) or 0.0 <= value <= 1.0

    @given(labelled(GRID_PROBS))
    def test_complement_of_scores_complements_auc(self, case: tuple[list[float], list[int]]) -> None:
        p, y = case
        value = auc(p, y)
        flipped = auc([1.0 - x for x in p], y)
        assert (math.isnan(value) and math.isnan(flipped)) or flipped == pytest.approx(1.0 - value)


class TestCalibration:
    """ECE and the calibration curve use equal-width bins weighted by count."""

    def test_perfectly_calibrated_construction_has_zero_ece(self) -> None:
        # Bin [0.2, 0.3): p = 0.25 and 1 kill in 4. Bin [0.7, 0.8): p = 0.75 and 3 kills in 4.
        p = [0.25] * 4 + [0.75] * 4
        y = [1, 0, 0, 0, 1, 1, 1, 0]  # 1 of the first 4, 3 of the last 4
        assert ece(p, y) == 0.0

    def test_single_bin_miscalibration(self) -> None:
        assert ece([0.8] * 10, [1] * 5 + [0] * 5) == pytest.approx(0.3)

    def test_two_bin_miscalibration_is_count_weighted(self) -> None:
        # 4 events at p = 0.2 with rate 0.25 (off by 0.05), 6 at p = 0.9 with rate 1 (off by 0.1):
        # 0.4 · 0.05 + 0.6 · 0.1 = 0.08.
        p = [0.2] * 4 + [0.9] * 6
        y = [1, 0, 0, 0] + [1] * 6
        assert ece(p, y) == pytest.approx(0.08)

    def test_one_bin_is_the_gap_between_mean_p_and_mean_y(self) -> None:
        assert ece([0.1, 0.9, 0.6], [1, 1, 0], bins=1) == pytest.approx(abs(1.6 / 3 - 2 / 3))

    def test_curve_keeps_non_empty_bins_only(self) -> None:
        curve = calibration_curve([0.05, 0.15, 0.12, 1.0, 0.95], [0, 1, 0, 1, 1], bins=10)
        np.testing.assert_allclose(curve.mean_p, [0.05, 0.135, 0.975])
        np.testing.assert_allclose(curve.mean_y, [0.0, 0.5, 1.0])
        assert curve.events.tolist() == [1, 2, 2]

    def test_p_of_one_lands_in_the_last_bin(self) -> None:
        assert calibration_curve([1.0], [1], bins=4).mean_p.tolist() == [1.0]

    @given(labelled())
    def test_ece_is_within_unit_interval_and_counts_add_up(self, case: tuple[list[float], list[int]]) -> None:
        p, y = case
        assert 0.0 <= ece(p, y) <= 1.0
        assert int(calibration_curve(p, y).events.sum()) == len(p)

    def test_rejects_zero_bins(self) -> None:
        with pytest.raises(ValueError, match="bins must be at least 1, got 0"):
            ece([0.5], [1], bins=0)


class TestSpearman:
    """Spearman is the Pearson correlation of average ranks."""

    def test_monotone_is_one_and_reversed_is_minus_one(self) -> None:
        assert spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)
        assert spearman([1, 2, 3, 4], [9, 4, 1, 0]) == pytest.approx(-1.0)

    def test_hand_example_without_ties(self) -> None:
        # 1 − 6·Σd² / (n(n² − 1)) with d = (0, −1, 1, 0): 1 − 12/60.
        assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)

    def test_hand_example_with_ties(self) -> None:
        # Ranks of y: (1, 2, 3.5, 5, 3.5). Centred: x (−2, −1, 0, 1, 2), y (−2, −1, 0.5, 2, 0.5).
        # Σxy = 8, Σx² = 10, Σy² = 9.5, so rho = 8 / √95.
        assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))

    def test_constant_or_single_is_undefined(self) -> None:
        assert math.isnan(spearman([1, 2, 3], [4, 4, 4]))
        assert math.isnan(spearman([1], [2]))

    def test_rejects_unequal_lengths(self) -> None:
        with pytest.raises(ValueError, match=r"got \(3,\) and \(2,\)"):
            spearman([1, 2, 3], [1, 2])


class TestOrientation:
    """Symmetric evaluation: each kill is shown as (p, 1) or (1 − p, 0), seeded."""

    def test_is_deterministic_and_uses_both_orientations(self) -> None:
        p = np.linspace(0.05, 0.95, 200)
        shown, y = orient(p, seed=3)
        again, y_again = orient(p, seed=3)
        assert shown.tolist() == again.tolist()
        assert y.tolist() == y_again.tolist()
        assert 60 < int(y.sum()) < 140
        np.testing.assert_allclose(np.where(y == 1.0, shown, 1.0 - shown), p)

    def test_other_seed_other_flips(self) -> None:
        p = [0.7] * 64
        assert orient(p, seed=1)[1].tolist() != orient(p, seed=2)[1].tolist()

    def test_a_constant_model_gets_auc_one_half(self) -> None:
        shown, y = orient([0.5] * 50, seed=1)
        assert auc(shown, y) == 0.5

    @given(GRID_PROBS, st.integers(0, 2**32))
    def test_per_event_metrics_ignore_the_orientation(self, p: list[float], seed: int) -> None:
        shown, y = orient(p, seed)
        ones = [1] * len(p)
        assert log_loss(shown, y) == log_loss(p, ones)
        assert brier(shown, y) == brier(p, ones)
        assert accuracy(shown, y) == accuracy(p, ones)

    @given(GRID_PROBS, st.integers(0, 2**32))
    def test_swapping_every_attacker_and_victim_keeps_every_metric(self, p: list[float], seed: int) -> None:
        # The opposite orientation of every kill is (1 − shown, 1 − y): swapping the labels the
        # same way for every event must not change a metric.
        shown, y = orient(p, seed)
        other, y_other = 1.0 - shown, 1.0 - y
        for metric in (log_loss, brier, accuracy):
            assert metric(other, y_other) == metric(shown, y)
        a, b = auc(shown, y), auc(other, y_other)
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b)


class TestInputs:
    """Malformed input is refused, naming the argument and the value; empty input is nan."""

    def test_probability_out_of_range(self) -> None:
        with pytest.raises(ValueError, match=r"p\[1\] = 1\.5 is not a probability"):
            brier([0.5, 1.5], [1, 1])

    def test_nan_probability(self) -> None:
        with pytest.raises(ValueError, match=r"p\[0\] = nan"):
            log_loss([math.nan], [1])

    def test_label_not_binary(self) -> None:
        with pytest.raises(ValueError, match=r"y\[0\] = 2\.0 is not an outcome"):
            auc([0.5], [2])

    def test_shape_mismatch(self) -> None:
        with pytest.raises(ValueError, match=r"y must have shape \(2,\) like p, got shape \(3,\)"):
            accuracy([0.5, 0.5], [1, 0, 1])

    @pytest.mark.parametrize("metric", [log_loss, brier, accuracy, auc, ece])
    def test_empty_is_nan(self, metric: Callable[[list[float], list[int]], float]) -> None:
        assert math.isnan(metric([], []))


class TestScenarioMetrics:
    """The §10.3 scenario measures: convergence, response delay, tier stability and shares."""

    def test_convergence_is_the_first_checkpoint_at_the_threshold(self) -> None:
        rhos = [(1000, 0.5), (2000, 0.89), (3000, 0.9), (4000, 0.85), (5000, 0.95)]
        assert convergence_events(rhos) == 3000
        assert convergence_events(rhos, threshold=0.95) == 5000

    def test_convergence_never_reached_or_nan(self) -> None:
        assert convergence_events([(1000, 0.5), (2000, math.nan)]) is None
        assert convergence_events([]) is None

    def test_convergence_rejects_unordered_checkpoints(self) -> None:
        with pytest.raises(ValueError, match="1000 comes after 2000"):
            convergence_events([(2000, 0.1), (1000, 0.95)])

    def test_response_delay_counts_events_to_half_the_jump(self) -> None:
        # From 1000 towards 1400: half way is 1200, first reached after the 3rd event.
        assert response_delay([1050, 1120, 1200, 1300], before=1000, after=1400) == 3
        assert response_delay([1050, 1199.9], before=1000, after=1400) is None

    def test_response_delay_after_a_drop(self) -> None:
        assert response_delay([1900, 1760, 1740], before=2000, after=1500) == 3

    def test_response_delay_needs_a_jump(self) -> None:
        with pytest.raises(ValueError, match="before=1000, after=1000"):
            response_delay([1000], before=1000, after=1000)

    def test_tier_changes_per_1k(self) -> None:
        assert tier_changes_per_1k(7, 2000) == pytest.approx(3.5)
        assert math.isnan(tier_changes_per_1k(0, 0))
        with pytest.raises(ValueError, match="changes must be non-negative, got -1"):
            tier_changes_per_1k(-1, 10)

    def test_tier_share_error_is_the_largest_gap(self) -> None:
        assert tier_share_error([0.2, 0.5, 0.3], [0.3, 0.4, 0.3]) == pytest.approx(0.1)
        assert tier_share_error([0.25, 0.75], [0.5, 0.5]) == pytest.approx(0.25)
        with pytest.raises(ValueError, match="got 2 and 3"):
            tier_share_error([0.5, 0.5], [0.3, 0.3, 0.4])


class TestPurity:
    """arenad.evaluation is pure like the core (STYLE.md §1); plots.py is its one file-writing adapter."""

    # Pure standard-library helpers and numpy; from arenad only the pure packages (the rating core,
    # the models, the evaluation itself) — never the daemon, the CLI or a feed.
    ALLOWED: ClassVar[set[str]] = {
        "__future__",
        "bisect",
        "collections",
        "dataclasses",
        "itertools",
        "math",
        "typing",
        "numpy",
    }
    ARENAD: ClassVar[tuple[str, ...]] = ("arenad.evaluation", "arenad.core", "arenad.models")
    # plots.py draws with matplotlib (optional extra, imported lazily) and saves PNG files.
    ADAPTER: ClassVar[dict[str, set[str]]] = {"plots.py": {"importlib", "pathlib", "matplotlib"}}

    def test_imports(self) -> None:
        folder = Path(arenad.evaluation.__file__).parent
        for path in folder.glob("*.py"):
            allowed = self.ALLOWED | self.ADAPTER.get(path.name, set()) | {"arenad"}
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = {node.module.split(".")[0]}
                    if node.module.startswith("arenad"):
                        assert node.module.startswith(self.ARENAD), (path.name, node.module)
                else:
                    continue
                assert names <= allowed, (path.name, names - allowed)

    def test_matplotlib_is_imported_lazily(self) -> None:
        # Importing arenad.evaluation (and its plots module) must not need matplotlib.
        tree = ast.parse((Path(arenad.evaluation.__file__).parent / "plots.py").read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        modules = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        modules |= {n.module or "" for n in top if isinstance(n, ast.ImportFrom)}
        assert not any(m.startswith("matplotlib") for m in modules), modules
