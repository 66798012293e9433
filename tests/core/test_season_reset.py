"""Season resets (seed 001 §4): the reset presets, ``Engine.season_reset`` and placement after it.

Every expectation here is computed in the test from the seed formulas:

    sigma' = min(sigma_max, alpha * sigma)
    mu'    = clamp((1 - lam) * mu + lam * anchor, mu_min, mu_max)

with ``anchor`` the centre of the player's tier band (an unplaced player: the band its rating
lies in), tier k spanning [B_k, B_{k-1}) and the open bands 1 and 15 taken as wide as their
neighbour. The engine's own ``band_anchor`` is never used to compute an expectation.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import ClassVar

import numpy as np
import pytest

from arenad.core.engine import Engine, Outcome
from arenad.core.params import TIER_COUNT, TIER_NAMES, ADRParams
from arenad.scopes import RESET_PRESETS, Reset

DAY = 86400.0
T0 = 1_764_000_000.0
PHI = (1.0 + math.sqrt(5.0)) / 2.0

#: The seed's printed values (alpha, lambda) of each preset.
SEED_PRESETS: dict[str, tuple[float, float]] = {
    "continuous": (1.0, 0.0),
    "softer": (1.445027, 0.118034),
    "soft": (1.618034, 0.236068),
    "hard": (2.618034, 0.618034),
}


# ---------------------------------------------------------------------------- the presets
class TestPresets:
    @pytest.mark.parametrize("name", sorted(SEED_PRESETS))
    def test_preset_matches_the_seed_values(self, name: str) -> None:
        alpha, lam = SEED_PRESETS[name]
        preset = RESET_PRESETS[name]
        assert preset.alpha == pytest.approx(alpha, abs=1e-6)
        assert preset.lam == pytest.approx(lam, abs=1e-6)
        assert preset.problems() == []

    def test_presets_match_the_seed_formulas(self) -> None:
        formulas = {
            "continuous": (1.0, 0.0),
            "softer": ((PHI + math.sqrt(PHI)) / 2.0, PHI**-3 / 2.0),
            "soft": (PHI, PHI**-3),
            "hard": (PHI**2, PHI**-1),
        }
        assert set(RESET_PRESETS) == set(formulas)
        for name, (alpha, lam) in formulas.items():
            assert RESET_PRESETS[name].alpha == pytest.approx(alpha, rel=1e-12), name
            assert RESET_PRESETS[name].lam == pytest.approx(lam, rel=1e-12, abs=1e-15), name

    def test_presets_grow_harder_in_order(self) -> None:
        order = ["continuous", "softer", "soft", "hard"]
        alphas = [RESET_PRESETS[n].alpha for n in order]
        lams = [RESET_PRESETS[n].lam for n in order]
        assert alphas == sorted(alphas) and len(set(alphas)) == 4
        assert lams == sorted(lams) and len(set(lams)) == 4

    @pytest.mark.parametrize(
        ("alpha", "lam", "bad"),
        [(0.99, 0.5, 1), (3.01, 0.5, 1), (1.5, -0.01, 1), (1.5, 1.01, 1), (math.nan, math.inf, 2)],
    )
    def test_reset_problems(self, alpha: float, lam: float, bad: int) -> None:
        assert len(Reset(alpha, lam).problems()) == bad

    @pytest.mark.parametrize(("alpha", "lam"), [(0.5, 0.1), (1.2, -0.1), (1.2, 1.5), (math.nan, 0.1)])
    def test_engine_refuses_bad_arguments(self, alpha: float, lam: float) -> None:
        eng = Engine()
        eng.apply("a", "b", T0)
        before = eng.export_state()
        with pytest.raises(ValueError, match="season reset"):
            eng.season_reset(alpha, lam)
        assert eng.export_state() == before


# ---------------------------------------------------------------------------- an independent reset
def band_of(mu: float, bounds: tuple[float, ...]) -> int:
    """The tier band k (1..15) holding ``mu``: B_k <= mu < B_{k-1}, with B_0 = inf, B_15 = -inf."""
    b = [math.inf, *bounds, -math.inf]
    for k in range(1, TIER_COUNT + 1):
        if b[k] <= mu < b[k - 1]:
            return k
    raise AssertionError(f"no band holds {mu}")


def band_centre(k: int, bounds: tuple[float, ...]) -> float:
    b = [math.inf, *bounds, -math.inf]
    if k == 1:
        width = b[1] - b[2]  # 1H taken as wide as 1M
        return b[1] + width / 2.0
    if k == TIER_COUNT:
        width = b[TIER_COUNT - 2] - b[TIER_COUNT - 1]  # 5L taken as wide as 5M
        return b[TIER_COUNT - 1] - width / 2.0
    return (b[k] + b[k - 1]) / 2.0


def expected_after_reset(
    mu: float,
    sigma: float,
    tier: str | None,
    bounds: tuple[float, ...],
    *,
    alpha: float,
    lam: float,
    p: ADRParams,
) -> tuple[float, float, int]:
    """(mu', sigma', band used) by the seed formulas, on the visible scale."""
    k = TIER_NAMES.index(tier) + 1 if tier is not None else band_of(mu, bounds)
    target = (1.0 - lam) * mu + lam * band_centre(k, bounds)
    return min(max(target, p.mu_min), p.mu_max), min(p.sigma_max, alpha * sigma), k


def set_bounds(eng: Engine, bounds: list[float]) -> None:
    """Install boundaries B_1..B_14 (internal units) through the public recalibration step."""
    plan = eng.plan_recalibration(eng.clock)
    eng.finish_recalibration(replace(plan, bounds=bounds))


def busy_engine(
    params: ADRParams, players: int = 30, events: int = 3000, seed: int = 1
) -> tuple[Engine, float]:
    eng = Engine(params)
    rng = random.Random(seed)
    skill = [rng.gauss(0.0, 1.0) for _ in range(players)]
    t = T0
    for _ in range(events):
        a, b = rng.sample(range(players), 2)
        if rng.random() > 1.0 / (1.0 + math.exp(skill[b] - skill[a])):
            a, b = b, a
        t += rng.uniform(1.0, 20.0)
        eng.feed(f"p{a}", f"p{b}", t)
    return eng, t


def check_sums(eng: Engine) -> None:
    views = [eng.view(i) for i in range(len(eng))]
    mus = np.array([v.mu for v in views])
    sig = np.array([v.sigma for v in views])
    act = np.array([v.active for v in views])
    assert act.sum() == eng.active_count
    expected_mean = float(np.mean(mus[act])) if act.any() else float(np.mean(mus))
    assert eng.active_mean() == pytest.approx(expected_mean, rel=1e-9)
    assert eng.mean_sigma == pytest.approx(float(np.mean(sig)), rel=1e-9)
    assert eng.ladder_is_consistent()
    assert not np.isnan(mus).any() and not np.isnan(sig).any()
    counts = [0] * TIER_COUNT
    for v in views:
        if v.tier is not None:
            counts[TIER_NAMES.index(v.tier)] += 1
    assert list(eng.tier_info().counts) == counts


# ---------------------------------------------------------------------------- a worked example
class TestWorkedExample:
    """Hand-computed, with boundaries B_k = 1430 - 100 k (internal = visible: anchor off).

    B_1 = 1330, B_2 = 1230, B_3 = 1130, B_4 = 1030, B_5 = 930, ..., B_13 = 130, B_14 = 30.
    Band centres: band 1 [1330, inf) is taken as wide as band 2 (100) -> 1380; band 4
    [1030, 1130) -> 1080; band 5 [930, 1030) -> 980; band 14 [30, 130) -> 80; band 15
    (-inf, 30) is as wide as band 14 (100) -> -20.

    "hard" preset: alpha = phi^2 = 2.6180339887, lam = 1/phi = 0.6180339887, 1 - lam = 0.3819660113.

    ghost  mu 3000, sigma 120: band 1.  mu' = 0.3819660113*3000 + 0.6180339887*1380
                                            = 1145.8980339 + 852.8869044 = 1998.7849383
                                         sigma' = 2.6180339887*120 = 314.1640786
    mid    mu 1000, sigma 200: band 5.  mu' = 1000 + 0.6180339887*(980 - 1000) = 987.6393202
                                         sigma' = 523.6067977 -> capped at sigma_max = 400
    edge   mu 1030 (= B_4 exactly): band 4 (bands are closed below).
                                         mu' = 1030 + 0.6180339887*(1080 - 1030) = 1060.9016994
                                         sigma' = 2.6180339887*100 = 261.8033989
    low    mu 50, sigma 60: band 14.    mu' = 50 + 0.6180339887*(80 - 50) = 68.5410197
                                         sigma' = 157.0820393
    floor  mu 0, sigma 10: band 15.     mu' = 0 + 0.6180339887*(-20 - 0) = -12.3606798
                                         -> clamped to mu_min = 0;  sigma' = 26.1803399
    """

    PLAYERS: ClassVar[dict[str, tuple[float, float]]] = {
        "ghost": (3000.0, 120.0),
        "mid": (1000.0, 200.0),
        "edge": (1030.0, 100.0),
        "low": (50.0, 60.0),
        "floor": (0.0, 10.0),
    }
    HAND: ClassVar[dict[str, tuple[float, float]]] = {
        "ghost": (1998.7849383, 314.1640786),
        "mid": (987.6393202, 400.0),
        "edge": (1060.9016994, 261.8033989),
        "low": (68.5410197, 157.0820393),
        "floor": (0.0, 26.1803399),
    }

    def engine(self) -> Engine:
        eng = Engine(ADRParams(anchor=False))
        for name, (mu, sigma) in self.PLAYERS.items():
            eng.seed_player(name, mu=mu, sigma=sigma, n=3, last_t=T0)
        set_bounds(eng, [1430.0 - 100.0 * k for k in range(1, TIER_COUNT)])
        return eng

    def test_hand_computed_hard_reset(self) -> None:
        eng = self.engine()
        assert eng.tier_info().boundaries[0] == 1330.0
        assert eng.tier_info().boundaries[-1] == 30.0
        hard = RESET_PRESETS["hard"]
        eng.season_reset(hard.alpha, hard.lam)
        for name, (mu, sigma) in self.HAND.items():
            v = eng.view(eng.ids[name])
            assert v.mu == pytest.approx(mu, abs=1e-6), name
            assert v.sigma == pytest.approx(sigma, abs=1e-6), name
            assert v.tier is None
        # The ladder order follows the new ratings: ghost, edge, mid, low, floor.
        assert [eng.names[i] for i in eng.ladder_ids()] == ["ghost", "edge", "mid", "low", "floor"]
        check_sums(eng)

    @pytest.mark.parametrize("preset", sorted(RESET_PRESETS))
    def test_every_preset_by_formula(self, preset: str) -> None:
        eng = self.engine()
        reset = RESET_PRESETS[preset]
        bounds = eng.tier_info().boundaries
        expected = {
            name: expected_after_reset(
                mu, sigma, None, bounds, alpha=reset.alpha, lam=reset.lam, p=eng.params
            )
            for name, (mu, sigma) in self.PLAYERS.items()
        }
        assert [k for _, _, k in expected.values()] == [1, 5, 4, 14, 15]
        eng.season_reset(reset.alpha, reset.lam)
        for name, (mu, sigma, _) in expected.items():
            v = eng.view(eng.ids[name])
            assert v.mu == pytest.approx(mu, rel=1e-12, abs=1e-9), (preset, name)
            assert v.sigma == pytest.approx(sigma, rel=1e-12), (preset, name)
        check_sums(eng)

    def test_top_anchor_above_mu_max_is_clamped(self) -> None:
        """Band 1 centred beyond mu_max: a full (lambda = 1) reset lands on mu_max, not above."""
        eng = Engine(ADRParams(anchor=False))
        eng.seed_player("top", mu=3990.0, sigma=50.0, n=1, last_t=T0)
        eng.seed_player("other", mu=1000.0, sigma=50.0, n=1, last_t=T0)
        # B_1 = 3950, B_2 = 3750: band 1 is centred at 3950 + 100 = 4050 > mu_max = 4000.
        set_bounds(eng, [4150.0 - 200.0 * k for k in range(1, TIER_COUNT)])
        eng.season_reset(1.0, 1.0)
        assert eng.view(eng.ids["top"]).mu == 4000.0
        # B_14 = 4150 - 2800 = 1350 > 1000: "other" is in the open bottom band 15, taken as wide
        # as band 14 [1350, 1550) = 200, so centred at 1350 - 100 = 1250; lambda = 1 moves it there.
        assert eng.view(eng.ids["other"]).mu == 1250.0


# ---------------------------------------------------------------------------- a calibrated ladder
CALIBRATED = ADRParams(p_min=10, n_min=5)


@pytest.fixture(scope="module")
def calibrated() -> tuple[Engine, float]:
    """30 players after ~8 hours of kills: tiers calibrated, the scale anchored (offset != 0)."""
    eng, t = busy_engine(CALIBRATED)
    # A newcomer with a single kill: unplaced at the reset, so it uses the band of its rating.
    t += 5.0
    eng.feed("fresh", "p0", t)
    return eng, t


def record(eng: Engine) -> tuple[list[tuple[float, float, str | None]], tuple[float, ...]]:
    views = [eng.view(i) for i in range(len(eng))]
    return [(v.mu, v.sigma, v.tier) for v in views], eng.tier_info().boundaries


class TestCalibratedLadder:
    def test_fixture_is_what_the_tests_need(self, calibrated: tuple[Engine, float]) -> None:
        eng, _ = calibrated
        assert eng.calibrations > 0
        assert eng.offset != 0.0
        placed = [eng.view(i).tier for i in range(len(eng)) if eng.view(i).tier is not None]
        assert len(placed) >= 20
        assert eng.view(eng.ids["fresh"]).tier is None

    @pytest.mark.parametrize("preset", sorted(RESET_PRESETS))
    def test_every_player_follows_the_formula(self, calibrated: tuple[Engine, float], preset: str) -> None:
        eng = calibrated[0].copy()
        reset = RESET_PRESETS[preset]
        before, bounds = record(eng)
        n_before = [eng.view(i).n for i in range(len(eng))]
        expected = [
            expected_after_reset(mu, s, k, bounds, alpha=reset.alpha, lam=reset.lam, p=eng.params)
            for mu, s, k in before
        ]
        # The data covers the open bands and an unplaced player.
        bands = {k for _, _, k in expected}
        assert 1 in bands and TIER_COUNT in bands
        eng.season_reset(reset.alpha, reset.lam)
        for i, (mu, sigma, _) in enumerate(expected):
            v = eng.view(i)
            assert v.mu == pytest.approx(mu, rel=1e-12, abs=1e-9), (preset, v.player)
            assert v.sigma == pytest.approx(sigma, rel=1e-12), (preset, v.player)
            assert v.tier is None
            assert v.n == n_before[i]
            assert eng.placement_events(i) == 0
        info = eng.tier_info()
        assert info.counts == (0,) * TIER_COUNT
        assert info.boundaries == bounds  # the boundaries carry over
        check_sums(eng)

    def test_placed_player_uses_its_tier_not_its_band(self) -> None:
        """With §6.4 hysteresis out of reach (h_req huge) tiers stay where placement put them while
        ratings move on; the reset must pull toward the centre of the tier, not the rating's band."""
        eng, _ = busy_engine(replace(CALIBRATED, h_req=1e9), seed=4)
        before, bounds = record(eng)
        differ = [
            i
            for i, (mu, _, k) in enumerate(before)
            if k is not None and TIER_NAMES.index(k) + 1 != band_of(mu, bounds)
        ]
        assert len(differ) >= 3
        lam = 0.5
        eng.season_reset(1.5, lam)
        for i in differ:
            mu, _, tier = before[i]
            k = TIER_NAMES.index(tier) + 1 if tier is not None else 0
            assert eng.view(i).mu == pytest.approx(0.5 * mu + 0.5 * band_centre(k, bounds), rel=1e-12)
            assert eng.view(i).mu != pytest.approx(0.5 * mu + 0.5 * band_centre(band_of(mu, bounds), bounds))

    def test_continuous_changes_nothing_but_tiers(self, calibrated: tuple[Engine, float]) -> None:
        eng = calibrated[0].copy()
        before = eng.export_state()
        order = list(eng.ladder_ids())
        eng.season_reset(1.0, 0.0)
        after = eng.export_state()
        for col in ("r", "sigma", "streak", "phi", "pool", "n", "last", "wsum", "ret", "wring", "aring"):
            assert after["columns"][col] == before["columns"][col], col
        assert after["columns"]["h"] == bytes(len(before["columns"]["h"]))
        assert after["tier"] == bytes(len(eng))
        assert any(before["tier"])
        # The population sums are recomputed exactly at a reset: equal up to the running sums' rounding.
        sums = ("sum_r_all", "sum_r_active", "sum_sigma")
        for key in sums:
            assert after["scalars"][key] == pytest.approx(before["scalars"][key], rel=1e-12)
        assert {k: v for k, v in after["scalars"].items() if k not in sums} == {
            k: v for k, v in before["scalars"].items() if k not in sums
        }
        assert after["bounds"] == before["bounds"]
        assert list(eng.ladder_ids()) == order
        assert before["season"] is None
        assert after["season"] is not None
        n0 = np.frombuffer(after["season"]["n0"], dtype=np.int64)
        assert n0.tolist() == np.frombuffer(after["columns"]["n"], dtype=np.int64).tolist()

    def test_placement_returns_only_after_n_min_new_events(self, calibrated: tuple[Engine, float]) -> None:
        eng, t = calibrated
        eng = eng.copy()
        soft = RESET_PRESETS["soft"]
        eng.season_reset(soft.alpha, soft.lam)
        p = eng.params
        rng = random.Random(9)
        names = [f"p{i}" for i in range(30)] + ["fresh", "late"]
        seen_new = 0
        placed_again = 0
        for _ in range(1500):
            a, b = rng.sample(names, 2)
            t += rng.uniform(1.0, 20.0)
            before = {x: eng.view(eng.ids[x]).tier if x in eng.ids else None for x in (a, b)}
            pe_before = {x: eng.placement_events(eng.ids[x]) if x in eng.ids else 0 for x in (a, b)}
            if eng.feed(a, b, t) is not Outcome.APPLIED:
                continue
            for x in (a, b):
                i = eng.ids[x]
                v = eng.view(i)
                pe = eng.placement_events(i)
                assert pe == pe_before[x] + 1
                if before[x] is None:
                    # Unplaced before this event: placed now exactly when §6.1 holds on this
                    # season's events (the pre-reset ones do not count).
                    assert (v.tier is not None) == (pe >= p.n_min and v.sigma <= p.sigma_place), x
                    if v.tier is not None:
                        placed_again += 1
                        assert pe >= p.n_min
                else:
                    assert v.tier is not None
                if x == "late":
                    seen_new += 1
                    assert pe == v.n  # a player new this season counts every event
        assert placed_again >= 20
        assert seen_new > 0
        check_sums(eng)

    def test_second_reset_restarts_placement_again(self, calibrated: tuple[Engine, float]) -> None:
        eng, t = calibrated
        eng = eng.copy()
        eng.season_reset(1.2, 0.1)
        rng = random.Random(2)
        for _ in range(300):
            a, b = rng.sample(range(30), 2)
            t += rng.uniform(1.0, 20.0)
            eng.feed(f"p{a}", f"p{b}", t)
        assert any(eng.placement_events(i) > 0 for i in range(len(eng)))
        before, bounds = record(eng)
        eng.season_reset(1.2, 0.1)
        for i, (mu, sigma, tier) in enumerate(before):
            exp_mu, exp_sigma, _ = expected_after_reset(
                mu, sigma, tier, bounds, alpha=1.2, lam=0.1, p=eng.params
            )
            assert eng.view(i).mu == pytest.approx(exp_mu, rel=1e-12)
            assert eng.view(i).sigma == pytest.approx(exp_sigma, rel=1e-12)
            assert eng.placement_events(i) == 0
            assert eng.view(i).tier is None

    def test_state_round_trip_keeps_the_season(self, calibrated: tuple[Engine, float]) -> None:
        eng, t = calibrated
        eng = eng.copy()
        softer = RESET_PRESETS["softer"]
        eng.season_reset(softer.alpha, softer.lam)
        rng = random.Random(3)
        names = [f"p{i}" for i in range(30)] + ["fresh", "x1", "x2"]
        stream: list[tuple[str, str, float]] = []
        for _ in range(2000):
            a, b = rng.sample(names, 2)
            t += rng.uniform(1.0, 20.0)
            stream.append((a, b, t))
        for a, b, ts in stream[:400]:
            eng.feed(a, b, ts)
        state = eng.export_state()
        assert state["season"] is not None
        restored = Engine.from_state(state)
        assert restored.export_state() == state
        assert [restored.placement_events(i) for i in range(len(eng))] == [
            eng.placement_events(i) for i in range(len(eng))
        ]
        for a, b, ts in stream[400:]:
            assert eng.feed(a, b, ts) is restored.feed(a, b, ts)
        assert restored.export_state() == eng.export_state()
        assert any(restored.view(i).tier is not None for i in range(len(restored)))

    def test_unreset_engine_exports_no_season(self) -> None:
        eng = Engine()
        eng.apply("a", "b", T0)
        state = eng.export_state()
        assert state["season"] is None
        restored = Engine.from_state(state)
        restored.apply("c", "a", T0 + 1)
        assert restored.placement_events(restored.ids["c"]) == 1
        assert restored.export_state()["season"] is None

    def test_copy_is_independent(self, calibrated: tuple[Engine, float]) -> None:
        eng, t = calibrated
        before = eng.export_state()
        other = eng.copy()
        other.season_reset(2.0, 0.5)
        other.feed("p1", "p2", t + 100.0)
        assert eng.export_state() == before
