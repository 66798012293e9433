"""Predicting a match's order (``[adr] placement_calibration``, docs/adr.md): a placement pair
("a finishes above b") is predicted with its own online multiplier on top of the kill
calibration, learnt by the kill calibration's rule from each learnt match's pairs, before the
match moves the ratings. Predictions only: ratings, the kill calibration and every kill
prediction are those of ``placement_calibration = false``."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import CAL_MAX, CAL_MIN, CAL_PRIOR, Engine, calibrated, calibration_step
from arenad.core.params import ADRParams

T0 = 1_700_000_000.0
PLAYERS = [f"p{k}" for k in range(10)]


def warmed(params: ADRParams, seed: int = 1, kills: int = 400) -> Engine:
    """An engine after kills among ten players of spread skill (p0 the best)."""
    rng = random.Random(seed)
    eng = Engine(params)
    for k in range(kills):
        a, b = rng.sample(range(10), 2)
        if rng.random() < 1.0 / (1.0 + 10 ** ((a - b) / 4.0)):  # the lower index usually wins
            eng.feed(f"p{a}", f"p{b}", T0 + 70.0 * k)
        else:
            eng.feed(f"p{b}", f"p{a}", T0 + 70.0 * k)
    return eng


def in_order(eng: Engine) -> tuple[tuple[str, ...], ...]:
    """A match that ends in the ladder's order, one player to a place."""
    return tuple((eng.names[i],) for i in sorted(range(len(eng)), key=lambda i: -eng._r[i]))


def all_pairs(eng: Engine) -> list[tuple[int, int]]:
    return [(i, j) for i in range(len(eng)) for j in range(len(eng)) if i != j]


class TestPredictions:
    def test_before_any_match_a_pair_is_predicted_as_a_kill(self) -> None:
        eng = warmed(ADRParams())
        assert eng.placement_calibration == 1.0
        assert all(eng.predict_placement(i, j) == eng.predict(i, j) for i, j in all_pairs(eng))

    def test_off_predicts_pairs_as_kills_after_matches(self) -> None:
        eng = warmed(ADRParams(placement_calibration=False))
        for k in range(5):
            eng.apply_placement(in_order(eng), eng.clock + k)
        assert eng.placement_calibration == 1.0
        assert all(eng.predict_placement(i, j) == eng.predict(i, j) for i, j in all_pairs(eng))

    def test_matches_in_rating_order_sharpen_the_pairs(self) -> None:
        """Matches that end as the ratings say, every time: the pairs are surer than kills, so
        their multiplier rises and a favourite's P of finishing above grows past its P of a kill."""
        eng = warmed(ADRParams())
        for k in range(6):
            eng.apply_placement(in_order(eng), eng.clock + k)
        assert eng.placement_calibration > 1.5
        best, worst = (eng.ids[n[0]] for n in (in_order(eng)[0], in_order(eng)[-1]))
        assert eng.predict_placement(best, worst) > eng.predict(best, worst) > 0.5

    def test_matches_against_the_ratings_flatten_the_pairs(self) -> None:
        eng = warmed(ADRParams())
        for k in range(6):
            eng.apply_placement(tuple(reversed(in_order(eng))), eng.clock + k)
        assert eng.placement_calibration < 1.0

    def test_a_match_is_learnt_from_the_predictions_made_before_it(self) -> None:
        """The multiplier's steps are the pairs' predictions from the ratings before the match
        (what the harness scored), one calibration step each, in the match's pair order."""
        eng = warmed(ADRParams())
        match = (*in_order(eng), ("newcomer",))  # a pair with a newcomer was scored 0.5
        k = eng._kc
        ids = [eng.ids[g[0]] for g in match[:-1]]
        pairs = [(i, j) for n, i in enumerate(ids) for j in ids[n + 1 :]]
        scale = eng._prediction_scale()
        zs = [eng._cal * ((eng._r[i] - eng._r[j]) / scale) for i, j in pairs]
        # the arguments are those of the scored predictions, all made at the multiplier before
        assert [calibrated(eng._pcal, z, k["logistic"])[0] for z in zs] == [
            eng.predict_placement(i, j) for i, j in pairs
        ]
        state = (eng._pcal, eng._pcal_info, eng._pcal_n)
        for z in zs:  # then one step a pair, the multiplier moving from step to step
            _, grad, fisher = calibrated(state[0], z, k["logistic"])
            state = calibration_step(state, grad, fisher, k["cal_keep"], k)
        cal = eng.calibration
        eng.apply_placement(match, eng.clock)
        assert "newcomer" in eng.ids  # joined, and learnt from, but not a calibration step
        assert (eng._pcal, eng._pcal_info, eng._pcal_n) == state
        assert eng._pcal_n == len(ids) * (len(ids) - 1) // 2
        assert eng.calibration == cal  # the kill calibration learns from kills alone


class TestInvariants:
    @settings(max_examples=40, deadline=None)
    @given(
        matches=st.lists(st.permutations(PLAYERS).map(lambda p: tuple((x,) for x in p[:5])), max_size=30),
        on=st.booleans(),
    )
    def test_ratings_and_kills_do_not_depend_on_it(
        self, matches: list[tuple[tuple[str], ...]], on: bool
    ) -> None:
        """Any matches: the multiplier stays in [1/8, 8], and the ratings and every kill
        prediction are exactly those of an engine without the placement calibration."""
        a = warmed(ADRParams(placement_calibration=on), kills=120)
        b = warmed(ADRParams(placement_calibration=False), kills=120)
        for k, match in enumerate(matches):
            a.apply_placement(match, a.clock + k)
            b.apply_placement(match, b.clock + k)
            assert CAL_MIN <= a.placement_calibration <= CAL_MAX
        assert list(a._r) == list(b._r) and list(a._sigma) == list(b._sigma)
        assert a.calibration == b.calibration
        assert all(a.predict(i, j) == b.predict(i, j) for i, j in all_pairs(a))


class TestState:
    def test_it_survives_export_and_import(self) -> None:
        eng = warmed(ADRParams())
        for k in range(3):
            eng.apply_placement(in_order(eng), eng.clock + k)
        back = Engine.from_state(eng.export_state())
        assert (back._pcal, back._pcal_info, back._pcal_n) == (eng._pcal, eng._pcal_info, eng._pcal_n)
        assert all(back.predict_placement(i, j) == eng.predict_placement(i, j) for i, j in all_pairs(eng))

    def test_a_state_loaded_with_it_off_predicts_pairs_as_kills(self) -> None:
        """Turned off (or the calibration with it) at a restart: the saved multipliers are not
        applied, as a replay under the new settings would not have them."""
        eng = warmed(ADRParams())
        fresh = warmed(ADRParams(calibration_memory=0.0))
        for k in range(3):
            match = in_order(eng)
            eng.apply_placement(match, eng.clock + k)
            fresh.apply_placement(match, fresh.clock + k)
        state = eng.export_state()
        off = Engine.from_state(state, ADRParams(placement_calibration=False))
        assert off.placement_calibration == 1.0 and off.calibration == eng.calibration
        assert all(off.predict_placement(i, j) == off.predict(i, j) for i, j in all_pairs(off))
        none = Engine.from_state(state, ADRParams(calibration_memory=0.0))
        assert none.placement_calibration == 1.0 and none.calibration == 1.0
        assert all(none.predict(i, j) == fresh.predict(i, j) for i, j in all_pairs(none))

    def test_a_state_from_before_it_starts_at_one(self) -> None:
        eng = warmed(ADRParams())
        eng.apply_placement(in_order(eng), eng.clock)
        state = eng.export_state()
        for key in ("placement_calibration", "placement_calibration_info", "placement_calibration_steps"):
            del state["scalars"][key]
        back = Engine.from_state(state)
        assert (back._pcal, back._pcal_info, back._pcal_n) == (1.0, CAL_PRIOR, 0.0)
