"""The rating history's cost: per-event overhead of the play sessions, write cost, bytes a day.

    .venv/bin/python -m bench.ratinghistory                  # 2,000 players, 3 days (~1 min)
    .venv/bin/python -m bench.ratinghistory --players 5000 --days 2

A population plays visits (Poisson, ``--visits`` a player a day, 10-60 minutes each, on one of
64 servers); kills are drawn between players present on the same server at ``--rate`` kills a
minute per player present. The same journal records go through the one applier twice in the
same run, with the rating history's sessions and without (the reference): the difference is
the per-event cost of ``arenad.sessions`` (the C tally and the ticks). Then the sessions that
closed are written to a fresh ``ratings.sqlite`` one transaction per minute of event time (what
a checkpoint every 60 s does): the write cost per session and the bytes per player-day. The
figures at 50,000 events/s follow from both. One line of JSON at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.daemon.ratinghistory import RatingHistory
from arenad.records import JournalRecord
from arenad.scopes import ScopeConfig, ScopeSet
from arenad.sessions import Session

T0 = 1_790_000_000.0
DAY = 86400.0


def population(players: int, days: float, visits: float, rate: float, seed: int) -> list[JournalRecord]:
    rng = random.Random(seed)
    by_server: dict[int, list[tuple[float, float, int]]] = {}
    for p in range(players):
        t = T0 + rng.uniform(0, DAY / max(visits, 0.1))
        while t < T0 + days * DAY:
            length = rng.uniform(600, 3600)
            by_server.setdefault(rng.randrange(64), []).append((t, t + length, p))
            t += length + rng.expovariate(visits / DAY)
    kills: list[tuple[float, str, str, str]] = []
    for server, visits_here in by_server.items():
        bounds = sorted([(a, 1, p) for a, _b, p in visits_here] + [(b, -1, p) for _a, b, p in visits_here])
        present: list[int] = []
        for (t, kind, p), (t_next, _k, _q) in zip(bounds, [*bounds[1:], (bounds[-1][0], 0, 0)], strict=True):
            if kind == 1:
                present.append(p)
            else:
                present.remove(p)
            if len(present) < 2:
                continue
            # Kills until the next arrival or departure, at `rate` a minute per player present.
            clock = t
            while True:
                clock += rng.expovariate(rate * len(present) / 60.0)
                if clock >= t_next:
                    break
                a, v = rng.sample(present, 2)
                kills.append((clock, f"player-{a}", f"player-{v}", f"srv-{server}"))
    kills.sort()
    return [(k + 1, t, a, v, s, None) for k, (t, a, v, s) in enumerate(kills)]


class Timed:
    """Seconds spent in the sessions' tally and ticks (wrapped around the real methods)."""

    def __init__(self, scopes: ScopeSet) -> None:
        self.tally = self.tick = 0.0
        self.ticks = 0
        tracker = scopes.sessions
        if tracker is None:
            return
        tally, tick = tracker.tally, tracker.tick

        def timed_tally(*args: Any) -> None:
            t0 = time.perf_counter()
            tally(*args)
            self.tally += time.perf_counter() - t0

        def timed_tick(*args: Any) -> None:
            t0 = time.perf_counter()
            tick(*args)
            self.tick += time.perf_counter() - t0
            self.ticks += 1

        tracker.tally = timed_tally  # type: ignore[method-assign,assignment]
        tracker.tick = timed_tick  # type: ignore[method-assign,assignment]


def apply_all(records: list[JournalRecord], gap: float) -> tuple[float, ScopeSet, Timed]:
    scopes = ScopeSet(ADRParams(), ScopeConfig(session_gap=gap))
    timed = Timed(scopes)
    started = time.perf_counter()
    Applier(scopes, rules="fixed").apply_all(records)
    return time.perf_counter() - started, scopes, timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--players", type=int, default=2000)
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--visits", type=float, default=1.5, help="visits a player a day")
    ap.add_argument("--rate", type=float, default=2.0, help="kills a minute per player present")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(f"generating {args.players} players over {args.days:g} days...", file=sys.stderr)
    records = population(args.players, args.days, args.visits, args.rate, args.seed)
    n = len(records)
    with_s: list[float] = []
    without: list[float] = []
    tallies: list[float] = []
    ticks: list[float] = []
    scopes: ScopeSet | None = None
    timed: Timed | None = None
    for _ in range(args.repeat):  # interleaved, so both see the same machine
        seconds, scopes, timed = apply_all(records, 1800.0)
        with_s.append(seconds)
        tallies.append(timed.tally)
        ticks.append(timed.tick)
        without.append(apply_all(records, 0.0)[0])
    assert scopes is not None and scopes.sessions is not None and timed is not None
    sessions = scopes.sessions.take_closed()
    # One transaction per minute of event time, as checkpoints every 60 s write them.
    batches: dict[int, list[Session]] = {}
    for s in sessions:
        batches.setdefault(int(s.t_end // 60), []).append(s)
    with tempfile.TemporaryDirectory() as tmp:
        history = RatingHistory(Path(tmp), 0.0)
        started = time.perf_counter()
        for minute in sorted(batches):
            history.write(batches[minute], minute * 60.0, history.generation)
        write_s = time.perf_counter() - started
        history.close()
        size = sum(p.stat().st_size for p in Path(tmp).glob("ratings.sqlite*"))
    player_days = len({(s.player, int((s.t_end - T0) // DAY)) for s in sessions})
    per_event_us = (statistics.median(with_s) - statistics.median(without)) / n * 1e6
    tally_us = statistics.median(tallies) / n * 1e6
    tick_ms = statistics.median(ticks) / max(timed.ticks, 1) * 1e3
    per_tx_ms = write_s / max(len(batches), 1) * 1e3
    per_row_us = write_s / max(len(sessions), 1) * 1e6
    # At 50,000 events/s in real time: every event tallied, a tick every recalibrate_interval
    # of event time (of a cost that grows with the players in a session, not with the rate),
    # one write a checkpoint (60 s), the sessions closing at this stream's rate per event.
    interval = ADRParams().recalibrate_interval
    rows_per_s = 50_000 * len(sessions) / n
    at_50k = (50_000 * tally_us / 1e6) + tick_ms / 1e3 / interval + (per_tx_ms / 1e3 / 60 + rows_per_s * 2e-6)
    figures: dict[str, Any] = {
        "events": n,
        "players": args.players,
        "days": args.days,
        "sessions": len(sessions),
        "apply_with_sessions_us": round(statistics.median(with_s) / n * 1e6, 3),
        "apply_without_us": round(statistics.median(without) / n * 1e6, 3),
        "sessions_us_per_event": round(per_event_us, 3),
        "overhead_pct": round(100 * per_event_us / (statistics.median(without) / n * 1e6), 2),
        "tally_us_per_event": round(tally_us, 3),
        "ticks": timed.ticks,
        "tick_ms": round(tick_ms, 3),
        "write_ms_per_transaction": round(per_tx_ms, 3),
        "write_us_per_session": round(per_row_us, 2),
        "write_transactions": len(batches),
        "bytes": size,
        "bytes_per_session": round(size / max(len(sessions), 1), 1),
        "bytes_per_player_day": round(size / max(player_days, 1), 1),
        "core_share_at_50k_events_s": round(at_50k, 4),
    }
    print(f"{n:,} events, {len(sessions):,} sessions closed, {player_days:,} player-days")
    print(
        f"apply: {figures['apply_without_us']} us/event without sessions, "
        f"{figures['apply_with_sessions_us']} with (+{figures['sessions_us_per_event']} us, "
        f"{figures['overhead_pct']} %)"
    )
    print(
        f"  of which the tally {figures['tally_us_per_event']} us/event, "
        f"{timed.ticks} ticks of {figures['tick_ms']} ms"
    )
    print(
        f"write: {figures['write_ms_per_transaction']} ms/transaction, "
        f"{figures['write_us_per_session']} us/session in {len(batches)} transactions; "
        f"{size:,} bytes = {figures['bytes_per_player_day']} B/player-day, "
        f"{figures['bytes_per_session']} B/session"
    )
    print(f"at 50,000 events/s: {100 * at_50k:.2f} % of one core")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
