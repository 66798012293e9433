"""``arenad replay``: the offline contract. Events in, a ladder and a one-line summary out.

Used by tests, benchmarks and operators; the daemon must reach the same state from the same
accepted events (it recalibrates at the same event-time points, see ``Engine.feed``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from arenad.core.engine import REJECT_REASONS, Engine, Outcome
from arenad.core.events import KillEvent, PlacementEvent, Reject
from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.daemon.state import ControlRecord, JournalRecord, PlacementRecord
from arenad.decode import (
    Decoded,
    DecodedRow,
    decode_json_line,
    decode_json_rows,
    decode_msgpack_stream,
    looks_like_json,
    name_table,
    scan_json_kills,
)
from arenad.errors import InputError
from arenad.feeds import ClockNote, FeedPlugin, NonKill
from arenad.scopes import ScopeSet


@dataclass(slots=True)
class ReplaySummary:
    events: int = 0
    applied: int = 0
    filtered: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    players: int = 0
    #: Match-placement events read (rated at ADRParams.placement_weight).
    placements: int = 0
    seconds: float = 0.0
    #: Log formats only: lines read, player kills, and deaths that are not pairwise kills.
    log: dict[str, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "events": self.events,
            "applied": self.applied,
            "filtered": self.filtered,
            "rejected": dict(sorted(self.rejected.items())),
            "players": self.players,
            "placements": self.placements,
            "seconds": round(self.seconds, 6),
            "events_per_s": round(self.events / self.seconds, 1) if self.seconds > 0 else None,
        }
        if self.log is not None:
            out.update(self.log)
        return out

    def count(self, outcome: Outcome) -> None:
        if outcome is Outcome.APPLIED:
            self.applied += 1
        elif outcome is Outcome.FILTERED:
            self.filtered += 1
        else:
            self.rejected[REJECT_REASONS[outcome]] += 1


def replay_events(engine: Engine, events: Iterable[KillEvent | PlacementEvent | Reject]) -> ReplaySummary:
    """Feed decoded events (and count decoder rejects) through ``engine`` in order."""
    summary = ReplaySummary()
    rejected = summary.rejected
    started = time.perf_counter()
    for ev in events:
        summary.events += 1
        if isinstance(ev, Reject):
            rejected[ev.reason.value] += 1
            continue
        if isinstance(ev, PlacementEvent):
            summary.placements += 1  # a match result: its pairs at placement_weight
            engine.apply_placement(ev.placements, ev.t)
            continue
        summary.count(engine.feed(ev.attacker, ev.victim, ev.t))
    summary.seconds = time.perf_counter() - started
    summary.players = len(engine)
    return summary


#: Kills handed to ``Engine.feed_many`` at once by the batch replay.
BATCH = 65_536


def replay_files(paths: Iterable[Path], params: ADRParams) -> tuple[Engine, ReplaySummary]:
    """Replay arenad event files (JSON lines or msgpack) in batches: kills are collected into
    parallel lists and fed by ``Engine.feed_many`` (the C kernel while no recalibration is due);
    a placement or an unusual kill first flushes the kills before it (a line the decoder refuses
    is only counted), so the order is the file's and the result is exactly ``replay_events`` of
    the same files (tests/test_replay.py, TestBatchReplay)."""
    engine = Engine(params)
    engine.defer_ladder()  # nothing reads a rank before the end: the index is built once then
    summary = ReplaySummary()
    rejected = summary.rejected
    attackers: list[str] = []
    victims: list[str] = []
    times: list[float] = []
    names = name_table()  # each name a str once, so the engine's ids lookup hashes it once

    def flush() -> None:
        applied, filtered, others = engine.feed_many(attackers, victims, times)
        summary.applied += applied
        summary.filtered += filtered
        for outcome in others:
            summary.count(outcome)
        attackers.clear()
        victims.clear()
        times.clear()

    def take(item: DecodedRow) -> None:
        summary.events += 1
        if type(item) is tuple:
            attackers.append(item[1])
            victims.append(item[2])
            times.append(item[0])
            if len(times) >= BATCH:
                flush()
            return
        if isinstance(item, Reject):  # the decoder's: the engine never sees it, no flush needed
            rejected[item.reason.value] += 1
            return
        flush()
        if isinstance(item, PlacementEvent):
            summary.placements += 1
            engine.apply_placement(item.placements, item.t)
        else:
            assert isinstance(item, KillEvent)
            summary.count(engine.feed(item.attacker, item.victim, item.t))

    started = time.perf_counter()
    for path in paths:
        data = _read(path)
        if not looks_like_json(data):
            for item in decode_msgpack_stream(data):
                take(item)
            continue
        # JSON lines: the C scanner appends the kills of the common shape to the lists and stops
        # at a line it is not certain about, which decode_json_rows (Python) decodes.
        pos, end = 0, len(data)
        while pos < end:
            before = len(times)
            scanned = scan_json_kills(data, pos, attackers, victims, times, limit=BATCH - before, names=names)
            if scanned is None:  # no C extension: Python's decoder for every line
                for row in decode_json_rows(data[pos:]):
                    take(row)
                break
            stop, pos = scanned
            summary.events += len(times) - before
            if len(times) >= BATCH:
                flush()
            if pos > stop:
                for row in decode_json_rows(data[stop:pos]):
                    take(row)
            else:
                pos = stop
    flush()
    summary.seconds = time.perf_counter() - started
    summary.players = len(engine)
    return engine, summary


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e


def iter_file(path: Path) -> Iterator[Decoded]:
    """Every event of a JSON-lines or msgpack file (detected from the first byte), in order."""
    data = _read(path)
    if looks_like_json(data):
        for line in data.splitlines():
            yield from decode_json_line(line)
    else:
        yield from decode_msgpack_stream(data)


def replay_log_files(
    paths: Iterable[Path], params: ADRParams, feed: FeedPlugin, options: Mapping[str, Any]
) -> tuple[Engine, ReplaySummary]:
    """Replay game-server log files (several in order) through one feed parser.

    The summary adds ``lines``, ``kills`` (player kills), ``world_kills``, ``suicides`` and
    ``team_kills``/``bots_excluded`` as the format reports them; ``events`` counts kill events
    and rejected lines.
    """
    engine = Engine(params)
    parser = feed.parser(options)
    summary = ReplaySummary()
    counts: Counter[str] = Counter()
    started = time.perf_counter()
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}") from e
        for line in data.splitlines():
            counts["lines"] += 1
            for item in parser.feed(line, 0.0):
                if isinstance(item, KillEvent):
                    summary.events += 1
                    counts["kills"] += 1
                    summary.count(engine.feed(item.attacker, item.victim, item.t))
                elif isinstance(item, Reject):
                    summary.events += 1
                    summary.rejected[item.reason.value] += 1
                elif isinstance(item, PlacementEvent):
                    summary.placements += 1  # a match's final scores, at placement_weight
                    engine.apply_placement(item.placements, item.t)
                elif isinstance(item, NonKill):
                    counts[_NONKILL_KEYS.get(item.kind, item.kind)] += 1
                elif isinstance(item, ClockNote):
                    # A log whose clock had to be corrected: said in the summary (whole seconds).
                    if item.kind == "reanchored":
                        counts["clock_reanchored"] += 1
                        counts["clock_moved_seconds"] += round(item.moved)
                    else:
                        counts["clock_fast_maps"] += 1
                        counts["clock_timescale_hint"] = max(
                            1, round(item.ratio * options_timescale(options))
                        )
    summary.seconds = time.perf_counter() - started
    summary.players = len(engine)
    summary.log = {key: counts[key] for key in ("lines", "kills", "world_kills", "suicides", "team_kills")}
    if counts["bots_excluded"]:
        summary.log["bots_excluded"] = counts["bots_excluded"]
    for key in ("clock_reanchored", "clock_moved_seconds", "clock_fast_maps", "clock_timescale_hint"):
        if counts[key]:
            summary.log[key] = counts[key]
    return engine, summary


def options_timescale(options: Mapping[str, Any]) -> float:
    """The ``timescale`` feed option as given (1 when absent or not a number)."""
    value = options.get("timescale", 1.0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0


_NONKILL_KEYS = {
    "world_kill": "world_kills",
    "suicide": "suicides",
    "team_kill": "team_kills",
    "bot_excluded": "bots_excluded",
}


def replay_scoped(
    events: Iterable[KillEvent | PlacementEvent | Reject | ControlRecord], scopes: ScopeSet
) -> ReplaySummary:
    """Feed events through every scope they belong to (``arenad replay --scope``); the summary
    counts the global ladder's outcomes.

    The daemon's applier (``arenad.daemon.applier``) applies them, as history rebuild does: the
    exclusion rules ``scopes`` holds are in force throughout. Control records (a season start)
    may come in between, as they do in a journal.
    """
    summary = ReplaySummary()
    applier = Applier(scopes, rules="fixed")
    started = time.perf_counter()

    def records() -> Iterator[JournalRecord]:
        # Numbered as the daemon's journal numbers what it keeps (a stream read back from a
        # journal gets its own sequence numbers): play sessions record where they closed.
        seq = 0
        for ev in events:
            if isinstance(ev, ControlRecord):
                seq = ev.seq
                yield ev
                continue
            summary.events += 1
            if isinstance(ev, Reject):
                summary.rejected[ev.reason.value] += 1
            elif isinstance(ev, PlacementEvent):
                summary.placements += 1
                seq += 1
                yield PlacementRecord(seq, ev.t, ev.placements, ev.server, None)
            else:
                seq += 1
                yield (seq, ev.t, ev.attacker, ev.victim, ev.server, None)

    applier.apply_all(records())
    tally = applier.take()
    summary.applied = tally.applied
    summary.filtered = tally.filtered
    summary.rejected.update(tally.rejected)
    if tally.excluded:
        summary.rejected["excluded"] += tally.excluded  # kills; an excluded placement is only read
    summary.filtered += sum(tally.gated.values())  # the anti-boosting gates' (arenad.gates)
    if tally.gated:
        summary.log = {**(summary.log or {}), **{f"gated_{k}": v for k, v in sorted(tally.gated.items())}}
    summary.seconds = time.perf_counter() - started
    summary.players = len(scopes.global_engine)
    return summary


def ladder_rows(engine: Engine) -> Iterator[dict[str, Any]]:
    """One JSON-ready object per player, best first (the state file format)."""
    for rank, i in enumerate(engine.ladder_ids(), start=1):
        v = engine.view(i)
        yield {
            "player": v.player,
            "rank": rank,
            "mu": v.mu,
            "sigma": v.sigma,
            "tier": v.tier,
            "n": v.n,
            "streak": v.streak,
            "trend": v.trend,
            "pool": v.pool,
            "last_t": v.last_t,
            "active": v.active,
            "percentile": engine.percentile(i),
        }


def write_state(engine: Engine, out: IO[str]) -> None:
    for row in ladder_rows(engine):
        out.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
        out.write("\n")
