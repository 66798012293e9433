"""The cap on tracked players (``max_players``, ``player_cap_policy = "refuse_new"``, docs/adr.md).

The central property: an engine with a cap, fed a stream, is in exactly the state of an uncapped
engine fed the same stream with the refused events left out. Everything else (no growth under a
flood, counting, replay, state files) follows from or complements that.
"""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.engine import REJECT_REASONS, Engine, Outcome
from arenad.core.events import KillEvent
from arenad.core.params import PLAYER_ID_LIMIT, ADRParams
from arenad.replay import replay_events

T0 = 1_700_000_000.0
#: Small thresholds so that short streams reach placement, activity, recalibration and cooldowns.
SMALL = ADRParams(
    n_min=2, n_active=2, p_min=2, t_active=0.01, t_cooldown=10.0, recalibrate_interval=30.0, t_return=0.02
)

Event = tuple[str, str, float]


def core_state(eng: Engine) -> dict[str, Any]:
    """Everything an engine would carry on from, minus its parameters and its reject counters."""
    state = eng.export_state()
    del state["params"], state["rejected"]
    return state


def run(eng: Engine, events: list[Event]) -> list[Outcome]:
    return [eng.feed(a, b, t) for a, b, t in events]


@st.composite
def streams(draw: st.DrawFn) -> list[Event]:
    """Kills among a dozen names: ties, late and too-old times, self-kills and repeats included."""
    names = [f"p{i}" for i in range(12)]
    t = T0
    out: list[Event] = []
    for _ in range(draw(st.integers(0, 80))):
        t += draw(st.sampled_from([0.0, 0.5, 3.0, 11.0, 40.0, 2000.0, -2.0, -9.0]))
        out.append((draw(st.sampled_from(names)), draw(st.sampled_from(names)), t))
    return out


class TestParameters:
    """The cap is always there and validated; it is part of the parameters a state file carries."""

    def test_default_cap_is_large_and_refuse_new(self) -> None:
        p = ADRParams()
        assert p.max_players == 2_000_000
        assert p.player_cap_policy == "refuse_new"

    def test_player_cap_reject_reason_is_named(self) -> None:
        assert REJECT_REASONS[Outcome.PLAYER_CAP] == "player_cap"
        assert set(REJECT_REASONS) == set(Outcome) - {Outcome.APPLIED, Outcome.FILTERED}

    def test_id_space_is_the_upper_limit(self) -> None:
        assert ADRParams(max_players=PLAYER_ID_LIMIT).max_players == 1 << 32


class TestRefuseNew:
    """At the cap, an event with a newcomer is refused whole; tracked players play on."""

    def test_event_with_a_newcomer_at_the_cap_is_refused_and_changes_nothing(self) -> None:
        eng = Engine(ADRParams(max_players=3))
        assert eng.apply("a", "b", T0) is Outcome.APPLIED
        assert eng.apply("a", "c", T0 + 1) is Outcome.APPLIED
        before = core_state(eng)
        assert eng.apply("a", "d", T0 + 2) is Outcome.PLAYER_CAP
        assert eng.apply("d", "e", T0 + 3) is Outcome.PLAYER_CAP
        assert core_state(eng) == before  # the clock included
        assert eng.rejected == {"player_cap": 2}
        assert len(eng) == 3 and "d" not in eng.ids
        assert eng.apply("b", "c", T0 + 4) is Outcome.APPLIED

    def test_two_newcomers_need_two_free_places(self) -> None:
        eng = Engine(ADRParams(max_players=3))
        eng.apply("a", "b", T0)
        assert eng.apply("x", "y", T0 + 1) is Outcome.PLAYER_CAP
        assert eng.apply("a", "x", T0 + 2) is Outcome.APPLIED
        assert len(eng) == 3

    def test_too_old_is_out_of_order_and_self_kill_is_self_kill_at_the_cap(self) -> None:
        eng = Engine(ADRParams(max_players=2))
        eng.apply("a", "b", T0 + 100)
        assert eng.apply("a", "z", T0) is Outcome.OUT_OF_ORDER
        assert eng.apply("z", "z", T0 + 100) is Outcome.SELF_KILL
        assert eng.apply("a", "z", T0 + 98) is Outcome.PLAYER_CAP  # late but within tolerance
        assert eng.rejected == {"out_of_order": 1, "self_kill": 1, "player_cap": 1}
        assert eng.late_applied == 0

    def test_refused_event_never_triggers_a_recalibration(self) -> None:
        eng = Engine(replace(SMALL, max_players=2))
        eng.feed("a", "b", T0)
        due = eng.next_recalibration
        assert not eng.recalibration_due_before("a", "c", due + 1)
        assert eng.feed("a", "c", due + 1) is Outcome.PLAYER_CAP
        assert eng.next_recalibration == due
        assert eng.recalibration_due_before("b", "a", due + 1)

    def test_seeding_beyond_the_cap_is_refused(self) -> None:
        eng = Engine(ADRParams(max_players=2))
        eng.seed_player("a", mu=1000.0, sigma=100.0, n=3, last_t=T0)
        eng.seed_player("b", mu=1000.0, sigma=100.0, n=3, last_t=T0)
        with pytest.raises(ValueError, match="max_players=2"):
            eng.seed_player("c", mu=1000.0, sigma=100.0, n=3, last_t=T0)
        assert len(eng) == 2


class TestEquivalence:
    """Capped engine == uncapped engine fed the stream minus the refused events, bit for bit."""

    @settings(deadline=None, max_examples=300)
    @given(events=streams(), cap=st.integers(2, 10), anchor=st.booleans())
    def test_capped_equals_uncapped_without_the_refused_events(
        self, events: list[Event], cap: int, anchor: bool
    ) -> None:
        capped = Engine(replace(SMALL, max_players=cap, anchor=anchor))
        outcomes: list[Outcome] = []
        for a, b, t in events:
            newcomers = (a not in capped.ids) + (b not in capped.ids)
            size = len(capped)
            outcome = capped.feed(a, b, t)
            outcomes.append(outcome)
            assert len(capped) <= cap
            if outcome is Outcome.PLAYER_CAP:
                assert newcomers and size + newcomers > cap
            elif outcome is Outcome.APPLIED:
                assert size + newcomers <= cap
        kept = [ev for ev, o in zip(events, outcomes, strict=True) if o is not Outcome.PLAYER_CAP]
        uncapped = Engine(replace(SMALL, anchor=anchor))
        assert run(uncapped, kept) == [o for o in outcomes if o is not Outcome.PLAYER_CAP]
        assert core_state(capped) == core_state(uncapped)
        refused = outcomes.count(Outcome.PLAYER_CAP)
        expected = dict(uncapped.rejected, player_cap=refused) if refused else uncapped.rejected
        assert capped.rejected == expected
        assert capped.ladder_is_consistent()

    @settings(deadline=None, max_examples=100)
    @given(events=streams())
    def test_a_cap_never_reached_changes_nothing(self, events: list[Event]) -> None:
        capped = Engine(replace(SMALL, max_players=12))  # the strategy uses 12 names
        uncapped = Engine(SMALL)
        assert run(capped, events) == run(uncapped, events)
        assert core_state(capped) == core_state(uncapped)
        assert capped.rejected == uncapped.rejected


class TestFlood:
    """A flood of invented ids stops costing memory at the cap; real players keep being rated."""

    CAP = 2_000

    @staticmethod
    def _fill(eng: Engine, n: int, t: float) -> float:
        for i in range(0, n, 2):
            t += 1.0
            assert eng.apply(f"real{i}", f"real{i + 1}", t) is Outcome.APPLIED
        return t

    def test_memory_stops_growing_at_the_cap(self) -> None:
        eng = Engine(ADRParams(max_players=self.CAP))
        gc.collect()
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            t = self._fill(eng, self.CAP, T0)
            gc.collect()
            at_cap = tracemalloc.get_traced_memory()[0]
            for i in range(50_000):
                t += 0.01
                assert eng.apply(f"forged{i}a", f"forged{i}b", t) is Outcome.PLAYER_CAP
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        per_player = (at_cap - start) / self.CAP
        assert per_player > 100  # the fill did track players, so the bound below means something
        # 50,000 refused events (25 times the tracked players) cost less than 20 players would.
        assert after - at_cap < 20 * per_player
        assert len(eng) == self.CAP
        assert eng.rejected == {"player_cap": 50_000}

    def test_tracked_players_are_rated_during_a_flood(self) -> None:
        eng = Engine(ADRParams(max_players=self.CAP))
        t = self._fill(eng, self.CAP, T0)
        applied = 0
        for i in range(5_000):
            t += 0.5
            assert eng.apply(f"forged{i}", "real0", t) is Outcome.PLAYER_CAP
            a, b = (2 * i) % self.CAP, (2 * i + 3) % self.CAP
            applied += eng.apply(f"real{a}", f"real{b}", t) is Outcome.APPLIED
        assert applied == 5_000
        assert eng.rejected == {"player_cap": 5_000}


class TestReplayAndState:
    """Replay refuses the same events; state files keep working, old ones included."""

    def _events(self) -> list[KillEvent]:
        return [
            KillEvent(t=T0 + 7.0 * i, attacker=f"p{i % 9}", victim=f"p{(3 * i + 1) % 13}") for i in range(400)
        ]

    def test_replay_gives_the_same_refusals(self) -> None:
        events = self._events()
        live = Engine(replace(SMALL, max_players=6))
        live_outcomes = run(live, [(e.attacker, e.victim, e.t) for e in events])
        first = replay_events(eng1 := Engine(replace(SMALL, max_players=6)), events)
        second = replay_events(eng2 := Engine(replace(SMALL, max_players=6)), events)
        refused = live_outcomes.count(Outcome.PLAYER_CAP)
        assert refused > 0
        assert first.rejected["player_cap"] == second.rejected["player_cap"] == refused
        assert first.players == 6
        assert core_state(eng1) == core_state(eng2) == core_state(live)

    def test_round_trip_keeps_the_cap_and_continues_identically(self) -> None:
        events = [(e.attacker, e.victim, e.t) for e in self._events()]
        straight = Engine(replace(SMALL, max_players=6))
        first = Engine(replace(SMALL, max_players=6))
        run(straight, events[:200])
        run(first, events[:200])
        resumed = Engine.from_state(first.export_state())
        assert resumed.params.max_players == 6
        assert run(resumed, events[200:]) == run(straight, events[200:])
        assert core_state(resumed) == core_state(straight)
        assert resumed.rejected == straight.rejected

    def test_state_saved_before_the_cap_existed_loads_with_the_defaults(self) -> None:
        eng = Engine(SMALL)
        run(eng, [(e.attacker, e.victim, e.t) for e in self._events()[:100]])
        state = eng.export_state()
        # What a STATE_VERSION 2 file written before these keys existed holds.
        del state["params"]["max_players"], state["params"]["player_cap_policy"]
        resumed = Engine.from_state(state)
        assert resumed.params == SMALL
        assert core_state(resumed) == core_state(eng)

    def test_lowering_the_cap_below_the_tracked_count_keeps_everyone(self) -> None:
        eng = Engine(SMALL)
        run(eng, [(e.attacker, e.victim, e.t) for e in self._events()[:100]])
        tracked = len(eng)
        resumed = Engine.from_state(eng.export_state(), replace(SMALL, max_players=2))
        assert len(resumed) == tracked > 2
        t = resumed.clock + 100.0
        assert resumed.apply("p0", "p1", t) is Outcome.APPLIED
        assert resumed.apply("p0", "newcomer", t + 1) is Outcome.PLAYER_CAP
        assert len(resumed) == tracked
