"""The record applier (``arenad/daemon/applier.py``): its commands, and its four drivers agreeing.

The four-drivers test feeds one stream holding every record kind through the live daemon's
engine step (``Pipeline.commit``: journal, fsync, ``apply``), recovery from that journal (no
checkpoint was written: as after ``kill -9``), history rebuild (``rebuild_from_history`` and
``arenad recompute --offline``) and ``arenad replay --scope`` (``replay_scoped``), and requires
byte-identical scope states (``ScopeSet.export_state`` through msgpack, every engine's columns
and counters). The live daemon is driven in-process: a real process receives UDP datagrams and
admin operations on separate sockets, in no order a test can fix between them, and its admin's
exclude starts a recompute that replaces the live state while the test reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
from dataclasses import astuple
from pathlib import Path
from typing import Any

import msgpack
import pytest

from arenad.core.engine import REJECT_REASONS, Engine, Outcome
from arenad.core.events import KillEvent, PlacementEvent
from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier, Rated, RecalibrationDue, SliceEnd
from arenad.daemon.history import rebuild_from_history
from arenad.daemon.live import LiveState
from arenad.daemon.recovery import offline_recompute
from arenad.daemon.service import Daemon
from arenad.daemon.state import Checkpoints, ControlRecord, JournalRecord, PlacementRecord, StateError
from arenad.replay import replay_scoped
from arenad.scopes import Exclusions, Rule, ScopeConfig, ScopeSet
from arenad.sessions import Session
from arenad.settings import Settings, load_settings

T0 = 1_790_000_000.0
ALL_KINDS = '["global", "server", "season", "event"]'


def packed(state: dict[str, Any]) -> bytes:
    return bytes(msgpack.packb(state, use_bin_type=True))


def canon(state: dict[str, Any]) -> bytes:
    """A state as a checkpoint stores it (tuples become lists), packed."""
    return packed(msgpack.unpackb(packed(state), raw=False, strict_map_key=False))


def kill(seq: int, t: float, a: str, v: str, server: str | None = "eu-1") -> JournalRecord:
    return (seq, t, a, v, server, None)


def settings_for(tmp_path: Path, state: Path, kinds: str, extra: str = "") -> Settings:
    path = tmp_path / f"arenad-{state.name}.toml"
    path.write_text(
        f"""
[daemon]
state_dir = "{state}"
[metrics]
listen = "off"
[admin]
unix = "off"
[scopes]
kinds = {kinds}
[[scopes.event]]
name = "cup"
start = {T0 + 900.0}
end = {T0 + 1800.0}
{extra}"""
    )
    return load_settings(path)


def stream(*, cheat_before_exclude: bool = False) -> list[JournalRecord]:
    """Kills (cooldown repeats, self-kills, late and out-of-order ones, newcomers throughout, over
    several recalibration intervals), placements, a season start, two exclusion rules and the
    inclusion of one of them, a merge, bots, as the engine task journals them."""
    rng = random.Random(15)
    out: list[JournalRecord] = []
    t = T0

    def seq() -> int:
        return len(out) + 1

    for k in range(3000):
        t += rng.uniform(0.2, 1.4)
        players = 20 + k // 60  # newcomers keep arriving
        a, v = (f"p{n:03d}" for n in rng.sample(range(players), 2))
        server = rng.choice(("eu-1", "eu-2", "us-1", None))
        roll = rng.random()
        if roll < 0.05 and out and isinstance(out[-1], tuple):
            prev = out[-1]
            out.append(kill(seq(), t, prev[2], prev[3], prev[4]))  # a cooldown repeat
        elif roll < 0.07:
            out.append(kill(seq(), t, a, a, server))  # a self-kill
        elif roll < 0.09:
            out.append(kill(seq(), t - 30.0, a, v, server))  # late: refused
        elif roll < 0.12:
            out.append(kill(seq(), t - 2.0, a, v, server))  # out of order, within tolerance
        elif roll < 0.14:
            groups = tuple((f"p{n:03d}",) for n in rng.sample(range(players), 4))
            out.append(PlacementRecord(seq(), t, groups, server, f"m{k}"))
        else:
            out.append(kill(seq(), t, a, v, server))
        if k == 700:
            out.append(ControlRecord(seq(), t, "season_start", {"name": "s1", "alpha": 1.5, "lambda": 0.2}))
        if k == 1200:
            rule = Rule(1, player="cheat", reason="aimbot")
            out.append(ControlRecord(seq(), t, "exclude", rule.as_dict()))
        if k == 1500:
            window = Rule(2, server="us-1", start=T0 + 100.0, end=T0 + 200.0)
            out.append(ControlRecord(seq(), t, "exclude", window.as_dict()))
        if k == 1600:
            out.append(ControlRecord(seq(), t, "include", {"id": 2}))
        if k in (400, 900):  # p001 hides, p002 hides and shows again
            out.append(
                ControlRecord(seq(), t, "hide", {"player": {400: "p001", 900: "p002"}[k], "reason": ""})
            )
        if k == 1900:
            out.append(ControlRecord(seq(), t, "unhide", {"player": "p002"}))
        if k == 1300:  # issue 17: "alt" is rated as p005 from here on (alt plays only after it)
            merge = Rule(3, player="alt", into="p005", reason="same person")
            out.append(ControlRecord(seq(), t, "merge", merge.as_dict()))
        if k == 1400:  # a feed's alias (the tail journals it without an id: arenad.feeds.Alias)
            out.append(
                ControlRecord(seq(), t, "merge", {"player": "name:alt2", "into": "p006", "reason": "log"})
            )
        if k > 1400 and k % 83 == 0:
            out.append(kill(seq(), t, v, "name:alt2", server))
        if k > 1300 and k % 89 == 0:
            out.append(kill(seq(), t, "alt", v, server))
            out.append(PlacementRecord(seq(), t, (("alt",), (v,)), server, f"alt{k}"))
        if k % 41 == 0:  # a bot (the bot: namespace, arenad.gates)
            out.append(
                kill(seq(), t, "bot:Sarge", a, server) if k % 2 else kill(seq(), t, v, "bot:Sarge", server)
            )
        # The cheater plays only after the rule (unless asked otherwise): then the rule's live
        # reading (from its record on) and a rebuild's (in force throughout) exclude the same.
        if (k > 1200 or cheat_before_exclude) and k % 97 == 0:
            out.append(kill(seq(), t, "cheat", a, server))
            out.append(PlacementRecord(seq(), t, (("cheat",), (v,)), server, f"c{k}"))
    return out


def events_of(records: list[JournalRecord]) -> list[Any]:
    """The stream as ``arenad replay`` reads it (its control records kept, as in a journal)."""
    out: list[Any] = []
    for rec in records:
        if isinstance(rec, tuple):
            out.append(KillEvent(rec[1], rec[2], rec[3], rec[4]))
        elif isinstance(rec, PlacementRecord):
            out.append(PlacementEvent(rec.t, rec.placements, rec.server))
        else:
            out.append(rec)
    return out


def live(settings: Settings, records: list[JournalRecord]) -> LiveState:
    """The daemon's engine step over ``records`` in steps of varied size; no checkpoint."""
    d = Daemon(settings)
    d.recover()
    journal = d.store.journal
    journal.open_segment(d.state.seq + 1)
    rng = random.Random(3)

    async def steps() -> None:
        k = 0
        while k < len(records):
            n = rng.choice((1, 7, 64, 500))
            assert await d.pipeline.commit(list(records[k : k + n]), [], journal.size)
            k += n

    try:
        asyncio.run(steps())
    finally:
        journal.close()
    return d.state


def recovered(settings: Settings) -> LiveState:
    d = Daemon(settings)
    d.recover()
    d.store.journal.close()
    return d.state


def four_drivers(
    tmp_path: Path, records: list[JournalRecord], kinds: str, extra: str = ""
) -> dict[str, bytes]:
    state = tmp_path / "state"
    settings = settings_for(tmp_path, state, kinds, extra)
    params = settings.adr
    config = settings.scope_config()
    d = live(settings, records)
    rules = Exclusions(list(d.scopes.exclusions.rules))  # the rules in force at the end
    out = {"live": canon(d.scopes.export_state())}
    r = recovered(settings)
    assert (r.seq, r.applied, r.placements, r.excluded) == (d.seq, d.applied, d.placements, d.excluded)
    assert (r.filtered, r.rejected) == (d.filtered, d.rejected)
    out["recovery"] = canon(r.scopes.export_state())
    # Recovery defers the ladder indexes during the tail (Engine.defer_ladder) and rebuilds them
    # at its end: the same ladders as kept live, already in step.
    assert set(r.scopes.engines) == set(d.scopes.engines)
    for key, engine in r.scopes.engines.items():
        assert engine._ladder_ok
        assert list(engine._ladder) == list(d.scopes.engines[key].ladder_ids())
    rebuilt = rebuild_from_history(state, params, config, rules, upto=len(records))
    assert rebuilt.records == len(records) and rebuilt.seq == len(records)
    out["rebuild"] = canon(rebuilt.scopes.export_state())
    scopes = ScopeSet(params, config)
    scopes.exclusions = Exclusions(list(rules.rules))
    summary = replay_scoped(events_of(records), scopes)
    assert summary.applied == rebuilt.scopes.global_engine.applied
    out["replay"] = canon(scopes.export_state())
    report = offline_recompute(settings)  # writes the rebuilt state as a checkpoint
    assert report["records"] == len(records)
    (_seq, path), *_ = Checkpoints(state).list()
    offline = Checkpoints.read(path)["scopes"]
    # Where the closed sessions are differs (a recompute writes them to the rating history as it
    # goes, the others hold them until a checkpoint): what they are may not.
    sessions = {
        "live": d.scopes.sessions.closed if d.scopes.sessions else [],
        "recovery": r.scopes.sessions.closed if r.scopes.sessions else [],
        "rebuild": rebuilt.scopes.sessions.closed if rebuilt.scopes.sessions else [],
        "replay": scopes.sessions.closed if scopes.sessions else [],
        "recompute --offline": written_sessions(state),
    }
    assert len(sessions["live"]) > 10  # players came and went: sessions closed
    out["recompute --offline"] = packed(offline)
    return {
        key: canon(
            {
                "state": without_closed(msgpack.unpackb(value, raw=False, strict_map_key=False)),
                "sessions": [list(astuple(x)) for x in sessions[key]],
            }
        )
        for key, value in out.items()
    }


def without_closed(state: dict[str, Any]) -> dict[str, Any]:
    if "sessions" in state:
        state["sessions"]["closed"] = []
    return state


def written_sessions(state_dir: Path) -> list[Session]:
    """The rating history's rows, in the order they were written."""
    with contextlib.closing(sqlite3.connect(state_dir / "ratings.sqlite")) as db:
        rows = db.execute(
            "SELECT p.name, v.name, s.t_start, s.t_end, s.kills, s.deaths, s.rating_before,"
            " s.rating_after, s.display_after, s.tier_after, s.seq FROM sessions AS s"
            " JOIN players AS p ON p.id = s.player LEFT JOIN servers AS v ON v.id = s.server"
            " ORDER BY s.rowid"
        ).fetchall()
    return [Session(*row) for row in rows]


class TestFourDrivers:
    """Live, recovery, rebuild and replay reach byte-identical scope states from one stream."""

    def test_every_record_kind_through_every_scope_kind(self, tmp_path: Path) -> None:
        """Kills, placements, a season start, exclusions, an inclusion, hiding and showing again,
        over all scope kinds."""
        records = stream()
        states = four_drivers(tmp_path, records, ALL_KINDS)
        assert len(set(states.values())) == 1, {k: len(v) for k, v in states.items()}
        state = msgpack.unpackb(states["live"], raw=False, strict_map_key=False)["state"]
        assert {"global", "season:s1", "event:cup", "server:eu-1"} <= set(state["engines"])
        ids = [r["id"] for r in state["exclusions"]]
        assert ids[:2] == [1, 3] and ids[2] < 0  # the cheat rule, the merge, the feed's merge
        assert state["excluded"] > 0  # the cheater's kills after the rule
        assert state["hidden"] == ["p001"]  # hidden, still rated
        assert "p001" in state["engines"]["global"]["names"]
        assert "alt" not in state["engines"]["global"]["names"]  # merged into p005
        assert "name:alt2" not in state["engines"]["global"]["names"]
        assert "gates" not in state  # no gate configured: the state keeps its bytes

    @pytest.mark.parametrize("kinds", [ALL_KINDS, '["global"]'])
    def test_the_gates_gate_alike_in_every_driver(self, tmp_path: Path, kinds: str) -> None:
        """min_players, bots excluded and the boosting report (issue 17): the same kills gated,
        the same state, live, in recovery, rebuild, replay and offline recompute."""
        gates = (
            '[gates]\nmin_players = 6\nwindow = 15.0\nbots = "excluded"\n'
            "suspects = true\nsuspect_min_kills = 3\n"
        )
        states = four_drivers(tmp_path, stream(), kinds, gates)
        assert len(set(states.values())) == 1, {k: len(v) for k, v in states.items()}
        state = msgpack.unpackb(states["live"], raw=False, strict_map_key=False)["state"]
        gated = state["gates"]["gated"]
        assert gated["bot"] > 0 and gated["min_players"] > 0, gated
        assert "bot:Sarge" not in state["engines"]["global"]["names"]
        assert state["gates"]["window"]  # the report's rated kills

    def test_the_plain_path_takes_kernel_runs_and_agrees(self, tmp_path: Path) -> None:
        """One global ladder, no rule: the kernel's batch runs equal Engine.feed one by one."""
        records = [r for r in stream() if not isinstance(r, ControlRecord) or r.op == "season_start"]
        records = [r for r in records if not (isinstance(r, tuple) and "cheat" in r[2:4])]
        records = renumber(records)
        states = four_drivers(tmp_path, records, '["global"]')
        assert len(set(states.values())) == 1
        engine = Engine(ADRParams())
        for rec in records:
            if isinstance(rec, tuple):
                engine.feed(rec[2], rec[3], rec[1])
            elif isinstance(rec, PlacementRecord):
                engine.apply_placement(rec.placements, rec.t)
        state = msgpack.unpackb(states["live"], raw=False, strict_map_key=False)["state"]
        assert packed(state["engines"]["global"]) == canon(engine.export_state())

    def test_a_rule_reads_from_its_record_live_and_throughout_in_a_rebuild(self, tmp_path: Path) -> None:
        """Games before an exclude count live and in recovery; a rebuild (recompute) drops them."""
        records = stream(cheat_before_exclude=True)
        states = four_drivers(tmp_path, records, ALL_KINDS)
        assert states["live"] == states["recovery"]
        assert states["rebuild"] == states["replay"] == states["recompute --offline"]
        assert states["live"] != states["rebuild"]


def renumber(records: list[JournalRecord]) -> list[JournalRecord]:
    out: list[JournalRecord] = []
    for seq, rec in enumerate(records, start=1):
        if isinstance(rec, tuple):
            out.append((seq, *rec[1:]))
        elif isinstance(rec, PlacementRecord):
            out.append(PlacementRecord(seq, rec.t, rec.placements, rec.server, rec.id))
        else:
            out.append(ControlRecord(seq, rec.t, rec.op, rec.args))
    return out


def kills(n: int, *, step: float = 7.0, players: int = 12, seed: int = 1) -> list[JournalRecord | None]:
    rng = random.Random(seed)
    out: list[JournalRecord | None] = []
    for k in range(n):
        a, v = (f"p{i}" for i in rng.sample(range(players), 2))
        out.append(kill(k + 1, T0 + k * step, a, v))
    return out


class TestCommands:
    """What the applier yields, and what it leaves in the driver's list."""

    def test_recalibration_due_comes_where_engine_feed_recalibrates(self) -> None:
        """The driver's recalibration at each RecalibrationDue gives exactly Engine.feed's state."""
        records = kills(400)
        scopes = ScopeSet(ADRParams())
        due = []
        for cmd in Applier(scopes).run(list(records)):
            assert type(cmd) is RecalibrationDue
            due.append(cmd.t)
            cmd.engine.recalibrate(cmd.t)
        engine = Engine(ADRParams())
        for rec in records:
            assert isinstance(rec, tuple)
            engine.feed(rec[2], rec[3], rec[1])
        assert len(due) >= 5 and due == sorted(due)
        assert packed(scopes.global_engine.export_state()) == packed(engine.export_state())

    def test_every_scope_recalibrates_through_a_command(self) -> None:
        """A kill routed to several scopes yields one RecalibrationDue per scope that needs one."""
        scopes = ScopeSet(ADRParams(), ScopeConfig(kinds=("global", "server")))
        engines = {id(cmd.engine) for cmd in Applier(scopes).run(kills(400)) if type(cmd) is RecalibrationDue}
        assert engines == {id(scopes.engines["global"]), id(scopes.engines["server:eu-1"])}

    def test_slice_ends_mark_applied_prefixes_and_counts_are_taken_there(self) -> None:
        """SliceEnd(upto) every slice_events of work; the tally then covers records[:upto]."""
        records = kills(50)
        applier = Applier(ScopeSet(ADRParams()), slice_events=8)
        cuts = []
        counted = 0
        for cmd in applier.run(records):
            if type(cmd) is SliceEnd:
                tally = applier.take()
                counted += tally.applied + tally.filtered + sum(tally.rejected.values())
                assert counted == cmd.upto
                cuts.append(cmd.upto)
            elif type(cmd) is RecalibrationDue:
                cmd.engine.recalibrate(cmd.t)
        assert cuts == [8, 16, 24, 32, 40, 48]
        assert applier.take().applied == 2  # the rest, after the last slice

    def test_rated_commands_carry_the_tiers_before_each_applied_kill(self) -> None:
        """With notify, every applied kill yields Rated for each scope with the tiers before it."""
        records = kills(60)
        scopes = ScopeSet(ADRParams())
        rated = 0
        for cmd in Applier(scopes, notify=True).run(records):
            if type(cmd) is Rated:
                rated += 1
                assert cmd.engine is scopes.global_engine
                assert all(0 <= tier <= 10 for tier in cmd.before)
            elif type(cmd) is RecalibrationDue:
                cmd.engine.recalibrate(cmd.t)
        assert rated == scopes.global_engine.applied

    def test_counts_and_skipped_records(self) -> None:
        """Applied, cooldown-filtered, rejected, excluded and placements are counted; refused,
        excluded and control records become None for the shadows."""
        scopes = ScopeSet(ADRParams())
        cheat = Rule(1, player="cheat")
        records: list[JournalRecord | None] = [
            kill(1, T0, "a", "b"),
            kill(2, T0 + 1, "a", "b"),  # within the cooldown
            kill(3, T0 + 2, "a", "a"),  # a self-kill
            kill(4, T0 + 3, "a", "b", None),
            ControlRecord(5, T0 + 4, "exclude", cheat.as_dict()),
            kill(6, T0 + 5, "cheat", "b"),
            PlacementRecord(7, T0 + 6, (("cheat",), ("a",)), None, None),
            PlacementRecord(8, T0 + 7, (("a",), ("b",)), None, None),
            kill(9, T0 - 60, "c", "d"),  # late
        ]
        applier = Applier(scopes)
        applier.apply_chunk(records)
        tally = applier.take()
        assert tally.applied == 1 and tally.filtered == 2
        assert sum(tally.rejected.values()) == 2
        assert (tally.excluded, tally.excluded_placements, tally.placements) == (1, 1, 1)
        assert [k for k, r in enumerate(records) if r is None] == [4, 5, 6]
        assert scopes.excluded == 1

    def test_the_player_cap_refusal_is_skipped_by_the_shadows(self) -> None:
        """A kill the player cap refuses is counted under its reason and set to None."""
        scopes = ScopeSet(ADRParams(max_players=2))
        records: list[JournalRecord | None] = [kill(1, T0, "a", "b"), kill(2, T0 + 100, "a", "c")]
        applier = Applier(scopes)
        applier.apply_chunk(records)
        assert records[1] is None
        assert applier.take().rejected == {REJECT_REASONS[Outcome.PLAYER_CAP]: 1}


class TestControl:
    """Season start, exclude and include: one owner, two readings of the rules."""

    def test_season_start_starts_once(self) -> None:
        scopes = ScopeSet(ADRParams(), ScopeConfig(kinds=("global", "season")))
        applier = Applier(scopes)
        rec = ControlRecord(1, T0, "season_start", {"name": "s1", "alpha": 1.0, "lambda": 0.0})
        applier.control(rec)
        applier.control(rec)  # a replayed duplicate changes nothing
        assert scopes.season == "s1" and "season:s1" in scopes.engines

    def test_journal_reading_changes_the_rules_at_their_record(self) -> None:
        scopes = ScopeSet(ADRParams())
        applier = Applier(scopes, rules="journal")
        rule = Rule(3, server="eu-1", start=T0, end=T0 + 60)
        applier.control(ControlRecord(1, T0, "exclude", rule.as_dict()))
        applier.control(ControlRecord(2, T0, "exclude", rule.as_dict()))
        assert scopes.exclusions.rules == [rule]
        applier.control(ControlRecord(3, T0, "include", {"id": 3}))
        assert scopes.exclusions.rules == []

    def test_fixed_reading_keeps_the_rules_it_was_given(self) -> None:
        scopes = ScopeSet(ADRParams())
        kept = Rule(1, player="cheat")
        scopes.exclusions = Exclusions([kept])
        applier = Applier(scopes, rules="fixed")
        applier.control(ControlRecord(1, T0, "exclude", Rule(2, player="x").as_dict()))
        applier.control(ControlRecord(2, T0, "include", {"id": 1}))
        assert scopes.exclusions.rules == [kept]

    def test_an_unknown_operation_is_refused_by_name(self) -> None:
        with pytest.raises(StateError, match="'promote'"):
            Applier(ScopeSet(ADRParams())).control(ControlRecord(9, T0, "promote", {}))

    def test_a_bad_reading_is_refused(self) -> None:
        with pytest.raises(ValueError, match="'later'"):
            Applier(ScopeSet(ADRParams()), rules="later")  # type: ignore[arg-type]
