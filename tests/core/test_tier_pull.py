"""Tiers that lean toward their targets (``[adr] tier_pull``, docs/adr.md): §6.4's accumulator
needs h_req * (1 - pull) for a move that brings the two tiers' counts of active placed players
nearer their targets p_k, h_req * (1 + pull) for any other; a player still moves only to the
neighbouring tier its rating has reached. The C kernel against the Python path is in
test_native_kernel.py (every parameter set there runs with a pull, the paper's sets without)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import KERNEL, Engine
from arenad.core.params import TIER_COUNT, ADRParams
from arenad.evaluation.tiers import engine_shares
from arenad.simulate import Population, ScenarioPlan, simulate_stream

counts = st.lists(st.integers(0, 500), min_size=TIER_COUNT, max_size=TIER_COUNT)


def with_counts(params: ADRParams, active: list[int]) -> Engine:
    eng = Engine(params)
    eng._tier_active = [sum(active), *active]  # index 0: the total
    return eng


class TestTheThreshold:
    @settings(max_examples=200, deadline=None)
    @given(
        active=counts, pull=st.floats(0.0, 0.999), h_req=st.floats(0.0, 1000.0), k=st.integers(1, TIER_COUNT)
    )
    def test_a_move_toward_the_targets_needs_less(
        self, active: list[int], pull: float, h_req: float, k: int
    ) -> None:
        """Uniform targets: p_k * N is the same for every tier, so the move k -> j leans on the
        counts alone: the lower threshold exactly when tier k holds more than one player more
        than tier j (moving one then lowers the sum of their squared excesses)."""
        eng = with_counts(ADRParams(tier_pull=pull, h_req=h_req), active)
        for j in (k - 1, k + 1):
            if not 1 <= j <= TIER_COUNT:
                continue
            got = eng._tier_threshold(1, k, j)
            toward = active[k - 1] - active[j - 1] > 1
            assert got == (h_req * (1.0 - pull) if toward else h_req * (1.0 + pull))
            # the sum of the two squared excesses after moving one player, against before
            a, b = active[k - 1], active[j - 1]
            assert ((a - 1) ** 2 + (b + 1) ** 2 < a * a + b * b) == toward
            # an inactive player's move changes no count: the paper's threshold
            assert eng._tier_threshold(0, k, j) == h_req

    def test_the_targets_count_not_only_the_heads(self) -> None:
        """Unequal targets: 30 players in a tier meant for 40 % of 100 is under-full, 20 in one
        meant for 4.3 % over-full; the move from the over-full one leans toward, the other away,
        though the fuller tier is the one being entered."""
        p = [0.40] + [0.6 / 14] * 14
        p[-1] = 1.0 - math.fsum(p[:-1])
        params = ADRParams(tier_proportions=tuple(p), tier_pull=0.5, h_req=100.0)
        active = [30, 20] + [4] * 12 + [2]
        assert sum(active) == 100
        eng = with_counts(params, active)
        assert (20 - p[1] * 100) - (30 - p[0] * 100) > 1
        assert eng._tier_threshold(1, 2, 1) == 50.0  # 2 -> 1: from the over-full to the under-full
        assert eng._tier_threshold(1, 1, 2) == 150.0

    @given(active=counts, h_req=st.floats(0.0, 1000.0))
    def test_off_is_the_paper(self, active: list[int], h_req: float) -> None:
        eng = with_counts(ADRParams(tier_pull=0.0, h_req=h_req), active)
        assert all(eng._tier_threshold(on, k, k + 1) == h_req for k in range(1, TIER_COUNT) for on in (0, 1))
        assert ADRParams.paper().tier_pull == 0.0


#: A small ladder whose players place, move and expire within a few dozen events.
def small(pull: float = 0.75) -> ADRParams:
    return ADRParams(
        n_min=2, n_active=2, window_len=3, p_min=3, recalibrate_interval=50.0, t_active=0.02,
        h_req=5.0, sigma_place=400.0, tier_pull=pull,
    )  # fmt: skip


class TestMoves:
    @settings(max_examples=60, deadline=None)
    @given(
        kills=st.lists(
            st.tuples(st.integers(0, 11), st.integers(0, 11), st.floats(0.0, 300.0)), max_size=300
        ),
        pull=st.floats(0.0, 0.99),
        native=st.booleans(),
    )
    def test_a_player_moves_only_where_the_rating_has_gone(
        self, kills: list[tuple[int, int, float]], pull: float, native: bool
    ) -> None:
        """Whatever the pull, a move is to the neighbouring tier, across a boundary the rating
        has passed; and the engine's count of active placed players per tier is exact."""
        eng = Engine(small(pull), native=native)
        t = 1_700_000_000.0
        for a, b, dt in kills:
            t += dt
            before = {i: eng._tier[i] for i in range(len(eng.names))}
            eng.feed(f"p{a}", f"p{b}", t)
            bounds = eng._bounds
            for i, k in before.items():
                new = eng._tier[i]
                if k and new != k:
                    assert abs(new - k) == 1
                    r = eng._r[i]
                    assert r >= bounds[k - 1] if new < k else r < bounds[k]
            want = [0] * (TIER_COUNT + 1)
            for k, on in zip(eng._tier, eng._active, strict=True):
                if k and on:
                    want[k] += 1
            want[0] = sum(want)
            assert eng._tier_active == want

    def test_the_counts_survive_export_and_import(self) -> None:
        eng = Engine(small())
        t = 1_700_000_000.0
        for k in range(400):
            eng.feed(f"p{k % 7}", f"p{(k * 3 + 1) % 7}", t + 20.0 * k)
        assert sum(eng._tier_active) > 0
        back = Engine.from_state(eng.export_state())
        assert back._tier_active == eng._tier_active


def share_error(eng: Engine, params: ADRParams) -> float:
    shares = engine_shares(eng)
    assert shares is not None
    return max(abs(s - p) for s, p in zip(shares, params.tier_proportions, strict=True))


@pytest.mark.parametrize("seed", [3, 9])
def test_the_shares_follow_the_targets(seed: int) -> None:
    """§10.4 at 200 players (the issue's tier-share goal): the pull brings the end-of-stream shares
    nearer p_k than the paper's one threshold does, for about as many tier changes (docs/adr.md
    measures seeds 1-16; 3 and 9 are two the paper's rule misses the goal on)."""
    stream = simulate_stream(
        Population(players=200, days=90, seed=seed, events=60_000), ScenarioPlan()
    ).events
    errors, changes = {}, {}
    for pull in (0.0, 0.75):
        params = ADRParams(tier_pull=pull)
        eng = Engine(params)
        for a, b, t in stream:
            eng.feed(a, b, t)
        errors[pull], changes[pull] = share_error(eng, params), eng.tier_changes
    assert errors[0.0] > 0.015
    assert errors[0.75] <= 0.015
    assert errors[0.75] < errors[0.0]
    assert math.isclose(changes[0.75], changes[0.0], rel_tol=0.15)


@pytest.mark.skipif(not KERNEL, reason="the C update kernel could not be built here")
def test_the_kernel_refuses_a_broken_count_list_before_it_writes() -> None:
    """An event that can activate a placed player changes _tier_active in C with no Python to
    hand back to: a list of another shape is refused before anything of the event is written."""
    eng = Engine(small(), native=True)
    t = 1_700_000_000.0
    for k in range(60):
        eng.feed(f"p{k % 4}", f"p{(k + 1) % 4}", t + 10.0 * k)
    t += 10.0 * 60 + 3 * 86400.0  # long past t_active: everyone expires at the next recalibration
    eng.recalibrate(t)
    i = eng.ids["p0"]
    assert eng._tier[i] and not eng._active[i]
    before = eng.export_state()
    eng._tier_active = [0] * 3  # the wrong shape
    with pytest.raises(TypeError, match="_tier_active"):
        eng.feed("p0", "p1", t + 1.0)
    assert eng.export_state() == before
