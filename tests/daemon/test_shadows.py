"""Shadow models and score windows without a daemon: the window's figures are the offline metrics,
the shadows see exactly what fresh models fed the same records see, and their state continues."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.daemon.config import ModelsSettings
from arenad.daemon.shadows import UPDATE_SAMPLE, ModelSet, ScoreWindow, adr_prediction
from arenad.daemon.state import JournalRecord, PlacementRecord, Record
from arenad.evaluation import metrics
from arenad.models import BUILTIN_MODELS, ModelFactory, placement_pairs
from arenad.models.base import predict_placement

probabilities = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def reference_scores(
    predictions: Sequence[float], window: int, number: int = 0
) -> tuple[float, float, float, float]:
    """The window's figures (log loss, Brier, ECE, AUC) computed from scratch: the last ``window``
    predictions, prediction m shown reversed when m is odd (``predictions[0]`` is prediction
    ``number``), then the offline metric functions."""
    first = max(0, len(predictions) - window)
    shown, y = [], []
    for k in range(first, len(predictions)):
        p = predictions[k]
        m = number + k
        shown.append(1.0 - p if m % 2 else p)
        y.append(0.0 if m % 2 else 1.0)
    if not shown:
        return math.nan, math.nan, math.nan, math.nan
    return metrics.log_loss(shown, y), metrics.brier(shown, y), metrics.ece(shown, y), metrics.auc(shown, y)


def same(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(
        (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-12, abs=1e-15)
        for x, y in zip(a, b, strict=True)
    )


class TestScoreWindow:
    """A ring buffer of predictions whose figures equal arenad.evaluation.metrics on the same data."""

    @settings(max_examples=300, deadline=None)
    @given(st.lists(probabilities, max_size=120), st.integers(min_value=2, max_value=40))
    def test_figures_equal_the_offline_metrics(self, predictions: list[float], size: int) -> None:
        window = ScoreWindow(size)
        for p in predictions:
            window.add(p)
        assert window.count == len(predictions)
        assert window.filled == min(len(predictions), size)
        assert same(window.scores(), reference_scores(predictions, size))

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(probabilities, max_size=120),
        st.integers(min_value=2, max_value=40),
        st.lists(st.integers(min_value=1, max_value=30), min_size=1),
    )
    def test_inline_stores_committed_per_slice_equal_add(
        self, predictions: list[float], size: int, slices: list[int]
    ) -> None:
        # The engine task stores through ``view`` and commits once per slice, as here.
        window = ScoreWindow(size)
        k = 0
        while k < len(predictions):
            n = slices[k % len(slices)]
            pos = window.pos
            for p in predictions[k : k + n]:
                window.view[pos] = p
                pos = (pos + 1) % size
            window.commit(pos, len(predictions[k : k + n]))
            k += n
        assert same(window.scores(), reference_scores(predictions, size))

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(probabilities, max_size=100),
        st.integers(min_value=2, max_value=30),
        st.integers(min_value=2, max_value=30),
        st.lists(probabilities, max_size=50),
    )
    def test_export_then_restore_continues_even_at_another_size(
        self, before: list[float], size: int, new_size: int, after: list[float]
    ) -> None:
        window = ScoreWindow(size)
        for p in before:
            window.add(p)
        restored = ScoreWindow(new_size)
        restored.restore(window.export())
        for p in after:
            restored.add(p)
        # What the old window no longer held is gone; the rest continues with the same numbering.
        kept = before[max(0, len(before) - min(size, new_size)) :]
        assert restored.count == len(before) + len(after)
        assert restored.filled == min(new_size, len(kept) + len(after))
        assert same(restored.scores(), reference_scores([*kept, *after], new_size, len(before) - len(kept)))

    def test_scores_are_cached_until_the_next_prediction(self) -> None:
        window = ScoreWindow(10)
        window.add(0.7)
        window.add(0.4)
        first = window.scores()
        assert window.scores() is first
        window.add(0.9)
        assert window.scores() is not first

    def test_scores_are_recomputed_at_most_once_per_max_age(self) -> None:
        window = ScoreWindow(10)
        window.add(0.7)
        first = window.scores(max_age=3600.0)  # the first computation is never held back
        assert window.scored_at == 1
        window.add(0.2)
        assert window.scores(max_age=3600.0) is first and window.scored_at == 1
        assert window.scores(max_age=0.0) is not first and window.scored_at == 2

    def test_alternate_orientation_gives_both_classes(self) -> None:
        window = ScoreWindow(4)
        for p in (0.9, 0.8, 0.7, 0.6, 0.55):
            window.add(p)
        shown, y = window.oriented()
        # Predictions 1..4 are in the window: 1 and 3 are shown reversed.
        assert list(y) == [0.0, 1.0, 0.0, 1.0]
        assert list(shown) == pytest.approx([0.2, 0.7, 0.4, 0.55])

    @pytest.mark.parametrize(
        "state",
        [
            {"count": 1, "p": np.array([0.5, 0.5]).tobytes()},  # more predictions than the count
            {"count": 2, "p": np.array([0.5, 1.5]).tobytes()},  # not a probability
            {"count": "2", "p": b""},
            {"p": b""},
        ],
    )
    def test_a_bad_export_is_refused(self, state: dict[str, Any]) -> None:
        with pytest.raises((ValueError, KeyError)):
            ScoreWindow(4).restore(state)


# ---------------------------------------------------------------------------- the model set
def kill_records(n: int, players: int = 12, seed: int = 1, first_seq: int = 1) -> list[Record]:
    rng = random.Random(seed)
    out: list[Record] = []
    for k in range(n):
        a, b = rng.sample(range(players), 2)
        out.append((first_seq + k, 1000.0 + k, f"p{a}", f"p{b}", None, None))
    return out


def mixed_records(n: int, seed: int = 2) -> list[JournalRecord]:
    """Kills with a match placement every 25 records."""
    rng = random.Random(seed)
    out: list[JournalRecord] = []
    for k, rec in enumerate(kill_records(n, seed=seed)):
        if k % 25 == 24:
            players = [f"p{i}" for i in rng.sample(range(12), 5)]
            groups = (tuple(players[:1]), tuple(players[1:3]), tuple(players[3:]))
            out.append(PlacementRecord(k + 1, 1000.0 + k, groups, None, None))
        else:
            out.append((k + 1, *rec[1:]))
    return out


def offline(
    name: str, records: Sequence[JournalRecord], factory: ModelFactory | None = None
) -> tuple[Any, list[float]]:
    """A fresh model fed ``records`` as the daemon's shadows are: predict, then learn."""
    model = (factory or BUILTIN_MODELS[name])()
    predictions: list[float] = []
    for rec in records:
        if isinstance(rec, PlacementRecord):
            pairs = placement_pairs(rec.placements)
            predictions += [predict_placement(model, a, b, rec.t) for a, b in pairs]
            if hasattr(model, "update_match"):
                model.update_match(rec.placements, rec.t)
        elif isinstance(rec, tuple):
            _, t, attacker, victim, _s, _i = rec
            predictions.append(model.predict(attacker, victim, t))
            model.update(attacker, victim, t)
    return model, predictions


class MatchCounter:
    """A tiny model that rates matches: counts them, predicts from the number of wins."""

    def __init__(self) -> None:
        self.name = "match-counter"
        self.wins: dict[str, int] = {}
        self.matches: list[tuple[tuple[str, ...], ...]] = []

    def predict(self, a: str, b: str, t: float) -> float:
        return (1 + self.wins.get(a, 0)) / (2 + self.wins.get(a, 0) + self.wins.get(b, 0))

    def update(self, attacker: str, victim: str, t: float) -> None:
        self.wins[attacker] = self.wins.get(attacker, 0) + 1

    def update_match(self, placements: Sequence[Sequence[str]], t: float) -> None:
        self.matches.append(tuple(tuple(g) for g in placements))
        for player in placements[0]:
            self.wins[player] = self.wins.get(player, 0) + 1

    def rating(self, player: str) -> float:
        return float(self.wins.get(player, 0))

    def display(self, player: str) -> float:
        return self.rating(player)

    def players(self) -> list[str]:
        return list(self.wins)

    def export_state(self) -> dict[str, Any]:
        return {"wins": dict(self.wins), "matches": [list(map(list, m)) for m in self.matches]}

    def import_state(self, state: dict[str, Any]) -> None:
        self.wins = dict(state["wins"])
        self.matches = [tuple(tuple(g) for g in m) for m in state["matches"]]


class Breaks(MatchCounter):
    """Raises on its 30th prediction."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def predict(self, a: str, b: str, t: float) -> float:
        self.calls += 1
        if self.calls == 30:
            raise RuntimeError("model bug")
        return 0.5


class Overconfident(MatchCounter):
    def predict(self, a: str, b: str, t: float) -> float:
        return 1.5


class Unpackable(MatchCounter):
    """Exports something msgpack cannot write."""

    def export_state(self) -> dict[str, Any]:
        return {"wins": object()}


FACTORIES: dict[str, ModelFactory] = {
    **BUILTIN_MODELS,
    "match-counter": MatchCounter,
    "breaks": Breaks,
    "overconfident": Overconfident,
    "unpackable": Unpackable,
}


def model_set(*shadows: str, window: int = 50) -> ModelSet:
    # The test models are not registered (FACTORIES holds them), so validating the settings
    # would refuse their names: build them unvalidated.
    return ModelSet(ModelsSettings.model_construct(shadows=shadows, window=window), FACTORIES)


def run_in_slices(models: ModelSet, records: Sequence[JournalRecord], size: int = 7) -> None:
    for lo in range(0, len(records), size):
        models.run(records, lo, min(lo + size, len(records)))


class TestModelSet:
    """Shadows fed slice by slice see what fresh models fed the whole stream see."""

    def test_kill_shadows_equal_fresh_models(self) -> None:
        records = kill_records(300)
        models = model_set("elo", "glicko2", "trueskill")
        run_in_slices(models, records)
        for shadow in models.shadows:
            model, predictions = offline(shadow.name, records)
            assert shadow.model.export_state() == model.export_state()
            assert same(shadow.window.scores(), reference_scores(predictions, 50))
            assert shadow.window.count == len(predictions) == 300

    def test_placements_are_scored_by_every_model_and_rated_by_match_models(self) -> None:
        records = mixed_records(200)
        models = model_set("elo", "match-counter")
        run_in_slices(models, records, size=11)
        elo, match = models.shadows
        _, elo_predictions = offline("elo", records)
        counter, match_predictions = offline("match-counter", records, MatchCounter)
        pairs = sum(len(r.pairs) for r in records if isinstance(r, PlacementRecord))
        assert len(elo_predictions) == len(match_predictions) == 200 - 8 + pairs
        assert elo.window.count == match.window.count == len(elo_predictions)
        assert same(elo.window.scores(), reference_scores(elo_predictions, 50))
        assert same(match.window.scores(), reference_scores(match_predictions, 50))
        assert match.model.export_state() == counter.export_state()
        assert match.matches == 8 and elo.matches == 0  # elo does not rate matches
        assert elo.update_match is None

    def test_primary_scores_adr_predictions_of_placements(self) -> None:
        engine = Engine()
        for _, t, a, v, _s, _i in kill_records(50):
            engine.feed(a, v, t)
        engine.apply_placement((("p1",), ("p3",), ("p4",)), 1500.0)  # a match moves the pairs' c
        assert engine.placement_calibration != 1.0
        models = model_set()
        rec = PlacementRecord(99, 2000.0, (("p1",), ("p2", "newcomer")), None, None)
        models.score_primary_placement(engine, rec)
        i, j = engine.ids["p1"], engine.ids["p2"]
        p12 = engine.predict_placement(i, j)
        assert p12 != engine.predict(i, j)  # a pair is predicted as a pair, not as a kill
        assert adr_prediction(engine, "p1", "p2") == engine.predict(i, j)
        assert adr_prediction(engine, "p1", "newcomer") == 0.5
        assert list(models.primary.ordered()) == [p12, 0.5]

    def test_an_adr_shadow_predicts_pairs_as_pairs(self) -> None:
        """An ADR shadow that learns matches predicts their pairs with its placement calibration,
        as ``arenad evaluate`` does (base.predict_placement), slice by slice as in one run."""
        records = mixed_records(300)
        models = model_set("adr")
        run_in_slices(models, records, size=9)
        (shadow,) = models.shadows
        model, predictions = offline("adr", records)
        assert shadow.model.export_state() == model.export_state()
        assert same(shadow.window.scores(), reference_scores(predictions, 50))
        assert model.engine.placement_calibration != 1.0
        kills_only = [model.predict(a, b, 0.0) for a, b in placement_pairs((("p1",), ("p2",), ("p3",)))]
        pairs = [predict_placement(model, a, b, 0.0) for a, b in placement_pairs((("p1",), ("p2",), ("p3",)))]
        assert kills_only != pairs

    def test_export_then_import_continues_exactly(self) -> None:
        records = mixed_records(400, seed=5)
        whole = model_set("elo", "glicko2", "match-counter")
        run_in_slices(whole, records)
        first = model_set("elo", "glicko2", "match-counter")
        run_in_slices(first, records[:170])
        second = model_set("elo", "glicko2", "match-counter")
        second.import_state(first.export_state())
        run_in_slices(second, records[170:])
        for a, b in zip(whole.shadows, second.shadows, strict=True):
            assert a.model.export_state() == b.model.export_state()
            assert a.window.export() == b.window.export()
            assert a.matches == b.matches

    def test_configuration_changes_between_runs(self) -> None:
        records = kill_records(100)
        before = model_set("elo", "trueskill")
        run_in_slices(before, records)
        after = model_set("trueskill", "glicko2", window=20)
        after.import_state(before.export_state())
        trueskill, glicko2 = after.shadows
        assert trueskill.window.count == 100 and trueskill.window.filled == 20  # continues
        assert trueskill.model.export_state() == before.shadows[1].model.export_state()
        assert glicko2.window.count == 0  # added: starts here
        after.import_state(None)  # a checkpoint from before shadow models changes nothing

    def test_a_state_that_does_not_import_starts_afresh(self) -> None:
        models = model_set("elo")
        run_in_slices(models, kill_records(20))
        state = models.export_state()
        state["shadows"]["elo"]["state"] = msgpack.packb({"kind": "glicko2"})
        again = model_set("elo")
        again.import_state(state)
        assert again.shadows[0].window.count == 0
        assert again.shadows[0].model.export_state() == BUILTIN_MODELS["elo"]().export_state()

    def test_a_state_that_does_not_serialise_stops_that_model_only(self) -> None:
        models = model_set("unpackable", "elo")
        run_in_slices(models, kill_records(30))
        state = models.export_state()
        assert state["shadows"]["unpackable"]["state"] is None
        assert "export_state" in str(state["shadows"]["unpackable"]["failed"])
        assert state["shadows"]["elo"]["state"] is not None
        assert [s.name for s in models.live] == ["elo"]
        msgpack.packb(state)  # the checkpoint itself is written

    @pytest.mark.parametrize("bad", ["breaks", "overconfident"])
    def test_a_failing_model_is_stopped_and_the_others_go_on(self, bad: str) -> None:
        records = kill_records(100)
        models = model_set(bad, "elo")
        run_in_slices(models, records)
        broken, elo = models.shadows
        assert broken.failed is not None
        assert models.live == [elo]
        assert elo.window.count == 100
        figures = {f.model: f for f in models.figures()}
        assert figures[bad].failed == broken.failed
        # Stopped for good: a restart keeps it stopped instead of feeding it from mid-stream.
        again = model_set(bad, "elo")
        again.import_state(models.export_state())
        assert again.live == [again.shadows[1]]
        assert again.shadows[0].failed == broken.failed

    def test_a_sample_of_records_is_timed_for_every_model(self) -> None:
        models = model_set("elo", "trueskill")
        timed: dict[str, list[float]] = {"elo": [], "trueskill": []}
        models.observers = {name: timed[name].append for name in timed}
        run_in_slices(models, kill_records(10 * UPDATE_SAMPLE), size=13)
        assert len(timed["elo"]) == len(timed["trueskill"]) == 10
        assert all(s >= 0 for s in timed["elo"])

    def test_figures_list_the_primary_first(self) -> None:
        models = model_set("elo", "trueskill")
        figures = models.figures()
        assert [(f.model, f.role) for f in figures] == [
            ("adr", "primary"),
            ("elo", "shadow"),
            ("trueskill", "shadow"),
        ]
        assert all(f.predictions == 0 and math.isnan(f.log_loss) for f in figures)
