"""bench/tier_rules.py: its rules are measured against the engine's own, so its "points" rule must
be the engine's §6.4 at tier_pull = 0 exactly, and its "widths" rule a real alternative on the
same ratings."""

from __future__ import annotations

import random

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from bench.tier_rules import make_rule


def _stream(seed: int, players: int = 60, kills: int = 6000) -> list[tuple[str, str, float]]:
    rng = random.Random(seed)
    skill = [rng.gauss(0.0, 1.0) for _ in range(players)]
    out = []
    t = 1_700_000_000.0
    for _ in range(kills):
        a, b = rng.sample(range(players), 2)
        if rng.random() > 1.0 / (1.0 + 2.718281828 ** (skill[b] - skill[a])):
            a, b = b, a
        t += rng.expovariate(1 / 20.0)
        out.append((f"p{a}", f"p{b}", t))
    return out


def _run(engine: Engine, stream: list[tuple[str, str, float]]) -> tuple[list[str | None], int, list[float]]:
    for a, v, t in stream:
        engine.feed(a, v, t)
    tiers = [engine.tier_of(i) for i in range(len(engine))]
    return tiers, engine.tier_changes, [engine.view(i).mu for i in range(len(engine))]


def _patched(rule: str, h: float) -> type[Engine]:
    return type("Patched", (Engine,), {"_tiers_after_event": make_rule(rule, h)})


class TestTierRules:
    def test_points_rule_is_the_engines_own(self) -> None:
        """At the engine's h_req and no pull (the paper's one threshold) the bench's "points" rule
        gives the same tiers, move for move; with the default pull it does not."""
        params = ADRParams(n_min=5, h_req=120.0, tier_pull=0.0)
        for seed in (1, 2):
            stream = _stream(seed)
            own = _run(Engine(params, native=False), stream)
            bench = _run(_patched("points", params.h_req)(params, native=False), stream)
            assert own[1] > 0  # players did change tiers, so the comparison has something to compare
            assert bench == own
            pulled = _run(Engine(ADRParams(n_min=5, h_req=120.0), native=False), stream)
            assert pulled[2] == own[2]  # the pull moves tiers, never ratings
            assert pulled[:2] != own[:2]

    def test_widths_rule_moves_other_players_on_the_same_ratings(self) -> None:
        params = ADRParams(n_min=5, h_req=120.0)
        stream = _stream(3)
        own_tiers, own_changes, own_ratings = _run(Engine(params, native=False), stream)
        tiers, changes, ratings = _run(_patched("widths", 2.0)(params, native=False), stream)
        assert ratings == own_ratings  # tiers feed nothing back into the ratings
        assert (tiers, changes) != (own_tiers, own_changes)
        placed = [k for k in tiers if k is not None]
        assert len(placed) == sum(k is not None for k in own_tiers)  # §6.1 placement is unchanged
