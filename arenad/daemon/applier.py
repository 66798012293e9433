"""The applier: the one rule that puts journal records into a ``ScopeSet`` (issue 15, "One applier").

Sans-io, in the manner of mitmproxy's layers: ``Applier.run`` applies kills, match placements
and control records (season start, exclude, merge, include, hide, unhide) to every scope they
belong to and yields what its driver must do before it goes on:

* ``RecalibrationDue(engine, t)``: ``engine`` recalibrates at ``t`` before the next kill is
  applied to it (``Engine.recalibrate(t)``, or begin / plan in a worker thread / finish). The
  applier resumes only when the driver asks for the next command, so the driver has done it.
* ``Rated(engine, record, before)``: with ``notify``, a kill changed two players' ratings in
  ``engine`` (``before``: their tier indices before it), for rating-change notifications.
* ``SliceEnd(upto)``: with ``slice_events``, about that many events of work are done;
  ``records[:upto]`` are applied (the live daemon lets queries and the shadows run here).

Drivers: the live daemon (``Pipeline.apply``, asynchronously: the recalibration plan in a worker
thread, a yield at slice ends), and synchronously ``apply_all``: recovery from the journal, the
recompute's catch-up, history rebuild (``history.rebuild``, ``arenad recompute --offline``) and
``arenad replay --scope`` (``replay.replay_scoped``). So live = recovery = rebuild = replay holds
by construction (tests/daemon/test_applier.py feeds one stream through all four).

Exclusion rules have two readings, chosen by ``rules``:

* ``"journal"`` (live, recovery, catch-up): an exclude / include record changes
  ``scopes.exclusions`` from its point in the stream on, as it did when it was journaled.
* ``"fixed"`` (rebuild, replay): the rules ``scopes.exclusions`` holds at the start are in force
  over the whole stream (a recompute applies the rules in force now to the past: an included
  rule's events come back, an excluded player's earlier games go), so exclude / include records
  change nothing.

A merge (``scopes.Rule`` with ``into``) is a rule with the same two readings: a merged player's
kills and placements are applied under the name they are merged into. The anti-boosting gates
(``arenad.gates``, issue 17) judge a kill after the rules and before any scope rates it; a gated
kill is counted by reason (``Tally.gated``) and set to None. With a gate, a merge or a rule every
kill takes the per-kill path; without, the C kernel's runs stay the common case.

The state change is the applier's; persisting it (checkpoints, the admin's answers, the metrics)
is the daemon's. A refused kill (the player cap), an excluded record and a control record are set
to ``None`` in the driver's list: the shadow models skip them. The plain path (one ladder, no
exclusion rule, no notifications, no scoring) hands runs of kills to the C kernel in one call
(``Engine.run_records``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Literal

from arenad.core.engine import REJECT_REASONS, Engine, Outcome
from arenad.records import ControlRecord, JournalRecord, PlacementRecord, Record, StateError
from arenad.scopes import Reset, Rule, ScopeSet

#: Events of work between two ``SliceEnd`` commands in the live daemon (about 0.5 ms).
SLICE = 32
#: A match placement counts as 1 + pairs // PAIRS_PER_EVENT events of work in a slice: every
#: model predicts each of its (better, worse) pairs.
PAIRS_PER_EVENT = 16
#: Every n-th plain kill's apply time goes to ``observe`` (timing each would cost more).
UPDATE_SAMPLE = 64
#: Records ``apply_all`` takes into a list at a time.
CHUNK = 4096
#: No slices: runs of kills as long as the records allow.
_UNBOUNDED = 1 << 62

RuleReading = Literal["journal", "fixed"]


def _no_timer() -> float:  # never called: ``observe`` without a timer is refused
    raise AssertionError("no timer")


@dataclass(frozen=True, slots=True)
class RecalibrationDue:
    """``engine`` must recalibrate at event time ``t`` before the applier goes on."""

    engine: Engine
    t: float


@dataclass(frozen=True, slots=True)
class Rated:
    """A kill was applied to ``engine``; ``before`` holds the attacker's and victim's tier
    indices before it (0: unplaced)."""

    engine: Engine
    record: Record
    before: tuple[int, int]


@dataclass(frozen=True, slots=True)
class SliceEnd:
    """A slice of work is done: ``records[:upto]`` are applied."""

    upto: int


Command = RecalibrationDue | Rated | SliceEnd


@dataclass(slots=True)
class Tally:
    """What the applied records came to, as the daemon's counters need it (global outcomes)."""

    applied: int = 0
    filtered: int = 0  # cooldown repeats
    rejected: Counter[str] = field(default_factory=Counter)  # by REJECT_REASONS
    excluded: int = 0  # kills an exclusion rule kept from every scope
    excluded_placements: int = 0  # placements likewise
    placements: int = 0  # placements learnt
    gated: Counter[str] = field(default_factory=Counter)  # kills a gate kept from rating, by reason

    def clear(self) -> None:
        self.applied = self.filtered = self.excluded = self.excluded_placements = self.placements = 0
        if self.rejected:
            self.rejected.clear()
        if self.gated:
            self.gated.clear()


class Applier:
    """Applies journal records to ``scopes``; see the module docstring for the commands."""

    def __init__(
        self,
        scopes: ScopeSet,
        *,
        rules: RuleReading = "journal",
        notify: bool = False,
        score_kill: Callable[[Engine, str, str], None] | None = None,
        score_placement: Callable[[Engine, PlacementRecord], None] | None = None,
        observe: Callable[[float], None] | None = None,
        timer: Callable[[], float] | None = None,
        sample: int = 0,
        slice_events: int = 0,
    ) -> None:
        if rules not in ("journal", "fixed"):
            raise ValueError(f"rules must be 'journal' or 'fixed', got {rules!r}")
        if observe is not None and timer is None:
            raise ValueError("observe needs a timer (the driver's clock: the applier reads none)")
        self.scopes = scopes
        self.rules = rules
        self.notify = notify
        #: The primary model's prediction of a kill / a placement's pairs, before ADR learns it.
        self.score_kill = score_kill
        self.score_placement = score_placement
        #: Sampled apply times of plain kills (seconds, by the driver's ``timer``); ``sample``
        #: carries the phase across runs.
        self.observe = observe
        self.timer = timer
        self.sample = sample
        self.slice_events = slice_events if slice_events > 0 else _UNBOUNDED
        self.tally = Tally()

    def take(self) -> Tally:
        """The counts since the last ``take``, and start again from zero."""
        out = self.tally
        self.tally = Tally()
        return out

    def drain(self, into: Callable[[Tally], None]) -> None:
        """Hand the counts since the last drain to ``into``, then zero them in place (what the
        live daemon does at every slice end: no new objects there)."""
        into(self.tally)
        self.tally.clear()

    # ------------------------------------------------------------------ control records
    def control(self, rec: ControlRecord) -> None:
        """A journaled admin operation (season start, exclude, merge, include, hide, unhide)."""
        sc = self.scopes
        if rec.op == "season_start":
            a = rec.args
            name = str(a["name"])
            if f"season:{name}" not in sc.engines:  # admin.py refuses a used name before journaling
                sc.start_season(name, rec.t, Reset(float(a["alpha"]), float(a["lambda"])))
        elif rec.op == "exclude":
            if self.rules == "journal":
                rule = Rule.from_dict(rec.args)
                if all(r.id != rule.id for r in sc.exclusions.rules):
                    sc.exclusions.add(rule)
        elif rec.op == "merge":  # a merge is a rule with ``into`` (scopes.Rule)
            if self.rules == "journal":
                # A feed's alias (no id: the feed cannot know the admin's ids) is numbered by its
                # record, below zero, so it never takes an id the admin hands out.
                rule = Rule.from_dict(rec.args if "id" in rec.args else {**rec.args, "id": -rec.seq})
                ex = sc.exclusions
                # A feed re-reading its log after a crash sends its alias again: one merge per player.
                if (
                    all(r.id != rule.id for r in ex.rules)
                    and rule.player is not None
                    and ex.resolve(rule.player) == rule.player
                    and ex.resolve(rule.into or "") != rule.player
                ):
                    ex.add(rule)
        elif rec.op == "include":
            if self.rules == "journal":
                sc.exclusions.remove(int(rec.args["id"]))
        # Hiding changes no rating, so both readings apply it where it was journaled: a rebuild
        # reaches the hidden set the live daemon holds.
        elif rec.op == "hide":
            sc.hidden.add(str(rec.args["player"]))
        elif rec.op == "unhide":
            sc.hidden.discard(str(rec.args["player"]))
        elif rec.op == "recompute":
            pass  # a cluster's request to every replica's recomputer (arenad.cluster.replica): no rating here
        else:
            raise StateError(f"control record {rec.op!r} at event {rec.seq}: written by a newer arenad")

    # ------------------------------------------------------------------ the drivers' entry points
    def apply_all(self, records: Iterable[JournalRecord]) -> int:
        """Apply ``records`` synchronously (recalibrations in place); returns how many.

        For drivers with nothing else to do per record: rebuild, replay, a recompute's catch-up.
        """
        n = 0
        chunk: list[JournalRecord | None] = []
        for rec in records:
            chunk.append(rec)
            if len(chunk) >= CHUNK:
                n += len(chunk)
                self.apply_chunk(chunk)
                chunk = []
        n += len(chunk)
        self.apply_chunk(chunk)
        return n

    def apply_chunk(self, records: list[JournalRecord | None]) -> None:
        """``run`` over ``records``, every command satisfied synchronously."""
        for cmd in self.run(records):
            if type(cmd) is RecalibrationDue:
                cmd.engine.recalibrate(cmd.t)

    def run(self, records: list[JournalRecord | None]) -> Generator[Command, None, None]:
        """Apply ``records`` in order, yielding the commands the driver must carry out.

        ``records`` is the driver's own list: a record the shadows must skip is set to None in it.
        """
        scopes = self.scopes
        engine = scopes.global_engine
        tally = self.tally  # refreshed after each yield: the driver may ``take`` the counts
        notify = self.notify
        score_kill = self.score_kill
        score_placement = self.score_placement
        observe = self.observe
        timer = self.timer or _no_timer
        slice_events = self.slice_events
        simple = len(scopes.config.kinds) == 1 and not scopes.exclusions and scopes.gates is None
        gates = scopes.gates
        apply = engine.apply
        applied_outcome = Outcome.APPLIED
        filtered_outcome = Outcome.FILTERED
        player_cap = Outcome.PLAYER_CAP
        # The C kernel takes runs of plain kills in one call when nothing per kill is needed.
        run = engine.run_records if score_kill is None else None
        sample = self.sample
        sample_left = UPDATE_SAMPLE - 1 if observe is not None else _UNBOUNDED
        # Play sessions (arenad.sessions): kills counted up to ``tallied``, ticks where the global
        # ladder recalibrates (the same records in every driver).
        sessions = scopes.sessions
        tallied = 0
        upto = 0
        applied = 0
        placements = 0
        work = 0
        total = len(records)
        resume = 0  # records before this were taken by a run
        try:
            for k, rec in enumerate(records):
                if k < resume:
                    continue
                upto = k + 1  # the first record after this one
                if rec is None:
                    continue
                if isinstance(rec, ControlRecord):
                    self.control(rec)
                    records[k] = None  # nothing for the shadows
                    simple = len(scopes.config.kinds) == 1 and not scopes.exclusions and gates is None
                    work += 1
                elif isinstance(rec, PlacementRecord):
                    if scopes.exclusions.aliases:
                        rec = records[k] = _merged_placement(rec, scopes.exclusions.aliases)  # noqa: PLW2901 - the record as rated
                    if scopes.exclusions and scopes.exclusions.excludes_placement(
                        rec.placements, rec.t, rec.server
                    ):
                        records[k] = None
                        tally.excluded_placements += 1
                        continue
                    if score_placement is not None:  # the pairs' predictions before ADR learns them
                        score_placement(engine, rec)
                    scopes.feed_placement(rec.placements, rec.t, rec.server)
                    placements += 1
                    work += 1 + len(rec.pairs) // PAIRS_PER_EVENT
                elif not simple or notify:
                    work += 1
                    _, t, attacker, victim, server, _i = rec
                    aliases = scopes.exclusions.aliases
                    if aliases and (attacker in aliases or victim in aliases):
                        # A merged player's kill is the other's (the shadows and notices see that too).
                        attacker, victim = aliases.get(attacker, attacker), aliases.get(victim, victim)
                        rec = records[k] = (rec[0], t, attacker, victim, server, rec[5])  # noqa: PLW2901 - likewise
                    if (
                        gates is not None
                        and not scopes.exclusions.excludes(attacker, victim, t, server)
                        and (reason := gates.check(attacker, victim, t, server)) is not None
                    ):
                        records[k] = None  # gated before rating: the shadows skip it too
                        tally.gated[reason] += 1
                        continue
                    engines = scopes.targets(attacker, victim, t, server)
                    if engines is None:
                        records[k] = None  # excluded: the shadows skip it too
                        tally.excluded += 1
                    else:
                        if score_kill is not None:
                            score_kill(engines[0], attacker, victim)  # §3.1, before the update
                        outcome = applied_outcome
                        mu_before = 0.0
                        for n, eng in enumerate(engines):
                            # Each scope recalibrates exactly where Engine.feed would.
                            if t >= eng.next_recalibration and eng.recalibration_due_before(
                                attacker, victim, t
                            ):
                                if n == 0 and sessions is not None:
                                    sessions.tally(records, tallied, k, engine.ids)
                                    tallied = k
                                    sessions.tick(engine, t, rec[0])
                                yield RecalibrationDue(eng, t)
                                tally = self.tally
                            if n == 0 and gates is not None:  # for the boosting report's gain
                                i = eng.ids.get(attacker)
                                mu_before = eng.mu(i) if i is not None else eng.params.mu0
                            if notify:
                                before = (eng.tier_index(attacker), eng.tier_index(victim))
                                out = eng.apply(attacker, victim, t)
                                if out is applied_outcome:
                                    yield Rated(eng, rec, before)
                                    tally = self.tally
                            else:
                                out = eng.apply(attacker, victim, t)
                            if n == 0:
                                outcome = out
                        if outcome is applied_outcome:
                            applied += 1
                            if gates is not None:
                                gain = engine.mu(engine.ids[attacker]) - mu_before
                                gates.counted(attacker, victim, t, server, gain)
                        elif outcome is filtered_outcome:
                            tally.filtered += 1
                        else:
                            tally.rejected[REJECT_REASONS[outcome]] += 1
                            if outcome is player_cap:
                                records[k] = None
                elif (
                    run is not None
                    and (
                        # Up to (not including) the next sampled kill and the end of this slice.
                        taken := run(
                            records, k, min(total, k + sample_left - sample, k + slice_events - work)
                        )
                    )[0]
                    > k
                ):
                    upto = resume = taken[0]
                    applied += taken[1]
                    tally.filtered += taken[2]
                    if observe is not None:
                        sample += upto - k
                    work += upto - k
                else:
                    _, t, attacker, victim, _s, _i = rec
                    if score_kill is not None:
                        score_kill(engine, attacker, victim)  # §3.1, before the update
                    if t >= engine.next_recalibration and engine.recalibration_due_before(
                        attacker, victim, t
                    ):
                        if sessions is not None:
                            sessions.tally(records, tallied, k, engine.ids)
                            tallied = k
                            sessions.tick(engine, t, rec[0])
                        yield RecalibrationDue(engine, t)  # same point as Engine.feed, so as replay
                        tally = self.tally
                    if observe is not None:
                        sample += 1
                        if sample >= UPDATE_SAMPLE:
                            sample = 0
                            t0 = timer()
                            outcome = apply(attacker, victim, t)
                            observe(timer() - t0)
                        else:
                            outcome = apply(attacker, victim, t)
                    else:
                        outcome = apply(attacker, victim, t)
                    if outcome is applied_outcome:
                        applied += 1
                    elif outcome is filtered_outcome:
                        tally.filtered += 1
                    else:
                        tally.rejected[REJECT_REASONS[outcome]] += 1
                        if outcome is player_cap:
                            records[k] = None  # the shadows skip it too (ModelSet.run_steps)
                    work += 1
                if work >= slice_events:
                    work = 0
                    tally = self.tally  # the driver may have taken the counts meanwhile
                    tally.applied += applied
                    tally.placements += placements
                    applied = placements = 0
                    yield SliceEnd(upto)
                    tally = self.tally
        finally:
            self.tally.applied += applied
            self.tally.placements += placements
            self.sample = sample
            if sessions is not None:  # the records handled (all of them, unless one raised)
                sessions.tally(records, tallied, upto, engine.ids)


def _merged_placement(rec: PlacementRecord, aliases: dict[str, str]) -> PlacementRecord:
    """``rec`` with merged players under the names they are rated as (a player twice in one match,
    through a merge, keeps the better place)."""
    seen: set[str] = set()
    groups = []
    for group in rec.placements:
        g = tuple(p for p in dict.fromkeys(aliases.get(p, p) for p in group) if p not in seen)
        seen.update(g)
        if g:
            groups.append(g)
    return PlacementRecord(rec.seq, rec.t, tuple(groups), rec.server, rec.id)
