"""Farming past the cooldown (``[adr] farm_damping``, docs/adr.md): the k-th counted kill in a row
of one attacker on one victim learns at (1 - P) + P / (1 + k / farm_damping), P the kill's
probability, and the run ends when the attacker kills someone else or the victim kills back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.core.params import ADRParams

T0 = 1_700_000_000.0
#: Past the default 60 s cooldown: every kill below is counted.
GAP = 61.0


def deltas(damping: float, kills: list[tuple[str, str]]) -> tuple[Engine, list[tuple[float, float]]]:
    eng = Engine(ADRParams(farm_damping=damping))
    out = []
    for k, (a, b) in enumerate(kills):
        eng.feed(a, b, T0 + k * GAP)
        out.append((eng.last_delta_attacker, eng.last_delta_victim))
    return eng, out


class TestTheRun:
    @settings(max_examples=80, deadline=None)
    @given(damping=st.floats(0.05, 1000.0), repeats=st.integers(1, 6))
    def test_each_repeat_is_damped_by_its_place_in_the_run(self, damping: float, repeats: int) -> None:
        """A run alone (no other kill): the first kill is learnt in full; the k-th repeat, against
        the same kill from the same state undamped, by one weight on both sides, between the
        full damping 1 / (1 + k / damping) of a certain kill and none."""
        kills = [("farmer", "prey")] * (repeats + 1)
        damped, got = deltas(damping, kills)
        # The undamped reference, from the damped engine's own state before each kill.
        assert got[0] == deltas(0.0, kills[:1])[1][0]
        for k in range(1, repeats + 1):
            ref = Engine.from_state(deltas(damping, kills[:k])[0].export_state(), ADRParams(farm_damping=0.0))
            ref.feed("farmer", "prey", T0 + k * GAP)
            w = got[k][0] / ref.last_delta_attacker
            assert got[k][1] / ref.last_delta_victim == pytest.approx(w, rel=1e-9)
            assert 1.0 / (1.0 + k / damping) < w < 1.0
        assert damped._prey[damped.ids["farmer"]] & 0xFFFF == repeats

    @pytest.mark.parametrize(
        ("farmer", "prey", "lo", "hi"), [(2500.0, 500.0, 0.0, 0.02), (500.0, 2500.0, 0.98, 1.0)]
    )
    def test_an_expected_kill_is_damped_and_an_upset_is_not(
        self, farmer: float, prey: float, lo: float, hi: float
    ) -> None:
        """A favourite's run is damped almost fully (P near 1), an underdog's run of upsets (the
        §10.6 returning player) hardly at all (P near 0): the weight is (1 - P) + P / (1 + k/K)."""
        damping = 10.0
        out = []
        for d in (damping, 0.0):
            eng = Engine(ADRParams(farm_damping=d))
            eng.seed_player("farmer", mu=farmer, sigma=40.0, n=200, last_t=T0)
            eng.seed_player("prey", mu=prey, sigma=40.0, n=200, last_t=T0)
            for k in range(6):
                eng.feed("farmer", "prey", T0 + (k + 1) * GAP)
            out.append(eng.last_delta_attacker)
        full = 1.0 / (1.0 + 5 / damping)
        w = out[0] / out[1]  # approximately: the states before the sixth kill differ a little
        assert lo <= (w - full) / (1.0 - full) <= hi

    @pytest.mark.parametrize(
        "kills",
        [
            [("a", "b"), ("a", "c"), ("a", "b")],  # another victim in between
            [("a", "b"), ("b", "a"), ("a", "b")],  # the victim killed back
            [("a", "b"), ("c", "a"), ("b", "c"), ("c", "b"), ("b", "a")],  # no repeat at all
        ],
        ids=["other-victim", "killed-back", "no-repeat"],
    )
    def test_a_broken_run_learns_in_full(self, kills: list[tuple[str, str]]) -> None:
        damped, got = deltas(10.0, kills)
        plain, ref = deltas(0.0, kills)
        assert got == ref
        assert [damped.mu(i) for i in range(len(damped))] == [plain.mu(i) for i in range(len(plain))]

    def test_killing_back_ends_only_the_victims_run(self) -> None:
        eng, _ = deltas(10.0, [("a", "b"), ("a", "b"), ("b", "c"), ("b", "c"), ("c", "b")])
        a, b, c = (eng.ids[n] for n in "abc")
        assert eng._prey[a] == ((b + 1) << 16) | 1  # a's run on b goes on
        assert eng._prey[b] == 0  # c killed b back: b's run on c ended
        assert eng._prey[c] == (b + 1) << 16  # c's first kill of b

    def test_off_is_the_paper_and_still_counts_the_run(self) -> None:
        """The paper learns every counted kill in full; the run is kept anyway, so turning the
        damping on later (a config change and a restart) damps a run already under way."""
        assert ADRParams.paper().farm_damping == 0.0
        eng, _ = deltas(0.0, [("farmer", "prey")] * 5)
        assert eng._prey[eng.ids["farmer"]] == ((eng.ids["prey"] + 1) << 16) | 4
        on = Engine.from_state(eng.export_state(), ADRParams(farm_damping=10.0))
        off = Engine.from_state(eng.export_state(), ADRParams(farm_damping=0.0))
        on.feed("farmer", "prey", T0 + 5 * GAP)
        off.feed("farmer", "prey", T0 + 5 * GAP)
        assert off.last_delta_attacker / 1.5 < on.last_delta_attacker < off.last_delta_attacker


class TestState:
    def test_a_run_survives_export_and_import(self) -> None:
        kills = [("farmer", "prey")] * 4
        eng, _ = deltas(10.0, kills[:3])
        again = Engine.from_state(eng.export_state())
        eng.feed("farmer", "prey", T0 + 3 * GAP)
        again.feed("farmer", "prey", T0 + 3 * GAP)
        assert again.last_delta_attacker == eng.last_delta_attacker
        assert again._prey == eng._prey

    def test_a_state_from_before_the_column_starts_with_no_runs(self) -> None:
        eng, _ = deltas(10.0, [("farmer", "prey")] * 3)
        state = eng.export_state()
        del state["columns"]["prey"]
        old = Engine.from_state(state)
        assert list(old._prey) == [0] * len(old)
        fresh = Engine.from_state(state, ADRParams(farm_damping=0.0))
        old.feed("farmer", "prey", T0 + 3 * GAP)
        fresh.feed("farmer", "prey", T0 + 3 * GAP)
        assert old.last_delta_attacker == fresh.last_delta_attacker  # a first kill: undamped
