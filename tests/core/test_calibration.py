"""The issue-14 mechanisms of the engine, one by one (docs/adr.md "Defaults by measurement").

The link and its calibration, the decay grace, the §8.4 cap over decay, the step-bounded
display, placements and repeats learnt at fractional weights, and their state across export and
import. The C kernel's equality with the Python path for each of them is
tests/core/test_native_kernel.py (MECHANISM_SETS); here are their invariants.
"""

from __future__ import annotations

import math
import random
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import CAL_MAX, CAL_MIN, CAL_PRIOR, DISPLAY_K, Engine, Outcome, calibrated, link_p
from arenad.core.params import ADRParams

DAY = 86400.0
T0 = 1_700_000_000.0
Z = st.floats(-30.0, 30.0, allow_nan=False)


class TestLink:
    @given(z=Z, logistic=st.booleans())
    def test_symmetric_and_a_probability(self, z: float, logistic: bool) -> None:
        p = link_p(z, logistic)
        assert 0.0 <= p <= 1.0
        assert p + link_p(-z, logistic) == pytest.approx(1.0, abs=1e-12)

    @given(a=Z, b=Z, logistic=st.booleans())
    def test_monotone(self, a: float, b: float, logistic: bool) -> None:
        if a < b:
            assert link_p(a, logistic) <= link_p(b, logistic)

    def test_same_slope_at_even_odds(self) -> None:
        """The logistic keeps the arctan's slope 1/pi at z = 0 (§3.1), only the tails differ."""
        h = 1e-6
        for logistic in (True, False):
            slope = (link_p(h, logistic) - link_p(-h, logistic)) / (2 * h)
            assert slope == pytest.approx(1 / math.pi, rel=1e-6)
        # The arctan's heavy tail: P = 0.98 needs z = tan(0.48 pi) ~ 15.9; the logistic ~ 3.06.
        assert link_p(3.06, True) == pytest.approx(0.98, abs=1e-3)
        assert link_p(3.06, False) < 0.9

    @given(cal=st.floats(CAL_MIN, CAL_MAX), z=Z, logistic=st.booleans())
    def test_calibrated_pieces(self, cal: float, z: float, logistic: bool) -> None:
        p, grad, info = calibrated(cal, z, logistic)
        assert p == link_p(cal * z, logistic)
        assert info >= 0.0
        h = 1e-7
        if 1e-9 < p < 1 - 1e-9 and abs(z) < 20:
            numeric = (
                math.log(link_p((cal + h) * z, logistic)) - math.log(link_p((cal - h) * z, logistic))
            ) / (2 * h)
            assert grad == pytest.approx(numeric, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("logistic", [True, False])
@pytest.mark.parametrize("truth", [0.5, 1.0, 2.5])
def test_online_calibration_finds_the_scale(logistic: bool, truth: float) -> None:
    """Kills drawn from the link at scale ``truth``: the Newton steps of Engine._predicted find
    it (the outcome is always "the attacker won", so the winner decides the sign of z)."""
    rng = random.Random(5)
    cal, info, keep = 1.0, CAL_PRIOR, 1.0 - 1.0 / 5000.0
    for _ in range(30_000):
        z = rng.uniform(-2.0, 2.0)
        won = rng.random() < link_p(truth * z, logistic)
        _p, grad, fisher = calibrated(cal, z if won else -z, logistic)
        info = info * keep + fisher
        cal = min(CAL_MAX, max(CAL_MIN, cal + grad / info))
    assert cal == pytest.approx(truth, rel=0.12)


def test_the_engine_calibrates_and_keeps_it_in_its_state() -> None:
    eng = Engine(ADRParams(calibration_memory=500.0))
    rng = random.Random(1)
    t = T0
    for _ in range(3000):
        t += 90.0
        a, b = rng.sample(range(20), 2)
        eng.feed(f"p{min(a, b)}", f"p{max(a, b)}", t)  # the lower id always wins: c grows
    assert eng.calibration > 1.5
    back = Engine.from_state(eng.export_state(), eng.params)
    assert (back.calibration, back._cal_info) == (eng.calibration, eng._cal_info)
    off = Engine(ADRParams(calibration_memory=0.0))
    off.feed("a", "b", T0)
    off.feed("a", "b", T0 + 100)
    assert off.calibration == 1.0
    # predictions use the multiplier, the update does not (docs/adr.md "Online calibration")
    i, j = eng.ids["p0"], eng.ids["p19"]
    d = eng.params.theta + eng.params.lambda_ * eng.mean_sigma
    assert eng.predict(i, j) == link_p(eng.calibration * ((eng._r[i] - eng._r[j]) / d), True)


def _scale_steps(eng: Engine, truths: list[float], seed: int) -> float:
    """Kills drawn from the logistic link at scale ``truths[k]``, each one calibration step of
    ``eng`` (Engine._predicted, as at a kill); returns the mean |c - truth| of the last tenth."""
    rng = random.Random(seed)
    keep = eng._kc["cal_keep"]
    errors = []
    for k, truth in enumerate(truths):
        z = rng.uniform(-2.0, 2.0)
        won = rng.random() < link_p(truth * z, True)
        eng._predicted(z if won else -z, True, keep)
        if k >= len(truths) * 9 // 10:
            errors.append(abs(eng.calibration - truth))
    return sum(errors) / len(errors)


class TestCalibrationWarmup:
    """ADRParams.calibration_warmup and calibration_start (docs/adr.md "The calibration's
    warm-up"): a young c forgets at 1 - 1/max(20, warmup * n), then at 1 - 1/memory."""

    def test_a_memory_of_one_kill_still_calibrates(self) -> None:
        # 1 - 1/1 = 0 kept: each step is the Newton step of the last kill alone, not no step.
        eng = Engine(ADRParams(calibration_memory=1.0, calibration_warmup=0.0, calibration_start=1.0))
        eng._predicted(0.5, True, eng._kc["cal_keep"])
        assert eng.calibration != 1.0

    def test_the_start_is_c_before_the_first_kill(self) -> None:
        assert Engine(ADRParams(calibration_start=2.5)).calibration == 2.5
        assert Engine(ADRParams(calibration_start=2.5, calibration_memory=0.0)).calibration == 1.0
        assert Engine(ADRParams.paper()).calibration == 1.0

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_the_warmup_follows_a_scale_that_falls(self, seed: int) -> None:
        """A scale falling from 3 to 1 over the first 2,000 kills (the ratings spreading, as on
        the short logs): with the warm-up c is nearer the truth at the end than with the
        memory alone, which still averages over the whole fall."""
        truths = [3.0 - 2.0 * k / 2000 for k in range(2000)]
        warm, plain = (
            _scale_steps(Engine(ADRParams(calibration_start=3.0, calibration_warmup=w)), truths, seed)
            for w in (1.0, 0.0)
        )
        assert warm < 0.8 * plain, (warm, plain)

    @settings(max_examples=60, deadline=None)
    @given(
        warmup=st.floats(0.05, 4.0),
        memory=st.floats(2.0, 400.0),  # memory 1 is keep 0: calibration off
        cal=st.floats(CAL_MIN, CAL_MAX),
        info=st.floats(1e-3, 1e3),
        z=Z,
    )
    def test_past_the_warmup_the_step_is_the_memorys(
        self, warmup: float, memory: float, cal: float, info: float, z: float
    ) -> None:
        """Once warmup * n >= memory (or the floor of 20 is), the step is exactly that of
        warm-up 0 from the same c and information; before, it forgets faster (takes a larger
        share of the new kill's information)."""
        engines = [Engine(ADRParams(calibration_memory=memory, calibration_warmup=w)) for w in (warmup, 0.0)]
        n = math.ceil(memory / warmup)
        for eng in engines:
            eng._cal, eng._cal_info, eng._cal_n = cal, info, float(n)
            eng._predicted(z, True, eng._kc["cal_keep"])
        assert (engines[0]._cal, engines[0]._cal_info) == (engines[1]._cal, engines[1]._cal_info)
        assert engines[0]._cal_n == engines[1]._cal_n == n + 1
        young = Engine(ADRParams(calibration_memory=memory, calibration_warmup=warmup))
        young._cal, young._cal_info, young._cal_n = cal, info, 0.0
        young._predicted(z, True, young._kc["cal_keep"])
        m = max(20.0, warmup)
        expected = info * (1.0 - 1.0 / m if m < memory else 1.0 - 1.0 / memory) + calibrated(cal, z, True)[2]
        assert young._cal_info == expected

    @settings(max_examples=30, deadline=None)
    @given(warmup=st.floats(0.0, 4.0), start=st.floats(CAL_MIN, CAL_MAX), seed=st.integers(0, 99))
    def test_c_stays_in_its_range_and_replays(self, warmup: float, start: float, seed: int) -> None:
        """Any warm-up and start: c in [1/8, 8], positive information, and a replay of the same
        kills (or an export and import halfway) ends in the same calibration state."""
        params = ADRParams(calibration_memory=300.0, calibration_warmup=warmup, calibration_start=start)
        rng = random.Random(seed)
        kills = [(f"p{a}", f"p{b}") for a, b in (rng.sample(range(12), 2) for _ in range(400))]
        a, b = Engine(params), Engine(params)
        for k, (x, y) in enumerate(kills):
            a.feed(x, y, T0 + 37.0 * k)
            if k == 200:
                b = Engine.from_state(b.export_state(), params)
            b.feed(x, y, T0 + 37.0 * k)
            assert CAL_MIN <= a.calibration <= CAL_MAX and a._cal_info > 0.0
        assert (a._cal, a._cal_info, a._cal_n) == (b._cal, b._cal_info, b._cal_n)


def test_recent_predictions_are_the_predictions_made() -> None:
    eng = Engine()
    seen = []
    t = T0
    for k in range(50):
        t += 10.0 if k % 3 else 100.0  # some repeats inside the cooldown: predicted too
        a, b = ("x", "y") if k % 2 else ("y", "x")
        seen.append(eng.apply(a, b, t))
    ring, count = eng.recent_predictions()
    assert count == 50 == len(ring)
    assert Outcome.FILTERED in seen
    assert all(0.0 < p < 1.0 for p in ring)


class TestDecayGraceAndCap:
    def test_no_decay_within_the_grace(self) -> None:
        eng = Engine(ADRParams(decay_grace=7.0, idle_after=0.0, anchor=False))
        for k in range(30):
            eng.feed("a", "b" if k % 2 else "c", T0 + 100.0 * k)
        before = eng.mu(eng.ids["a"])
        eng.feed("a", "b", T0 + 6.5 * DAY)
        assert eng.mu(eng.ids["a"]) - eng.last_delta_attacker == pytest.approx(before, abs=1e-9)
        paper = Engine(ADRParams.paper(anchor=False))
        for k in range(30):
            paper.feed("a", "b" if k % 2 else "c", T0 + 100.0 * k)
        before = paper.mu(paper.ids["a"])
        paper.feed("a", "b", T0 + 6.5 * DAY)
        assert paper.mu(paper.ids["a"]) - paper.last_delta_attacker != pytest.approx(before, abs=1e-3)

    @settings(max_examples=40, deadline=None)
    @given(
        gaps=st.lists(
            st.sampled_from([30.0, 61.0, 3600.0, 8 * DAY, 61 * DAY, 200 * DAY]), min_size=5, max_size=60
        )
    )
    def test_no_event_moves_a_rating_by_more_than_delta_max(self, gaps: list[float]) -> None:
        """The §8.4 cap over the whole visible change, decay included (anchor off: no shifts)."""
        p = ADRParams(anchor=False, idle_after=0.0, delta_max=25.0)
        eng = Engine(p)
        rng = random.Random(len(gaps))
        t = T0
        for k in range(40):  # a spread of ratings first
            victim = (k + 1 + k // 5) % 5
            if victim == k % 5:
                victim = (k + 2) % 5
            eng.feed(f"p{k % 5}", f"p{victim}", t + 100.0 * k)
        t += 4000.0
        for gap in gaps:
            t += gap
            a, b = rng.sample(range(5), 2)
            names = f"p{a}", f"p{b}"
            before = [eng.mu(eng.ids[n]) for n in names]
            disp = [eng.display(eng.ids[n]) for n in names]
            eng.feed(*names, t)
            for n, old, od in zip(names, before, disp, strict=True):
                assert abs(eng.mu(eng.ids[n]) - old) <= p.delta_max + 1e-9
                if gap > p.t_return * DAY:  # a return: the display is bounded as well
                    assert abs(eng.display(eng.ids[n]) - od) <= p.delta_max + 1e-9

    def test_paper_return_jumps_past_delta_max(self) -> None:
        """Without the cap over decay (the paper), a return moves the rating by far more."""
        for params, bounded in (
            (ADRParams.paper(anchor=False), False),
            (ADRParams(anchor=False, idle_after=0.0), True),
        ):
            eng = Engine(params)
            for k in range(200):
                eng.feed("top", f"v{k % 20}", T0 + 100.0 * k)
                eng.feed(f"v{(k + 1) % 20}", f"v{(k + 7) % 20}", T0 + 100.0 * k + 50)
            old = eng.mu(eng.ids["top"])
            eng.feed("v1", "top", T0 + 20_000 + 61 * DAY)
            step = abs(eng.mu(eng.ids["top"]) - old)
            assert (step <= params.delta_max + 1e-9) is bounded, step


def test_display_is_mu_minus_3_sigma_without_the_cap() -> None:
    eng = Engine(ADRParams(display_cap=False))
    rng = random.Random(2)
    for k in range(300):
        a, b = rng.sample(range(8), 2)
        eng.feed(f"p{a}", f"p{b}", T0 + 70.0 * k)
    for i in range(len(eng)):
        assert eng.display(i) == pytest.approx(eng.mu(i) - DISPLAY_K * eng.sigma(i), abs=1e-9)
    capped = Engine(ADRParams(idle_after=0.0, anchor=False))
    for k in range(60):
        capped.feed("a", f"v{k % 6}", T0 + 100.0 * k)
        capped.feed(f"v{(k + 1) % 6}", f"v{(k + 3) % 6}", T0 + 100.0 * k + 50.0)
    i = capped.ids["a"]
    # outside a return the display is mu - 3 sigma, a newcomer's too
    assert capped.display(i) == capped.mu(i) - DISPLAY_K * capped.sigma(i)
    assert capped.view(i).display == capped.display(i)
    # at a return sigma drifts up and collapses: the display moves by delta_max per event and
    # then catches up, while mu - 3 sigma drops by 3 * (the rise of sigma) at once
    steps = []
    for k in range(12):
        old = capped.display(i)
        capped.feed(f"v{k % 6}", "a", T0 + 70 * DAY + 100.0 * k)
        steps.append(capped.display(i) - old)
    assert max(abs(x) for x in steps) <= capped.params.delta_max + 1e-9
    assert abs(steps[0]) == pytest.approx(capped.params.delta_max)
    assert capped.display(i) == capped.mu(i) - DISPLAY_K * capped.sigma(i)  # caught up


class TestPlacementsAndRepeats:
    def test_a_match_moves_the_better_up_and_the_worse_down(self) -> None:
        eng = Engine(ADRParams(placement_weight=1.0))
        for k in range(10):
            eng.feed(f"p{k}", f"p{(k + 1) % 4}", T0 + 100.0 * k)
        before = {n: eng.mu(eng.ids[n]) for n in ("p0", "p1", "p2", "p3")}
        counts = list(eng._n)
        pairs = eng.apply_placement((("p0",), ("p1", "p2"), ("p3", "ghost")), T0 + 2000.0)
        assert pairs == 8  # p0 over 4, p1 and p2 over 2 each; "ghost" joins like a newcomer
        assert eng.mu(eng.ids["p0"]) > before["p0"]
        assert eng.mu(eng.ids["p3"]) < before["p3"]
        assert list(eng._n)[: len(counts)] == counts and eng._n[eng.ids["ghost"]] == 0  # not counted
        with pytest.raises(ValueError, match="twice"):
            eng.apply_placement((("p0",), ("p0",)), T0 + 2001.0)
        assert eng.ladder_is_consistent()

    def test_the_paper_does_not_learn_matches(self) -> None:
        eng = Engine(ADRParams.paper())
        eng.feed("a", "b", T0)
        state = eng.export_state()
        assert eng.apply_placement((("a",), ("b",)), T0 + 1) == 0
        assert eng.export_state() == state

    @pytest.mark.parametrize("weight", [0.0, 0.5])
    def test_repeats_inside_the_cooldown(self, weight: float) -> None:
        eng = Engine(ADRParams(repeat_weight=weight, anchor=False))
        eng.feed("a", "b", T0)
        mu = eng.mu(eng.ids["a"])
        assert eng.feed("a", "b", T0 + 30.0) is Outcome.FILTERED
        gain = eng.mu(eng.ids["a"]) - mu
        assert (gain > 0) is (weight > 0)
        assert gain < eng.last_delta_attacker  # less than the counted kill gave
        assert eng._n[eng.ids["a"]] == 1


def test_a_state_from_before_issue_14_loads() -> None:
    """Checkpoints without the calibration and the display column load with c = 1 and the
    display at mu - 3 sigma (docs/operations.md "Upgrading")."""
    eng = Engine()
    for k in range(40):
        eng.feed(f"p{k % 6}", f"p{(k + 1) % 6}", T0 + 100.0 * k)
    state = eng.export_state()
    del state["columns"]["disp"]
    del state["scalars"]["calibration"]
    del state["scalars"]["calibration_info"]
    del state["scalars"]["calibration_steps"]
    back = Engine.from_state(state, eng.params)
    assert back.calibration == 1.0 and back._cal_info == CAL_PRIOR
    assert back._cal_n == 0.0  # no calibration yet: its warm-up starts now
    # A state from before the warm-up (c but no step count) has passed it: the memory applies.
    state = eng.export_state()
    del state["scalars"]["calibration_steps"]
    assert Engine.from_state(state, eng.params)._cal_n == math.inf
    expected = array("d", (r - DISPLAY_K * s for r, s in zip(eng._r, eng._sigma, strict=True)))
    assert back._disp == expected


@pytest.mark.parametrize("native", [True, False])
def test_recalibration_waits_for_enough_kills(native: bool) -> None:
    """recalibrate_min_events: on a sparse stream (one kill per interval) a recalibration comes
    only once that many kills were applied since the last one; 0 recalibrates at every interval."""
    for minimum, expected in ((0, 200), (10, 19)):  # with 10: after kills 10, 20, ..., 190
        eng = Engine(ADRParams(recalibrate_min_events=minimum), native=native)
        calibrations = 0
        for k in range(200):
            if eng.recalibration_due_before("a", "b", T0 + 400.0 * k):
                calibrations += 1
            eng.feed("a" if k % 2 else "b", "b" if k % 2 else "a", T0 + 400.0 * k)
        assert calibrations == expected
        assert eng.next_recalibration <= T0 + 400.0 * 199 + eng.params.recalibrate_interval
        back = Engine.from_state(eng.export_state(), eng.params)
        assert back.recal_applied == eng.recal_applied


@pytest.mark.parametrize("native", [True, False])
def test_sigma_drifts_at_a_return_that_coincides_with_a_sweep(native: bool) -> None:
    """The inactivity sweep at the returning kill's own time moves the decay clock to it; sigma's
    drift, which the sweep leaves to the event (sweep_sigma = false), must still run."""
    eng = Engine(ADRParams(anchor=False), native=native)
    for k in range(60):
        eng.feed("a", f"v{k % 6}", T0 + 100.0 * k)
        eng.feed(f"v{(k + 1) % 6}", f"v{(k + 3) % 6}", T0 + 100.0 * k + 50.0)
    i = eng.ids["a"]
    settled = eng.sigma(i)
    back = T0 + 61 * DAY
    eng.recalibrate(back)  # the day's sweep, at the kill's time
    assert eng._last[i] == back and eng.sigma(i) == settled  # swept: decayed, sigma left alone
    eng.feed("v1", "a", back)
    assert eng.sigma(i) > 3 * settled  # drifted to ~335, then §4.3 took it to ~96
