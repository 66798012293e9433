"""Placement events in the walk-forward harness: every pair predicted first, then only match models learn."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from arenad.core.events import KillEvent, PlacementEvent
from arenad.evaluation.walkforward import StreamEvent, evaluate_stream, replay, walk_forward
from arenad.models import discover_models, rates_matches

MATCH = PlacementEvent(10.0, (("a",), ("b", "c"), ("d",)))
# (better, worse) pairs of MATCH: a over b, c, d; b and c over d. b and c tie: no pair.
PAIRS = [("a", "b"), ("a", "c"), ("a", "d"), ("b", "d"), ("c", "d")]


class KillOnly:
    """Logs calls; has no update_match."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def predict(self, a: str, b: str, t: float) -> float:
        self.calls.append(("predict", a, b))
        return 0.6

    def update(self, attacker: str, victim: str, t: float) -> None:
        self.calls.append(("update", attacker, victim))


class Matches(KillOnly):
    """Also rates matches."""

    def update_match(self, placements: Sequence[Sequence[str]], t: float) -> None:
        self.calls.append(("update_match", *(",".join(g) for g in placements)))


def stream() -> list[StreamEvent]:
    return [("a", "b", 1.0), KillEvent(2.0, "c", "d"), MATCH, ("d", "a", 11.0)]


class TestPlacementPairs:
    """A placement is one prediction per (better, worse) pair, before the match is learnt."""

    def test_every_pair_is_predicted_before_update_match(self) -> None:
        match, kills = Matches(), KillOnly()
        walk_forward({"match": match, "kills": kills}, stream(), test_every=100, block=10)
        predicted = [("predict", a, b) for a, b in PAIRS]
        assert match.calls == [
            ("predict", "a", "b"), ("update", "a", "b"), ("predict", "c", "d"), ("update", "c", "d"),
            *predicted, ("update_match", "a", "b,c", "d"),
            ("predict", "d", "a"), ("update", "d", "a"),
        ]  # fmt: skip
        # The kill-only model predicts the same pairs and learns nothing from the match.
        assert kills.calls == [c for c in match.calls if c[0] != "update_match"]

    def test_counts(self) -> None:
        pred = walk_forward({"m": Matches()}, stream(), test_every=100, block=10)
        assert (pred.events, pred.kills, pred.placements) == (4, 3, 1)
        assert len(pred.event) == 3 + len(PAIRS)
        assert pred.event.tolist() == [0, 1, 2, 2, 2, 2, 2, 3]
        assert pred.pair.tolist() == [False, False, True, True, True, True, True, False]
        report = evaluate_stream({"m": Matches()}, stream(), test_every=100, block=10)["m"]
        assert report["online_n"] == 8

    def test_a_held_out_match_is_predicted_and_not_learnt(self) -> None:
        match = Matches()
        # Blocks of one event, every 3rd held out: event 2 (the match) is held out.
        pred = walk_forward({"m": match}, stream(), test_every=3, block=1)
        assert not any(c[0] == "update_match" for c in match.calls)
        assert pred.held_out.tolist() == [False, False, True, True, True, True, True, False]

    def test_replay_learns_matches_too(self) -> None:
        match, kills = Matches(), KillOnly()
        assert replay({"match": match, "kills": kills}, stream()) == 4
        assert ("update_match", "a", "b,c", "d") in match.calls
        assert not any(c[0] == "predict" for c in match.calls)
        assert len(kills.calls) == 3


MATCH_MODELS = sorted(name for name, make in discover_models()[0].items() if rates_matches(make()))


class TestRealMatchModels:
    """Every installed model that rates matches learns a player who always wins its matches."""

    def test_there_is_at_least_one(self) -> None:
        assert MATCH_MODELS

    @pytest.mark.parametrize("name", MATCH_MODELS)
    def test_learns_from_placements_only(self, name: str) -> None:
        models = discover_models()[0]
        model, elo = models[name](), models["elo"]()
        matches = [PlacementEvent(100.0 * k, (("ace",), ("mid",), ("low",))) for k in range(1, 30)]
        pred = walk_forward({"m": model, "elo": elo}, matches, test_every=100, block=1000)
        assert pred.placements == 29
        assert model.predict("ace", "low", 4000.0) > 0.8
        assert elo.predict("ace", "low", 4000.0) == 0.5  # kill-only: learnt nothing
        assert pred.p["elo"].tolist() == [0.5] * (29 * 3)
