"""``Engine.plan_recalibration`` (no temporaries the size of the population, the §6.3 quantiles
selected in place) gives the same plan, bit for bit, as ``plan_recalibration_reference`` (plain
numpy: clip, boolean mask, ``np.quantile``), whatever the ratings, ties, active set and bounds."""

from __future__ import annotations

import math
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import (
    _FSUM_BELOW,
    Engine,
    RecalibrationPlan,
    _inverted_cdf_index,
    _inverted_cdf_positions,
)
from arenad.core.params import ADRParams

PLAYERS = _FSUM_BELOW + 904  # above the exact-sum size, where the fast path runs


def _engine(anchor: bool) -> Engine:
    eng = Engine(ADRParams(anchor=anchor, p_min=50))
    for i in range(PLAYERS):
        eng.apply(f"p{i}", f"p{(i + 1) % PLAYERS}", 1_000.0 + i)
    return eng


ENGINES = {anchor: _engine(anchor) for anchor in (True, False)}


def _bits(plan: RecalibrationPlan) -> tuple[object, ...]:
    """Every field, floats by their bit pattern (so -0.0 != 0.0 and NaNs compare)."""

    def b(x: float) -> bytes:
        return np.float64(x).tobytes()

    bounds = None if plan.bounds is None else tuple(b(x) for x in plan.bounds)
    fields = (plan.now, plan.offset, plan.r_lo, plan.r_hi, plan.sum_r_all, plan.sum_r_active, plan.sum_sigma)
    return (*(b(x) for x in fields), bounds)


@st.composite
def populations(draw: st.DrawFn) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray, int]:
    anchor = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = draw(st.sampled_from(["normal", "ties", "extremes", "equal"]))
    if shape == "normal":
        r = rng.normal(0.0, draw(st.sampled_from([1.0, 150.0, 900.0])), PLAYERS)
    elif shape == "ties":
        r = rng.integers(-5, 6, PLAYERS).astype(np.float64) * 100.0
    elif shape == "extremes":  # some beyond the bounds the anchor shift gives: the clamped sums
        r = rng.normal(0.0, 200.0, PLAYERS)
        r[rng.integers(0, PLAYERS, 20)] = rng.choice([-1e5, 1e5], 20)
    else:
        r = np.full(PLAYERS, draw(st.floats(-500.0, 500.0)))
    share = draw(st.sampled_from([0.0, 0.001, 0.01, 0.2, 0.7, 1.0]))
    active = (rng.random(PLAYERS) < share).astype(np.uint8)
    sigma = rng.uniform(30.0, 350.0, PLAYERS)
    calibrations = draw(st.sampled_from([0, 3]))
    return anchor, r, active, sigma, calibrations


@settings(max_examples=120, deadline=None)
@given(populations(), st.booleans())
def test_the_plan_equals_the_reference_bit_for_bit(
    pop: tuple[bool, np.ndarray, np.ndarray, np.ndarray, int], counts_agree: bool
) -> None:
    anchor, r, active, sigma, calibrations = pop
    eng = ENGINES[anchor]
    eng._r[:] = array("d", r.tolist())
    eng._sigma[:] = array("d", sigma.tolist())
    eng._active[:] = active.tobytes()
    # The engine keeps the active count incrementally; a count out of step takes the plain path.
    count = int(active.sum())
    eng._n_active = count if counts_agree or count < 2 else count - 1
    eng.calibrations = calibrations
    now = 5_000.0
    fast = eng.plan_recalibration(now)
    assert _bits(fast) == _bits(eng.plan_recalibration_reference(now))
    # The kept buffer is reused: a second plan of the same state is the same plan.
    assert _bits(eng.plan_recalibration(now)) == _bits(fast)


def test_the_fast_path_runs_and_calibrates() -> None:
    """The case the property test is about does take the fast path (not only the fallbacks)."""
    eng = ENGINES[True]
    rng = np.random.default_rng(7)
    eng._r[:] = array("d", rng.normal(0.0, 100.0, PLAYERS).tolist())
    active = (rng.random(PLAYERS) < 0.3).astype(np.uint8)
    eng._active[:] = active.tobytes()
    eng._n_active = int(active.sum())
    eng._scratch = None
    plan = eng.plan_recalibration(5_000.0)
    assert eng._scratch is not None and len(eng._scratch) >= eng._n_active  # the buffer was used
    assert plan.bounds is not None and all(math.isfinite(x) for x in plan.bounds)
    assert _bits(plan) == _bits(eng.plan_recalibration_reference(5_000.0))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=300),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=20),
)
def test_inverted_cdf_index_selects_what_np_quantile_returns(
    values: list[float], levels: list[float]
) -> None:
    x = np.asarray(values, dtype=np.float64)
    q = np.asarray(levels, dtype=np.float64)
    index = _inverted_cdf_index(len(x), q)
    assert np.array_equal(np.sort(x)[index], np.quantile(x, q, method="inverted_cdf"))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 14, 100, 4096])
def test_inverted_cdf_index_at_the_tier_levels(n: int) -> None:
    levels = ENGINES[True]._tier_levels()
    x = np.random.default_rng(n).permutation(n).astype(np.float64)
    index = _inverted_cdf_index(n, levels)
    assert np.array_equal(np.sort(x)[index], np.quantile(x, levels, method="inverted_cdf"))


@settings(max_examples=200, deadline=None)
@given(
    st.booleans(),
    st.lists(st.floats(-500.0, 4500.0), min_size=1, max_size=300),
    st.data(),
)
def test_the_small_plan_follows_the_reference(
    anchor: bool, ratings: list[float], data: st.DataObject
) -> None:
    """Below _FSUM_BELOW players the plan is computed in plain Python: the same rules as the numpy
    reference (sums exact instead of pairwise, so equal to within rounding), the same order
    statistics, the same clamping."""
    eng = Engine(ADRParams(anchor=anchor, p_min=3))
    for k in range(len(ratings)):
        eng._add_player(f"p{k}")
    eng._r[:] = array("d", ratings)
    active = data.draw(st.lists(st.booleans(), min_size=len(ratings), max_size=len(ratings)))
    eng._active[:] = bytes(active)
    eng._n_active = sum(active)
    eng.calibrations = data.draw(st.integers(0, 2))
    small = eng.plan_recalibration_small(5_000.0)
    ref = eng.plan_recalibration_reference(5_000.0)
    assert eng.plan_recalibration(5_000.0) == small
    for name in ("offset", "r_lo", "r_hi", "sum_r_all", "sum_r_active", "sum_sigma"):
        assert math.isclose(getattr(small, name), getattr(ref, name), rel_tol=1e-12, abs_tol=1e-9), name
    assert (small.bounds is None) == (ref.bounds is None)
    if small.bounds is not None and ref.bounds is not None:
        assert all(
            math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)
            for a, b in zip(small.bounds, ref.bounds, strict=True)
        )


@given(st.integers(1, 5000), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=14))
def test_the_python_quantile_positions_are_numpys(n: int, levels: list[float]) -> None:
    assert _inverted_cdf_positions(n, levels) == _inverted_cdf_index(n, np.asarray(levels)).tolist()
