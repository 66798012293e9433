"""Leaderboard scopes and history recompute: ``python -m bench.scopes``.

Run:  .venv/bin/python -m bench.scopes [--players 10000,100000] [--events 200000]
                                       [--recompute-events 1000000] [--json]

Part 1, **scopes**: the same pre-generated kill stream through ``Engine.feed`` (the reference)
and through ``ScopeSet.feed(attacker, victim, t, server)`` with 1, 3 and 10 scopes:

* 1 scope: ``kinds=("global",)``;
* 3 scopes: global + ``server:arena-1`` (every kill is on that one server) + a season started
  with ``start_season(name, t, RESET_PRESETS["softer"])`` after the warm-up;
* 10 scopes: those three + 7 ``EventWindow``\\ s that all cover the warm-up and the stream.

So each kill goes to 1, 1, 3 and 10 engines. For each, in a fresh interpreter (so one run's heap
cannot lend memory to the next one's RSS figure): warm-up (untimed: every player introduced once,
then a stretch of ordinary play, into every scope), then the timed stream. Reported: kills per
second, engine feeds per second (every ``Engine.feed`` call the kills caused, counted from the
engines' own outcome counters), p50/p99 latency of one ``feed`` call (``perf_counter_ns`` around
every ``--sample``-th event; the other events run untimed), the same around each kill before
which a recalibration is due (every scope recalibrates on it), and RSS growth (VmRSS of
/proc/self/status before the scope set is built and after the warm-up) per player per scope.

Part 2, **recompute**: a state directory in a temporary directory holding ``--recompute-events``
kills, written through ``Journal`` in ``--segments`` segments (records appended in chunks of 128,
as the daemon journals a step), all segments but the open last one archived by
``retire_segments`` (gzip, ``Archive``). Then, timed: reading and decoding all of history
(``History(state_dir).records(0, upto)``, no rating), gunzip of the archive alone, and
``rebuild_from_history(state_dir, ADRParams(), ScopeConfig(kinds), Exclusions(), upto=N)`` for
``kinds=("global",)`` and ``("global", "server")``, with the peak RSS each reached (VmHWM reset
through /proc/self/clear_refs). Unless ``--no-partial``: a snapshot of the midpoint state is
stored as the daemon keeps one (``Checkpoints`` + ``Snapshots``, built untimed) and a partial
recompute from it is timed too; its global ladder is checked bit for bit against the full one.

The workload: kills 0.05 s apart from Unix time 1,764,000,000; both players of a kill drawn with a
skewed choice (activity ~ lognormal(0, 1) per player: the top 1 % play ~10 times as often as the
median) and the winner from a hidden skill (logistic on the difference). Names are fresh ``str``
objects per event, as a decoder hands them over. The §2.1 cooldown filters few kills (printed).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import math
import multiprocessing
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from arenad.daemon.history import (
    Archive,
    History,
    Snapshots,
    rebuild,
    rebuild_from_history,
    retire_segments,
)
from arenad.daemon.state import Checkpoints, Journal, JournalRecord
from arenad.scopes import RESET_PRESETS, EventWindow, Exclusions, ScopeConfig, ScopeSet
from bench.cli import _players, _positive
from bench.core import _proc_status, engine_version, loadavg, machine, vm_rss

T0 = 1_764_000_000.0  # event time of the first kill (2025-11-24)
DT = 0.05  # seconds between kills
SERVER = "arena-1"
ACTIVITY_SIGMA = 1.0  # lognormal spread of how often each player plays
JOURNAL_CHUNK = 128  # records per journal record: the daemon appends 4 * SLICE at a time
SEASON = "2025-12"
BUSY_LOAD = 1.5  # 1-minute load average above which another process shared the 2 cores
EVENT_WINDOWS = 7
SETUPS = ("engine", "1", "3", "10")
LABELS = {"engine": "Engine.feed", "1": "1 scope", "3": "3 scopes", "10": "10 scopes"}
RECOMPUTE_KINDS: tuple[tuple[str, ...], ...] = (("global",), ("global", "server"))

Result = dict[str, Any]
Event = tuple[str, str, float]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- workload
def player_name(i: int) -> str:
    return f"player{i:07d}"  # a fresh str for every event, as a decoder makes one


class Population:
    """P players: names, activity weights (skewed choice) and hidden skills, from one seed."""

    def __init__(self, players: int, seed: int) -> None:
        self.players = players
        self.rng = np.random.default_rng(seed)
        act = self.rng.lognormal(0.0, ACTIVITY_SIGMA, players)
        self.p = act / act.sum()
        self.skill = self.rng.normal(0.0, 1.0, players)

    def _winner_first(
        self, a: np.ndarray[Any, np.dtype[np.int64]], b: np.ndarray[Any, np.dtype[np.int64]]
    ) -> tuple[list[int], list[int]]:
        win = self.rng.random(len(a)) < 1.0 / (1.0 + np.exp(-(self.skill[a] - self.skill[b])))
        return np.where(win, a, b).tolist(), np.where(win, b, a).tolist()

    def introductions(self) -> tuple[list[int], list[int]]:
        """ceil(P/2) kills that between them involve every player once (a random pairing)."""
        perm = self.rng.permutation(self.players)
        if len(perm) % 2:
            perm = np.append(perm, perm[0])
        return self._winner_first(perm[0::2], perm[1::2])

    def kills(self, n: int) -> tuple[list[int], list[int]]:
        """n kills, both players drawn by activity (never the same player twice in one kill)."""
        a = self.rng.choice(self.players, n, p=self.p)
        b = self.rng.choice(self.players, n, p=self.p)
        same = a == b
        while same.any():
            b[same] = self.rng.choice(self.players, int(same.sum()), p=self.p)
            same = a == b
        return self._winner_first(a, b)

    def events(self, attackers: list[int], victims: list[int], first: int) -> list[Event]:
        name = player_name
        return [
            (name(a), name(v), T0 + DT * (first + k))
            for k, (a, v) in enumerate(zip(attackers, victims, strict=True))
        ]


def feed_workload(players: int, events: int, seed: int) -> tuple[list[tuple[int, int, float]], list[Event]]:
    """(warm-up, timed stream): every player introduced, then P/2 kills of play; then ``events``
    kills. The warm-up holds player numbers, so that the name strings the engines keep are made
    (and counted in the RSS growth) while it runs; the stream holds names."""
    pop = Population(players, seed)
    ia, iv = pop.introductions()
    pa, pv = pop.kills(players // 2)
    wa, wv = ia + pa, iv + pv
    warm = [(a, v, T0 + DT * k) for k, (a, v) in enumerate(zip(wa, wv, strict=True))]
    ma, mv = pop.kills(events)
    return warm, pop.events(ma, mv, len(warm))


# ---------------------------------------------------------------------------- part 1: scopes
def scope_config(setup: str, t_first: float, t_last: float) -> ScopeConfig:
    if setup in ("engine", "1"):
        return ScopeConfig(kinds=("global",))
    if setup == "3":
        return ScopeConfig(kinds=("global", "server", "season"))
    windows = tuple(EventWindow(f"cup-{k}", t_first, t_last + 1.0) for k in range(EVENT_WINDOWS))
    return ScopeConfig(kinds=("global", "server", "season", "event"), events=windows)


def _feeds(engines: Sequence[Engine]) -> int:
    """Every ``feed`` call these engines have decided on (applied, filtered or rejected)."""
    return sum(e.applied + e.filtered + sum(e.rejected.values()) for e in engines)


def _pct(ns: list[int]) -> dict[str, float]:
    if not ns:
        return {}
    q = np.percentile(np.asarray(ns, dtype=np.float64), [50.0, 99.0])
    return {"n": len(ns), "p50_us": round(float(q[0]) / 1e3, 2), "p99_us": round(float(q[1]) / 1e3, 2)}


def recalibration_kills(engine: Engine, times: Sequence[float]) -> list[int]:
    """Indices of the kills before which ``engine`` will recalibrate (``Engine.feed``'s schedule:
    the first valid kill at or after ``next_recalibration``, then ``recalibrate_interval`` later).
    Every kill of the stream is valid and in order; every scope keeps the same schedule."""
    out = []
    due = engine.next_recalibration
    step = engine.params.recalibrate_interval
    for k, t in enumerate(times):
        if t >= due:
            out.append(k)
            due = t + step
    return out


def _timed_loop(
    feed: Callable[..., object],
    events: Sequence[tuple[Any, ...]],
    sample: int,
    server: bool,
    also: Sequence[int] = (),
) -> tuple[int, list[int], list[int]]:
    """Feed every event; every ``sample``-th one, and those at the indices ``also``, timed alone.

    Returns (wall ns, ns of the sampled events, ns of the ``also`` events). Two copies of the
    loop, so that neither pays for a ``feed(*event)`` call.
    """
    pc = time.perf_counter_ns
    extra = set(also)
    timed = sorted(set(range(0, len(events), sample)) | extra)
    lat: list[int] = []
    lat_also: list[int] = []
    prev = 0
    s0 = pc()
    if server:
        for i in timed:
            for a, v, t, s in events[prev:i]:
                feed(a, v, t, s)
            a, v, t, s = events[i]
            t0 = pc()
            feed(a, v, t, s)
            ns = pc() - t0
            if i % sample == 0:
                lat.append(ns)
            if i in extra:
                lat_also.append(ns)
            prev = i + 1
        for a, v, t, s in events[prev:]:
            feed(a, v, t, s)
    else:
        for i in timed:
            for a, v, t in events[prev:i]:
                feed(a, v, t)
            a, v, t = events[i]
            t0 = pc()
            feed(a, v, t)
            ns = pc() - t0
            if i % sample == 0:
                lat.append(ns)
            if i in extra:
                lat_also.append(ns)
            prev = i + 1
        for a, v, t in events[prev:]:
            feed(a, v, t)
    return pc() - s0, lat, lat_also


def run_feed(
    setup: str, players: int, *, events: int, seed: int, sample: int, log: Callable[[str], None] = _stderr
) -> Result:
    """One setup (``engine``, ``1``, ``3`` or ``10``) on the workload of (players, events, seed)."""
    label = LABELS[setup]
    warm, main = feed_workload(players, events, seed)
    params = ADRParams()
    config = scope_config(setup, warm[0][2], main[-1][2])
    stream: list[tuple[Any, ...]] = main if setup == "engine" else [(a, v, t, SERVER) for a, v, t in main]
    gc.collect()
    load0 = loadavg()
    rss0 = vm_rss()
    w0 = time.perf_counter()
    season_ms = None
    if setup == "engine":
        engine = Engine(params)
        for a, v, t in warm:
            engine.feed(player_name(a), player_name(v), t)
        feed: Callable[..., object] = engine.feed
        engines = [engine]
        scopes = None
    else:
        scopes = ScopeSet(params, config)
        for a, v, t in warm:
            scopes.feed(player_name(a), player_name(v), t, SERVER)
        if config.on("season"):
            s0 = time.perf_counter()
            scopes.start_season(SEASON, main[0][2], RESET_PRESETS["softer"])
            season_ms = round(1e3 * (time.perf_counter() - s0), 1)
        feed = scopes.feed
        engines = list(scopes.engines.values())
    warm_s = time.perf_counter() - w0
    gc.collect()
    rss1 = vm_rss()
    n_eng = len(engines)
    tracked = [len(e) for e in engines]
    log(f"[P={players:,} {label}] warm-up {warm_s:.1f} s, {n_eng} engines; {events:,} timed events ...")

    g = engines[0]
    before = (g.applied, g.filtered, sum(g.rejected.values()), _feeds(engines), g.calibrations)
    recal = recalibration_kills(g, [e[2] for e in main])
    wall_ns, lat, lat_recal = _timed_loop(feed, stream, sample, scopes is not None, recal)
    if scopes is not None:
        engines = list(scopes.engines.values())
    feeds = _feeds(engines) - before[3]
    wall = wall_ns / 1e9
    log(f"[P={players:,} {label}] {events / wall:,.0f} events/s, {feeds / wall:,.0f} engine feeds/s")
    return {
        "setup": setup,
        "label": label,
        "players": players,
        "events": events,
        "warmup_events": len(warm),
        "engines": n_eng,
        "scopes": sorted(scopes.engines) if scopes is not None else None,
        "tracked_per_engine": tracked,
        "wall_s": round(wall, 3),
        "events_per_s": round(events / wall, 1),
        "engine_feeds": feeds,
        "engine_feeds_per_s": round(feeds / wall, 1),
        "engines_per_event": round(feeds / events, 3),
        "us_per_event": round(1e6 * wall / events, 3),
        "us_per_engine_feed": round(1e6 * wall / feeds, 3) if feeds else None,
        "latency_sample_every": sample,
        "latency": _pct(lat),
        "recalibration_kills": {
            "count": len(lat_recal),
            "global_recalibrations": g.calibrations - before[4],  # equals count: the schedule held
            "mean_ms": round(float(np.mean(lat_recal)) / 1e6, 2) if lat_recal else None,
            "max_ms": round(max(lat_recal) / 1e6, 2) if lat_recal else None,
        },
        "global": {
            "applied": g.applied - before[0],
            "filtered": g.filtered - before[1],
            "rejected": sum(g.rejected.values()) - before[2],
        },
        "warmup_s": round(warm_s, 2),
        "season_start_ms": season_ms,
        "loadavg_1m": [load0, loadavg()],
        "rss_growth_bytes": rss1 - rss0,
        "rss_bytes_per_player_per_scope": round((rss1 - rss0) / (players * n_eng), 1)
        if rss0 and rss1
        else None,
    }


# ---------------------------------------------------------------------------- part 2: recompute
def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux /proc/self/clear_refs "5"); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _peak_since(rss0: int, reset: bool) -> int | None:
    return _proc_status("VmHWM") - rss0 if reset else None


def build_state(
    state_dir: Path, *, events: int, players: int, servers: int, segments: int, seed: int
) -> Result:
    """Journal ``events`` kills in ``segments`` segments, then archive all but the open one."""
    pop = Population(players, seed)
    attackers, victims = pop.kills(events)
    server_of = pop.rng.integers(0, servers, events).tolist()
    server_names = [f"srv-{k:02d}" for k in range(servers)]
    name = player_name
    journal = Journal(state_dir)
    per = math.ceil(events / segments)
    b0 = time.perf_counter()
    for lo in range(0, events, per):
        journal.open_segment(lo + 1)
        for c in range(lo, min(events, lo + per), JOURNAL_CHUNK):
            chunk: list[JournalRecord] = [
                (k + 1, T0 + DT * k, name(attackers[k]), name(victims[k]), server_names[server_of[k]], None)
                for k in range(c, min(events, lo + per, c + JOURNAL_CHUNK))
            ]
            journal.append(chunk)
    journal.sync()
    write_s = time.perf_counter() - b0
    sizes = [p.stat().st_size for _f, p in journal.segments()]
    archive = Archive(state_dir / "archive")
    archive.open()
    a0 = time.perf_counter()
    retired = retire_segments(journal, archive, events)
    archive_s = time.perf_counter() - a0
    journal.close()
    archived_raw = sum(sizes[:retired])
    return {
        "events": events,
        "players": players,
        "servers": servers,
        "segments": len(sizes),
        "segments_archived": retired,
        "journal_bytes": sum(sizes),
        "journal_bytes_per_event": round(sum(sizes) / events, 1),
        "archived_events": archive.last_seq,
        "archived_raw_bytes": archived_raw,
        "archive_bytes": archive.total_bytes,
        "archive_files": len(archive.files),
        "archive_bytes_per_event": round(archive.total_bytes / archive.last_seq, 2)
        if archive.last_seq
        else None,
        "compression_ratio": round(archived_raw / archive.total_bytes, 2) if archive.total_bytes else None,
        "journal_write_s": round(write_s, 2),
        "archive_s": round(archive_s, 2),
    }


def _snapshot(
    state_dir: Path, kinds: tuple[str, ...], params: ADRParams, mid: int
) -> tuple[Snapshots, float]:
    """The state after ``mid`` events, kept as the daemon keeps a snapshot (untimed)."""
    config = ScopeConfig(kinds=kinds)
    res = rebuild(params, config, Exclusions(), History(state_dir).records(0, mid))
    clock = res.scopes.global_engine.clock
    tag = "-".join(kinds)
    ckpt_dir = state_dir / f"checkpoints-{tag}"
    ckpt_dir.mkdir()
    path = Checkpoints(ckpt_dir).write(mid, {"seq": mid, "scopes": res.scopes.export_state()})
    snaps = Snapshots(state_dir / f"snapshots-{tag}", keep=4)
    snaps.add(path, mid, clock)
    return snaps, clock


def run_recompute(
    *,
    events: int,
    players: int,
    servers: int,
    segments: int,
    seed: int,
    partial: bool,
    log: Callable[[str], None] = _stderr,
) -> Result:
    params = ADRParams()
    tmp = Path(tempfile.mkdtemp(prefix="arenad-bench-scopes-"))
    try:
        state_dir = tmp / "state"
        state_dir.mkdir()
        load0 = loadavg()
        log(f"[recompute] journaling {events:,} kills in {segments} segments and archiving ...")
        build = build_state(
            state_dir, events=events, players=players, servers=servers, segments=segments, seed=seed
        )
        gc.collect()
        log(
            f"[recompute] journal {build['journal_bytes']:,} B, archive {build['archive_bytes']:,} B; "
            "reading history ..."
        )

        reset = _reset_peak()
        rss0 = vm_rss()
        d0 = time.perf_counter()
        count = 0
        for _rec in History(state_dir).records(0, events):
            count += 1
        decode_s = time.perf_counter() - d0
        decode_peak = _peak_since(rss0, reset)
        if count != events:
            raise RuntimeError(f"history holds {count} records, expected {events}")
        archive = Archive(state_dir / "archive")
        archive.open()
        g0 = time.perf_counter()
        unzipped = 0
        for f in archive.files:
            with (archive.dir / f["name"]).open("rb") as fh:
                unzipped += len(gzip.decompress(fh.read(int(f["bytes"]))))
        gunzip_s = time.perf_counter() - g0
        gc.collect()

        runs = []
        mid = events // 2
        for kinds in RECOMPUTE_KINDS:
            label = ",".join(kinds)
            log(f"[recompute] full rebuild, kinds {label} ...")
            reset = _reset_peak()
            rss0 = vm_rss()
            r0 = time.perf_counter()
            res = rebuild_from_history(state_dir, params, ScopeConfig(kinds=kinds), Exclusions(), upto=events)
            full_s = time.perf_counter() - r0
            peak = _peak_since(rss0, reset)
            g = res.scopes.global_engine
            if res.records != events:
                raise RuntimeError(f"rebuild applied {res.records} records, expected {events}")
            run: Result = {
                "kinds": list(kinds),
                "engines": len(res.scopes.engines),
                "seconds": round(full_s, 2),
                "events_per_s": round(events / full_s, 1),
                "rating_s_excl_decode": round(full_s - decode_s, 2),
                "peak_rss_growth_bytes": peak,
                "global": {
                    "applied": g.applied,
                    "filtered": g.filtered,
                    "rejected": sum(g.rejected.values()),
                },
                "tracked": len(g),
            }
            log(f"[recompute] {label}: {full_s:.1f} s, {events / full_s:,.0f} events/s")
            if partial and mid > 0:
                full_cols = g.export_state()["columns"]
                del res, g
                gc.collect()
                snaps, clock = _snapshot(state_dir, kinds, params, mid)
                gc.collect()
                p0 = time.perf_counter()
                part = rebuild_from_history(
                    state_dir,
                    params,
                    ScopeConfig(kinds=kinds),
                    Exclusions(),
                    upto=events,
                    from_t=clock + DT / 2,
                    snapshots=snaps,
                )
                part_s = time.perf_counter() - p0
                same = part.scopes.global_engine.export_state()["columns"] == full_cols
                run["partial"] = {
                    "base_seq": part.base_seq,
                    "records": part.records,
                    "seconds": round(part_s, 2),
                    "identical_to_full": same,
                }
                log(f"[recompute] {label}: partial from seq {part.base_seq:,}: {part_s:.1f} s")
                del part, full_cols
            else:
                del res, g
            gc.collect()
            runs.append(run)
        return {
            "state": build,
            "decode": {
                "records": count,
                "seconds": round(decode_s, 2),
                "records_per_s": round(count / decode_s, 1),
                "peak_rss_growth_bytes": decode_peak,
                "gunzip_only_s": round(gunzip_s, 3),
                "unzipped_bytes": unzipped,
            },
            "rebuilds": runs,
            "loadavg_1m": [load0, loadavg()],
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.scopes",
        description="ScopeSet.feed with 1, 3 and 10 scopes against Engine.feed; full recompute "
        "of archived history (rebuild_from_history).",
    )
    ap.add_argument(
        "--players", type=_players, default=[10_000, 100_000], help="populations (default 10000,100000)"
    )
    ap.add_argument(
        "--events", type=_positive, default=200_000, help="timed kills per setup (default 200,000)"
    )
    ap.add_argument("--sample", type=_positive, default=16, help="time every N-th event alone (default 16)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--recompute-events", type=_positive, default=1_000_000, help="archived kills (default 1M)"
    )
    ap.add_argument(
        "--recompute-players", type=_positive, default=5_000, help="players in them (default 5000)"
    )
    ap.add_argument("--recompute-servers", type=_positive, default=8, help="servers in them (default 8)")
    ap.add_argument("--segments", type=_positive, default=10, help="journal segments (default 10)")
    ap.add_argument(
        "--no-partial", action="store_true", help="skip the partial recompute from a mid snapshot"
    )
    ap.add_argument("--only", choices=("scopes", "recompute"), default=None, help="run one part only")
    ap.add_argument("--in-process", action="store_true", help="run everything in this process (no spawn)")
    ap.add_argument("--json", action="store_true", help="end with one line of JSON holding every figure")
    return ap.parse_args(argv)


def _call(in_process: bool, fn: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    if in_process:
        return fn(*args, **kwargs)
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    host = machine()
    started = time.perf_counter()
    feeds: list[Result] = []
    recompute: Result | None = None
    if args.only in (None, "scopes"):
        for p in args.players:
            for setup in SETUPS:
                feeds.append(
                    _call(
                        args.in_process,
                        run_feed,
                        setup,
                        p,
                        events=args.events,
                        seed=args.seed,
                        sample=args.sample,
                    )
                )
        for r in feeds:  # RSS each scope beyond the global one adds, against the 1-scope run
            one = next((o for o in feeds if o["players"] == r["players"] and o["setup"] == "1"), None)
            extra = r["engines"] - 1
            r["rss_bytes_per_player_per_extra_scope"] = (
                round((r["rss_growth_bytes"] - one["rss_growth_bytes"]) / (r["players"] * extra), 1)
                if one is not None and extra > 0 and r["setup"] != "engine"
                else None
            )
    if args.only in (None, "recompute"):
        recompute = _call(
            args.in_process,
            run_recompute,
            events=args.recompute_events,
            players=args.recompute_players,
            servers=args.recompute_servers,
            segments=args.segments,
            seed=args.seed,
            partial=not args.no_partial,
        )
    report = {
        "bench": "arenad.scopes",
        "schema": 1,
        "command": "python -m bench.scopes " + " ".join(sys.argv[1:] if argv is None else argv),
        "unix_time": int(time.time()),
        "total_s": round(time.perf_counter() - started, 1),
        "machine": host,
        "engine": engine_version(),
        "feed": feeds,
        "recompute": recompute,
    }
    print(format_report(report))
    if args.json:
        print(json.dumps(report, separators=(",", ":"), allow_nan=False))
    return 0


# ---------------------------------------------------------------------------- table
def _n(x: Any) -> str:
    return "-" if x is None else f"{round(x):,}"


def _f(x: Any, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


FEED_ROWS: list[tuple[str, Callable[[Result], str]]] = [
    ("engines per kill", lambda r: _f(r["engines_per_event"], 2)),
    ("**kills/s**", lambda r: _n(r["events_per_s"])),
    ("engine feeds/s", lambda r: _n(r["engine_feeds_per_s"])),
    ("µs per kill", lambda r: _f(r["us_per_event"])),
    ("µs per engine feed", lambda r: _f(r["us_per_engine_feed"])),
    (
        "latency p50 / p99 µs",
        lambda r: f"{_f(r['latency'].get('p50_us'), 1)} / {_f(r['latency'].get('p99_us'), 1)}",
    ),
    (
        "kills with recalibrations due: n, mean / max ms",
        lambda r: "{count}, {mean_ms} / {max_ms}".format(**r["recalibration_kills"]),
    ),
    (
        "global applied / filtered / rejected",
        lambda r: "{applied:,} / {filtered:,} / {rejected:,}".format(**r["global"]),
    ),
    ("RSS bytes per player per scope", lambda r: _n(r["rss_bytes_per_player_per_scope"])),
    ("  each scope beyond global, vs 1 scope", lambda r: _n(r["rss_bytes_per_player_per_extra_scope"])),
    ("warm-up s (untimed)", lambda r: _f(r["warmup_s"], 1)),
    ("start_season ms", lambda r: _f(r["season_start_ms"], 1)),
    ("load average before / after", lambda r: " / ".join(_f(x, 2) for x in r["loadavg_1m"])),
]


def format_report(report: Result) -> str:
    out: list[str] = []
    feeds: list[Result] = report["feed"]
    for p in sorted({r["players"] for r in feeds}):
        rows = [r for r in feeds if r["players"] == p]
        ref = rows[0]
        out.append(
            f"\nScopeSet.feed, P = {p:,} players, {ref['events']:,} timed kills "
            f"(warm-up {ref['warmup_events']:,}), latency: every {ref['latency_sample_every']}th kill"
        )
        out.append("| | " + " | ".join(r["label"] for r in rows) + " |")
        out.append("| --- |" + " ---: |" * len(rows))
        for name, cell in FEED_ROWS:
            out.append(f"| {name} | " + " | ".join(cell(r) for r in rows) + " |")
        if any((x or 0.0) > BUSY_LOAD for r in rows for x in r["loadavg_1m"]):
            out.append(f"WARNING: load average above {BUSY_LOAD}: another process competed for the CPU")
    rec: Result | None = report["recompute"]
    if rec is not None:
        st, dec = rec["state"], rec["decode"]
        out.append(
            f"\nRecompute: {st['events']:,} kills, {st['players']:,} players, {st['servers']} servers, "
            f"{st['segments']} journal segments ({st['segments_archived']} archived)"
        )
        out.append(
            f"journal {st['journal_bytes']:,} B ({st['journal_bytes_per_event']} B/kill); archived part "
            f"{st['archived_raw_bytes']:,} B raw -> {st['archive_bytes']:,} B gzip "
            f"({st['archive_bytes_per_event']} B/kill, ratio {st['compression_ratio']}); "
            f"journal write {st['journal_write_s']} s, archiving {st['archive_s']} s"
        )
        peak = dec["peak_rss_growth_bytes"]
        out.append(
            f"read + decode history (no rating): {dec['seconds']} s, {_n(dec['records_per_s'])} records/s"
            f"{'' if peak is None else f', peak RSS +{peak / 2**20:,.0f} MiB'}; gunzip alone "
            f"{dec['gunzip_only_s']} s"
        )
        out.append(
            "| kinds | engines | seconds | kills/s | rating only s | peak RSS MiB | filtered | partial |"
        )
        out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for r in rec["rebuilds"]:
            part = r.get("partial")
            ptxt = (
                "-"
                if part is None
                else f"{part['records']:,} from seq {part['base_seq']:,}: {part['seconds']} s"
                + ("" if part["identical_to_full"] else " (DIFFERS from full!)")
            )
            pk = r["peak_rss_growth_bytes"]
            out.append(
                f"| {','.join(r['kinds'])} | {r['engines']} | {r['seconds']} | {_n(r['events_per_s'])} | "
                f"{r['rating_s_excl_decode']} | {'-' if pk is None else f'{pk / 2**20:,.0f}'} | "
                f"{r['global']['filtered']:,} | {ptxt} |"
            )
    host = report["machine"]
    if rec is not None and any((x or 0.0) > BUSY_LOAD for x in rec["loadavg_1m"]):
        out.append(f"WARNING: load average above {BUSY_LOAD}: another process competed for the CPU")
    out.append(
        f"\n{host['cpu']}, {host['cores']} cores, Python {host['python']}, "
        f"load {host.get('loadavg_1m')} at start; total {report['total_s']} s"
    )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
