"""Every built-in model that rates match placements keeps the ``MatchModel`` contract (base.py)."""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from typing import Any, Protocol

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.models import BUILTIN_MODELS, MatchModel, RatingModel, rates_matches

MATCH_MODELS = sorted(name for name, factory in BUILTIN_MODELS.items() if rates_matches(factory()))
PLAYERS = [f"p{i}" for i in range(10)]


class Model(RatingModel, MatchModel, Protocol):
    """What these tests hold: a rating model that also rates matches."""


def make(name: str) -> Model:
    model = BUILTIN_MODELS[name]()
    assert isinstance(model, MatchModel)
    return model


def matches(n: int, seed: int) -> list[list[list[str]]]:
    """Matches of 2-8 of PLAYERS, placed by a hidden skill order (lower index stronger), ties."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chosen = rng.sample(range(len(PLAYERS)), rng.randint(2, 8))
        chosen.sort(key=lambda i: i + rng.gauss(0.0, 2.0))
        groups: list[list[str]] = []
        for i in chosen:
            if groups and rng.random() < 0.15:
                groups[-1].append(PLAYERS[i])
            else:
                groups.append([PLAYERS[i]])
        out.append(groups)
    return out


Event = tuple[str, str] | list[list[str]]  # a kill (attacker, victim) or a match


def mixed_events() -> list[Event]:
    """60 matches, each followed by three kills."""
    rng = random.Random(3)
    events: list[Event] = []
    for groups in matches(60, seed=2):
        events.append(groups)
        for _ in range(3):
            a, b = rng.sample(PLAYERS, 2)
            events.append((a, b))
    return events


def play(model: Model, events: list[Event]) -> None:
    for i, event in enumerate(events):
        if isinstance(event, tuple):
            model.update(event[0], event[1], float(i))
        else:
            model.update_match(event, float(i))


def snapshot(model: Model) -> list[tuple[str, float, float]]:
    return [(p, model.rating(p), model.display(p)) for p in model.players()]


class TestWhichModels:
    """The three placement models rate matches; the kill-only ones do not."""

    def test_set(self) -> None:
        # ADR with its defaults learns placements (placement_weight = 1); the paper's does not
        assert MATCH_MODELS == ["adr", "glicko2-mp", "openskill", "trueskill-ffa"]

    def test_kill_only_models(self) -> None:
        for name in ("adr-paper", "adr-printed", "elo", "glicko2", "glicko2-period", "trueskill"):
            assert not rates_matches(BUILTIN_MODELS[name]())


@pytest.mark.parametrize("name", MATCH_MODELS)
class TestMatchContract:
    """Placements move ratings in placement order, from the prior, and only for the players in them."""

    def test_first_match_orders_the_players(self, name: str) -> None:
        model = make(name)
        prior = model.rating("nobody")
        model.update_match([["a"], ["b"], ["c"], ["d"]], 0.0)
        ratings = [model.rating(p) for p in "abcd"]
        assert ratings[0] > prior > ratings[3]
        assert ratings == sorted(ratings, reverse=True)
        assert model.display("a") > model.display("d")
        assert model.predict("a", "d", 1.0) > 0.5
        assert model.players() == ["a", "b", "c", "d"]

    def test_only_the_players_of_the_match_change(self, name: str) -> None:
        model = make(name)
        model.update_match([["a"], ["b"], ["c"]], 0.0)
        before = model.rating("c"), model.display("c")
        model.update_match([["a"], ["b"], ["x"]], 1.0)
        assert (model.rating("c"), model.display("c")) == before

    def test_learns_the_hidden_order(self, name: str) -> None:
        model = make(name)
        for groups in matches(300, seed=1):
            model.update_match(groups, 0.0)
        assert model.rating("p0") > model.rating("p5") > model.rating("p9")
        assert model.predict("p0", "p9", 0.0) > 0.7

    def test_a_winner_against_a_tie(self, name: str) -> None:
        model = make(name)
        model.update_match([["a"], ["b", "c"]], 0.0)
        assert model.rating("a") > model.rating("b")
        assert model.rating("a") > model.rating("c")

    def test_duplicate_player_refused(self, name: str) -> None:
        with pytest.raises(ValueError, match="placed twice"):
            make(name).update_match([["a"], ["b"], ["a"]], 0.0)

    def test_fewer_than_two_players_changes_nothing(self, name: str) -> None:
        model = make(name)
        model.update_match([], 0.0)
        model.update_match([["solo"]], 0.0)
        assert model.players() == []

    def test_big_match(self, name: str) -> None:
        model = make(name)
        model.update_match([[f"x{i}"] for i in range(256)], 0.0)
        ratings = [model.rating(f"x{i}") for i in range(256)]
        assert all(math.isfinite(r) for r in ratings)
        assert ratings == sorted(ratings, reverse=True)


@pytest.mark.parametrize("name", MATCH_MODELS)
class TestStateWithMatches:
    """Kills and matches mixed: an exported state continues identically (also through JSON)."""

    def _continue(self, name: str, restore: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        events = mixed_events()
        half = len(events) // 2
        original = make(name)
        play(original, events[:half])
        restored = make(name)
        restored.import_state(restore(original.export_state()))
        assert snapshot(restored) == snapshot(original)
        play(original, events[half:])
        play(restored, events[half:])
        assert snapshot(restored) == snapshot(original)

    def test_round_trip(self, name: str) -> None:
        self._continue(name, copy.deepcopy)

    def test_json_round_trip(self, name: str) -> None:
        # ADR's state is binary columns for its msgpack checkpoint (tests/core/test_engine.py,
        # tests/daemon/test_state.py): a JSON round trip goes through msgpack there instead.
        dumps = (lambda s: msgpack.unpackb(msgpack.packb(s))) if name == "adr" else None
        self._continue(name, dumps or (lambda s: dict(json.loads(json.dumps(s)))))


PLACEMENTS = st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=4), min_size=1, max_size=6)
EVENTS = st.lists(st.one_of(PLACEMENTS, st.tuples(st.integers(0, 9), st.integers(0, 9))), max_size=60)


def distinct(raw: list[list[int]]) -> list[list[str]]:
    """Placements from drawn groups of player numbers: each player kept where first placed."""
    seen: set[int] = set()
    groups: list[list[str]] = []
    for group in raw:
        names = [PLAYERS[i] for i in dict.fromkeys(group) if i not in seen]
        seen.update(group)
        if names:
            groups.append(names)
    return groups


@pytest.mark.parametrize("name", MATCH_MODELS)
class TestRobustness:
    """Any mix of kills and matches keeps ratings finite and predictions probabilities."""

    @settings(max_examples=40, deadline=None)
    @given(events=EVENTS)
    def test_random_streams(self, name: str, events: list[list[list[int]] | tuple[int, int]]) -> None:
        model = make(name)
        for event in events:
            if isinstance(event, tuple):
                a, b = PLAYERS[event[0]], PLAYERS[event[1]]
                assert 0.0 <= model.predict(a, b, 0.0) <= 1.0
                model.update(a, b, 0.0)
            else:
                model.update_match(distinct(event), 0.0)
        for player in model.players():
            assert math.isfinite(model.rating(player))
            assert math.isfinite(model.display(player))

    def test_the_same_player_wins_every_match(self, name: str) -> None:
        model = make(name)
        for i in range(300):
            others = [PLAYERS[(i + k) % 9] for k in range(3)]
            model.update_match([["champ"], others[:1], others[1:]], 0.0)
        ratings = {p: model.rating(p) for p in model.players()}
        assert all(math.isfinite(r) for r in ratings.values())
        assert max(ratings, key=ratings.__getitem__) == "champ"
