"""Anti-boosting gates and the boosting report (``arenad/gates.py``) through the applier."""

from __future__ import annotations

import math
import random
import struct
import zlib

import msgpack
import pytest

from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.daemon.state import read_records
from arenad.gates import GateConfig, Gates, binomial_tail
from arenad.records import ControlRecord, JournalRecord, PlacementRecord
from arenad.scopes import Rule, ScopeConfig, ScopeSet

T0 = 1_790_000_000.0


def kill(seq: int, t: float, a: str, v: str, server: str | None = "eu-1") -> JournalRecord:
    return (seq, t, a, v, server, None)


def gated_scopes(**gates: object) -> ScopeSet:
    return ScopeSet(ADRParams(), ScopeConfig(gates=GateConfig(**gates)))  # type: ignore[arg-type]


def run(scopes: ScopeSet, records: list[JournalRecord | None]) -> Applier:
    applier = Applier(scopes)
    applier.apply_chunk(records)
    return applier


class TestMinPlayers:
    """A server's kills are rated only with enough distinct players seen in the window."""

    def test_two_friends_alone_are_never_rated_until_others_come(self) -> None:
        scopes = gated_scopes(min_players=4, window=300.0)
        duo = [kill(k + 1, T0 + 20 * k, *(("a", "b") if k % 2 else ("b", "a"))) for k in range(10)]
        applier = run(scopes, list(duo))
        assert applier.tally.gated == {"min_players": 10} and applier.tally.applied == 0
        crowd = [kill(11, T0 + 210, "c", "d"), kill(12, T0 + 220, "a", "c")]
        applier = run(scopes, list(crowd))
        # c and d make four players seen within 300 s: the first kill in a full server is rated.
        assert applier.tally.applied == 2 and not applier.tally.gated

    def test_players_leave_the_count_after_the_window(self) -> None:
        scopes = gated_scopes(min_players=3, window=60.0)
        records: list[JournalRecord | None] = [kill(1, T0, "a", "b"), kill(2, T0 + 1, "c", "a")]
        records += [kill(3, T0 + 100, "a", "b")]  # c was last seen 99 s ago
        applier = run(scopes, records)
        assert applier.tally.applied == 1 and applier.tally.gated == {"min_players": 2}

    def test_servers_are_counted_apart(self) -> None:
        scopes = gated_scopes(min_players=3)
        records: list[JournalRecord | None] = [
            kill(1, T0, "a", "b", "eu-1"),
            kill(2, T0 + 5, "c", "d", "eu-2"),
            kill(3, T0 + 10, "a", "c", "eu-1"),  # three on eu-1 now
        ]
        applier = run(scopes, records)
        assert applier.tally.applied == 1 and records[2] is not None and records[0] is None


class TestBots:
    """The bot policy: rated, excluded, or rated and hidden."""

    @staticmethod
    def records() -> list[JournalRecord | None]:
        return [kill(1, T0, "bot:Sarge", "alice"), kill(2, T0 + 10, "alice", "bob")]

    def test_excluded_bots_rate_nothing_and_do_not_count_as_players(self) -> None:
        scopes = gated_scopes(bots="excluded", min_players=3)
        applier = run(scopes, self.records())
        assert applier.tally.gated == {"bot": 1, "min_players": 1}
        assert "bot:Sarge" not in scopes.global_engine.ids

    def test_hidden_bots_are_rated_but_hidden(self) -> None:
        scopes = gated_scopes(bots="hidden")
        assert scopes.gates is None  # nothing to gate: the plain path stays
        applier = run(scopes, self.records())
        assert applier.tally.applied == 2
        assert scopes.is_hidden("bot:Sarge") and not scopes.is_hidden("alice")
        assert "hidden" not in scopes.export_state() and "gates" not in scopes.export_state()

    def test_rated_bots_count_as_players(self) -> None:
        scopes = gated_scopes(min_players=3)
        applier = run(scopes, self.records())
        assert applier.tally.applied == 1  # the second kill: Sarge, alice and bob seen


class TestSuspects:
    """The boosting report: a farm stands out, fair play does not."""

    def test_binomial_tail_matches_a_direct_sum(self) -> None:
        n, p = 30, 0.1
        direct = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(8, n + 1))
        assert binomial_tail(8, n, p) == pytest.approx(direct, rel=1e-9)
        assert binomial_tail(0, n, p) == 1.0 and binomial_tail(31, n, p) == 0.0

    def test_a_farmed_victim_is_reported_with_the_rating_gained(self) -> None:
        rng = random.Random(4)
        scopes = gated_scopes(suspects=True, suspect_min_kills=10)
        players = [f"p{k}" for k in range(10)]
        records: list[JournalRecord | None] = []
        t = T0
        for k in range(2000):
            t += 3.0
            if k % 4 == 0:
                a, v = "booster", "feeder"
            else:
                a, v = rng.sample([*players, "booster", "feeder"], 2)
            records.append(kill(k + 1, t, a, v))
        run(scopes, records)
        assert scopes.gates is not None
        found = scopes.gates.suspects()
        assert [(s.attacker, s.victim) for s in found] == [("booster", "feeder")]
        s = found[0]
        # Most repeats fall in the §2.1 cooldown: only rated kills count.
        assert s.share > 0.4 and s.chance == pytest.approx(1 / 11, rel=0.1) and s.p_value < 1e-30
        assert s.gained > 0.0

    def test_fair_play_reports_nobody(self) -> None:
        rng = random.Random(5)
        scopes = gated_scopes(suspects=True)
        players = [f"p{k}" for k in range(12)]
        records: list[JournalRecord | None] = [
            kill(k + 1, T0 + 3.0 * k, *rng.sample(players, 2)) for k in range(5000)
        ]
        run(scopes, records)
        assert scopes.gates is not None and scopes.gates.suspects() == []

    def test_kills_leave_the_report_after_its_window(self) -> None:
        scopes = gated_scopes(suspects=True, suspect_window=600.0, suspect_min_kills=3)
        records: list[JournalRecord | None] = [kill(k + 1, T0 + 5 * k, "a", "b") for k in range(0, 40, 2)]
        run(scopes, records)
        gates = scopes.gates
        assert gates is not None and len(gates._window) <= 600 / 10 + 1


class TestState:
    """The gates' state is in the scope state only when configured, and comes back whole."""

    def test_no_gate_no_key(self) -> None:
        assert "gates" not in ScopeSet(ADRParams()).export_state()

    def test_round_trip(self) -> None:
        cfg = ScopeConfig(gates=GateConfig(min_players=2, suspects=True, suspect_min_kills=2))
        scopes = ScopeSet(ADRParams(), cfg)
        run(scopes, [kill(k + 1, T0 + 4 * k, "a", "b" if k % 3 else "c") for k in range(30)])
        state = msgpack.unpackb(msgpack.packb(scopes.export_state()), raw=False, strict_map_key=False)
        back = ScopeSet.from_state(state, ADRParams(), cfg)
        assert back.export_state() == scopes.export_state()
        assert back.gates is not None and back.gates.suspects() == scopes.gates.suspects()  # type: ignore[union-attr]

    def test_a_state_from_before_the_gates_loads_with_nobody_seen(self) -> None:
        old = ScopeSet(ADRParams()).export_state()
        back = ScopeSet.from_state(old, ADRParams(), ScopeConfig(gates=GateConfig(min_players=3)))
        assert isinstance(back.gates, Gates) and back.gates.seen == {}


class TestMerges:
    """A merged player's events are rated as the other's; include undoes it."""

    def test_kills_and_placements_after_a_merge_are_the_others(self) -> None:
        scopes = ScopeSet(ADRParams())
        merge = Rule(1, player="name:Tony", into="guid:T", reason="same")
        records: list[JournalRecord | None] = [
            kill(1, T0, "guid:T", "b"),
            ControlRecord(2, T0 + 1, "merge", merge.as_dict()),
            kill(3, T0 + 10, "name:Tony", "b"),
            kill(4, T0 + 20, "c", "name:Tony"),
            kill(5, T0 + 30, "name:Tony", "guid:T"),  # one player now: a self-kill
            PlacementRecord(6, T0 + 40, (("name:Tony",), ("guid:T",), ("b",)), None, None),
        ]
        applier = run(scopes, records)
        assert "name:Tony" not in scopes.global_engine.ids
        assert records[2] == (3, T0 + 10, "guid:T", "b", "eu-1", None)
        # Tony's kill of b repeats guid:T's within the §2.1 cooldown: one player, one pair.
        assert (applier.tally.applied, applier.tally.filtered) == (2, 1)
        assert applier.tally.rejected == {"self_kill": 1}
        assert records[5] is not None and records[5].placements == (("guid:T",), ("b",))  # type: ignore[union-attr]
        assert scopes.exclusions.aliases == {"name:Tony": "guid:T"}
        assert scopes.exclusions.export() == [merge.as_dict()]
        run(scopes, [ControlRecord(7, T0 + 50, "include", {"id": 1})])
        assert scopes.exclusions.aliases == {}

    def test_chains_resolve_to_their_end_and_rules_keep_their_bytes(self) -> None:
        scopes = ScopeSet(ADRParams())
        scopes.exclusions.add(Rule(1, player="a", into="b"))
        scopes.exclusions.add(Rule(2, player="b", into="c"))
        assert scopes.exclusions.resolve("a") == "c"
        assert "into" not in Rule(3, player="x").as_dict()
        assert Rule.from_dict(Rule(4, player="a", into="b").as_dict()).into == "b"


class TestOldJournal:
    """The journal format is unchanged: a journal written before the gates is gated when read."""

    def test_a_chunk_of_the_first_layout_is_gated_by_its_bot_ids(self) -> None:
        # [first_seq, rows] with rows [t, attacker, victim, server, id]: the layout arenad has
        # always written for kills (daemon/state.py), bots named bot:<name> by both feeds.
        body = msgpack.packb(
            [1, [[T0, "bot:Sarge", "alice", "eu-1", None], [T0 + 5, "alice", "bob", "eu-1", None]]],
            use_bin_type=True,
        )
        data = struct.pack("<II", len(body), zlib.crc32(body)) + body
        records, end = read_records(data)
        assert end == len(data) and len(records) == 2
        scopes = gated_scopes(bots="excluded")
        applier = run(scopes, list(records))
        assert applier.tally.gated == {"bot": 1} and applier.tally.applied == 1
