"""The §10.4 simulated stream: scenarios land where the truth says, and nothing else changes."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from arenad.core.events import PlacementEvent
from arenad.simulate import (
    DAY,
    SCENARIOS,
    Population,
    ScenarioPlan,
    SimulatedStream,
    event_stream,
    placements_from_kills,
    simulate_stream,
)

# 40 players over 70 days at 3 kills per player-day: every scenario fits, about 3,000 kills.
POP = Population(players=40, days=70, kills_per_player_day=3.0, seed=4)


@pytest.fixture(scope="module")
def full() -> SimulatedStream:
    return simulate_stream(POP, ScenarioPlan())


class TestPlainStream:
    """Without scenarios the generator is the one ``event_stream`` always had; ``events`` fixes the count."""

    @pytest.mark.parametrize("pop", [Population(players=40, days=2), Population(players=12, days=5, seed=3)])
    def test_no_scenarios_is_event_stream(self, pop: Population) -> None:
        plain = simulate_stream(pop)
        assert plain.events == event_stream(pop)
        assert plain.truth.changes == ()
        assert plain.truth.jump is None and plain.truth.absence is None

    def test_events_fixes_the_number_of_kills(self) -> None:
        stream = simulate_stream(Population(players=50, days=9, events=8000))
        assert len(stream.events) == 8000
        assert event_stream(Population(players=50, days=9, events=8000)) == stream.events
        times = [t for _, _, t in stream.events]
        assert times == sorted(times)

    def test_hidden_skills_come_from_the_population(self, full: SimulatedStream) -> None:
        assert dict(full.truth.skills) == dict(
            zip((f"p{i:04d}" for i in range(40)), POP.skills(), strict=True)
        )


class TestJump:
    """The jumping player's hidden skill changes at the jump, and its results follow."""

    def test_jump_is_recorded_mid_stream(self, full: SimulatedStream) -> None:
        jump = full.truth.jump
        assert jump is not None
        assert jump.t == pytest.approx(1_700_000_000.0 + 35 * DAY)
        assert jump.after > jump.before
        assert full.truth.skill_at(jump.player, jump.t - 1) == jump.before
        assert full.truth.skill_at(jump.player, jump.t) == jump.after
        # The jumper starts near the bottom fifth and ends near the top fifth of the field.
        ranked = sorted(full.truth.skills.values())
        assert ranked.index(jump.before) < 0.3 * len(ranked)
        assert sum(s < jump.after for s in ranked) > 0.7 * len(ranked)

    def test_jumper_wins_more_after_the_jump(self, full: SimulatedStream) -> None:
        jump = full.truth.jump
        assert jump is not None

        def win_rate(after: bool) -> float:
            mine = [(a, b) for a, b, t in full.events if jump.player in (a, b) and (t >= jump.t) == after]
            return sum(a == jump.player for a, _ in mine) / len(mine)

        assert win_rate(after=True) > win_rate(after=False) + 0.15

    def test_jump_day_is_configurable(self) -> None:
        stream = simulate_stream(POP, ScenarioPlan(scenarios=("jump",), jump_day=10.0))
        assert stream.truth.jump is not None
        assert stream.truth.jump.t == 1_700_000_000.0 + 10 * DAY


class TestAbsence:
    """The returning player is silent for the whole absence, then comes back with kills in a row."""

    def test_gap_in_the_stream(self, full: SimulatedStream) -> None:
        absence = full.truth.absence
        assert absence is not None
        mine = [t for a, b, t in full.events if absence.player in (a, b)]
        assert not any(absence.left < t < absence.back for t in mine)
        assert absence.back - absence.left > 61 * DAY  # more than §9's T_return = 60 days
        assert min(t for t in mine if t >= absence.back) == absence.back
        assert max(t for t in mine if t < absence.back) == absence.left

    def test_return_run_is_consecutive_kills_by_the_returning_player(self, full: SimulatedStream) -> None:
        absence = full.truth.absence
        assert absence is not None
        assert len(absence.return_events) == 20
        run = [full.events[i] for i in absence.return_events]
        assert all(a == absence.player for a, _, _ in run)
        # 61 s apart: the cooldown never filters one; the victims are strong players.
        assert [t2 - t1 for (_, _, t1), (_, _, t2) in itertools.pairwise(run)] == [61.0] * 19
        median = sorted(full.truth.skills.values())[20]
        assert all(full.truth.skills[v] > median for _, v, _ in run)
        # Its own first 20 events back are exactly the run.
        back = [
            i for i, (a, b, t) in enumerate(full.events) if absence.player in (a, b) and t >= absence.back
        ]
        assert tuple(back[:20]) == absence.return_events
        assert full.truth.skill_at(absence.player, absence.back) == absence.skill_after

    def test_absence_needs_room(self) -> None:
        short = simulate_stream(Population(players=40, days=20), ScenarioPlan())
        assert short.truth.absence is None
        assert "65 days" in short.truth.skipped["absence"]
        assert short.truth.jump is not None  # the others still run
        with pytest.raises(ValueError, match="scenario 'absence' does not fit"):
            simulate_stream(
                Population(players=40, days=20), ScenarioPlan(scenarios=("absence",), strict=True)
            )


class TestFarmingAndBursts:
    """Farming kills hit one weak victim past the cooldown; bursts repeat inside it."""

    def test_farming_pair(self, full: SimulatedStream) -> None:
        farming = full.truth.farming
        assert farming is not None
        kills = [full.events[i] for i in farming.farming_events]
        assert len(kills) == 40
        assert {(a, b) for a, b, _ in kills} == {(farming.attacker, farming.victim)}
        gaps = {t2 - t1 for (_, _, t1), (_, _, t2) in itertools.pairwise(kills)}
        assert gaps == {90.0}
        assert full.truth.skills[farming.victim] == min(full.truth.skills.values())
        # The control kills as often, at the same time, on varied opponents.
        control = [full.events[i] for i in farming.control_events]
        assert len(control) == 40
        assert {a for a, _, _ in control} == {farming.control}
        assert len({b for _, b, _ in control}) >= 30
        assert abs(full.truth.skills[farming.control] - full.truth.skills[farming.attacker]) < 0.5

    def test_bursts_repeat_inside_the_cooldown(self, full: SimulatedStream) -> None:
        assert len(full.truth.bursts) == 20
        for burst in full.truth.bursts:
            kills = [full.events[i] for i in burst.events]
            assert len(kills) == 5
            assert {(a, b) for a, b, _ in kills} == {(burst.attacker, burst.victim)}
            assert kills[-1][2] - kills[0][2] == pytest.approx(40.0)  # 10 s apart: all within 60 s

    def test_injected_events_are_distinct_and_counted(self, full: SimulatedStream) -> None:
        truth = full.truth
        assert truth.absence is not None and truth.farming is not None
        injected = [
            *truth.absence.return_events, *truth.farming.farming_events, *truth.farming.control_events,
            *(i for burst in truth.bursts for i in burst.events),
        ]  # fmt: skip
        assert len(injected) == len(set(injected)) == 20 + 2 * 40 + 20 * 5
        assert max(injected) < len(full.events)

    def test_too_few_players_skips_every_scenario(self) -> None:
        tiny = simulate_stream(Population(players=6, days=70), ScenarioPlan())
        assert set(tiny.truth.skipped) == set(SCENARIOS)
        assert tiny.events == event_stream(Population(players=6, days=70))

    def test_plan_is_validated(self) -> None:
        with pytest.raises(ValueError, match="unknown"):
            ScenarioPlan(scenarios=("jumps",))
        with pytest.raises(ValueError, match="burst_size = 1"):
            ScenarioPlan(burst_size=1)


class TestPlacementsFromKills:
    """A placement event closes every match window, ranking players by kills minus deaths."""

    def test_scoreboard(self) -> None:
        kills = [
            ("a", "b", 0.0), ("a", "c", 10.0), ("b", "c", 20.0),  # a +2, b 0, c -2
            ("c", "a", 130.0), ("d", "c", 140.0), ("e", "d", 150.0),  # e +1, c 0, d 0, a -1
        ]  # fmt: skip
        out = placements_from_kills(kills, 100.0)
        matches = [e for e in out if isinstance(e, PlacementEvent)]
        assert [m.t for m in matches] == [100.0, 200.0]
        assert matches[0].placements == (("a",), ("b",), ("c",))
        assert matches[1].placements == (("e",), ("c", "d"), ("a",))
        assert [e for e in out if not isinstance(e, PlacementEvent)] == kills
        assert Counter(type(e).__name__ for e in out) == Counter({"tuple": 6, "PlacementEvent": 2})
        # Each placement comes after the kills of its match and before the next match's.
        assert out.index(matches[0]) == 3

    def test_match_length_is_validated(self) -> None:
        with pytest.raises(ValueError, match="match_seconds"):
            placements_from_kills([], 0.0)
