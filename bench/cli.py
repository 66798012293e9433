"""``python -m bench``: run the core benchmark at each population size, print a table and JSON.

Each population size runs in a fresh interpreter (spawned), so one scenario's heap cannot lend
memory to the next one's RSS figure. Progress goes to stderr; stdout is the table followed by
one line of JSON with every figure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.core import Result, engine_version, machine, run_scenario
from bench.stream import StreamConfig

DEFAULT_PLAYERS = (100_000, 1_000_000)
QUICK_PLAYERS = (10_000,)
QUICK_EVENTS = 50_000


def default_events(players: int) -> int:
    return 500_000 if players >= 1_000_000 else 1_000_000


def _players(text: str) -> list[int]:
    try:
        out = [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not out or any(x < 100 for x in out):
        raise argparse.ArgumentTypeError("each population must be at least 100 players")
    return out


def _positive(text: str) -> int:
    try:
        n = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return n


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark the complete ADR step (Engine.apply + recalibration) at P players.",
    )
    ap.add_argument(
        "--players",
        type=_players,
        default=None,
        help="comma-separated population sizes (default: 100000,1000000; --quick: 10000)",
    )
    ap.add_argument(
        "--events",
        type=_positive,
        default=None,
        help="main-stream events per population (default: 1,000,000 below 1M players, 500,000 from "
        "1M; --quick: 50,000)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 10k players, 50k events")
    ap.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    ap.add_argument("--rate", type=float, default=200.0, help="events per second of event time (default 200)")
    ap.add_argument("--no-trace", action="store_true", help="skip the tracemalloc pass (the second warm-up)")
    ap.add_argument(
        "--in-process", action="store_true", help="run every population in this process (no spawn)"
    )
    ap.add_argument(
        "--preset",
        choices=("default", "paper"),
        default="default",
        help='[adr] preset to rate with (default: arenad\'s defaults; "paper": the §9 configuration)',
    )
    args = ap.parse_args(argv)
    if args.rate <= 0:
        ap.error("--rate must be > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    players: list[int] = args.players or list(QUICK_PLAYERS if args.quick else DEFAULT_PLAYERS)
    configs = [
        StreamConfig(
            players=p,
            events=args.events or (QUICK_EVENTS if args.quick else default_events(p)),
            seed=args.seed,
            rate=args.rate,
        )
        for p in players
    ]
    trace = not args.no_trace
    host = machine()  # before the run, so its load average is the machine's own
    started = time.perf_counter()
    results: list[Result] = []
    if args.in_process:
        results = [run_scenario(c, trace, preset=args.preset) for c in configs]
    else:
        ctx = multiprocessing.get_context("spawn")
        for c in configs:
            with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
                results.append(pool.submit(run_scenario, c, trace, preset=args.preset).result())
    report = {
        "bench": "arenad.core",
        "schema": 1,
        "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "unix_time": int(time.time()),
        "total_s": round(time.perf_counter() - started, 1),
        "machine": host,
        "engine": engine_version(),
        "results": results,
    }
    print(format_report(report))
    print(json.dumps(report, separators=(",", ":"), allow_nan=False))
    return 0


# ---------------------------------------------------------------------------- table
def _n(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and digits:
        return f"{x:,.{digits}f}"
    return f"{round(x):,}"


def _us(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1000:.1f}"


Row = tuple[str, Callable[[Result], str]]

ROWS: list[Row] = [
    ("main-stream events", lambda r: _n(r["events"])),
    ("warm-up events (untimed)", lambda r: _n(r["warmup_events"])),
    ("event time covered (s)", lambda r: _n(r["state"]["event_time_span_s"])),
    ("THROUGHPUT events/s (incl. recal)", lambda r: _n(r["throughput"]["events_per_s"])),
    ("  apply loop only, events/s", lambda r: _n(r["throughput"]["apply_events_per_s"])),
    ("  us per event (incl. recal)", lambda r: _n(r["throughput"]["us_per_event"], 2)),
    ("recalibrations: count", lambda r: _n(r["recalibration"]["count"])),
    ("  mean / max ms", lambda r: _pair(r["recalibration"]["mean_ms"], r["recalibration"]["max_ms"], 2)),
    ("LATENCY us per apply: p50", lambda r: _us(r["latency_ns"].get("p50"))),
    ("  p90", lambda r: _us(r["latency_ns"].get("p90"))),
    ("  p99", lambda r: _us(r["latency_ns"].get("p99"))),
    ("  p99.9", lambda r: _us(r["latency_ns"].get("p99.9"))),
    ("  max", lambda r: _us(r["latency_ns"].get("max"))),
    ("  sampled events", lambda r: _n(r["latency_ns"].get("n"))),
    ("  applied only: p50 / p99", lambda r: _lat_pair(r["latency_applied_ns"])),
    ("  timer overhead ns (included)", lambda r: _n(r["timer_overhead_ns"])),
    ("MEMORY bytes/player: tracemalloc", lambda r: _n(r["memory"].get("traced_bytes_per_player"))),
    ("  tracemalloc peak", lambda r: _n(r["memory"].get("traced_peak_bytes_per_player"))),
    ("  RSS growth", lambda r: _n(r["memory"].get("rss_bytes_per_player"))),
    ("OUTCOMES applied", lambda r: _n(r["outcomes"]["applied"])),
    ("  filtered (cooldown)", lambda r: _n(r["outcomes"]["filtered"])),
    ("  rejected", lambda r: _rejected(r["outcomes"])),
    ("  late, applied at clock", lambda r: _n(r["outcomes"]["late_applied"])),
    ("STATE active at start / end", lambda r: _pair(r["state"]["active_start"], r["state"]["active_end"])),
    ("  expired during stream", lambda r: _n(r["state"]["expired"])),
    ("  tier changes", lambda r: _n(r["state"]["tier_changes"])),
    ("  gc collections gen0/1/2", lambda r: "/".join(str(x) for x in r["gc_collections"])),
    ("load average 1m (main start / end)", lambda r: _pair(r["loadavg_1m"][0], r["loadavg_1m"][1], 2)),
]


def _pair(a: Any, b: Any, digits: int = 0) -> str:
    return f"{_n(a, digits)} / {_n(b, digits)}"


def _lat_pair(lat: dict[str, Any]) -> str:
    return f"{_us(lat.get('p50'))} / {_us(lat.get('p99'))}"


def _rejected(o: dict[str, Any]) -> str:
    detail = ", ".join(f"{k} {v:,}" for k, v in o["rejected_by_reason"].items())
    return f"{o['rejected']:,}" + (f" ({detail})" if detail else "")


def format_report(report: dict[str, Any]) -> str:
    results: list[Result] = report["results"]
    m = report["machine"]
    e = report["engine"]
    commit = e.get("git_commit") or "unknown commit"
    dirty = " + uncommitted arenad/ changes" if e.get("arenad_dirty") else ""
    lines = [
        "arenad core benchmark: complete ADR step (Engine.apply + due recalibrations), no I/O",
        f"engine {e['engine_file']} @ {commit}{dirty}",
        f"Python {m['python']} ({m['implementation']}), numpy {m['numpy']}, {m['cpu']}, {m['cores']} cores",
        "",
    ]
    loads = [x for r in results for x in r["loadavg_1m"] if x is not None]
    cores = m.get("cores") or 1
    if loads and max(loads) > 1.5:
        lines.insert(
            3,
            f"WARNING: load average reached {max(loads):.2f} on {cores} cores while timing: other "
            "processes competed for the CPU, so throughput and tail latency are pessimistic.",
        )
    headers = [f"P = {r['players']:,}" for r in results]
    cells = [[fn(r) for r in results] for _, fn in ROWS]
    w0 = max(len(label) for label, _ in ROWS)
    widths = [max(len(h), *(len(row[k]) for row in cells)) for k, h in enumerate(headers)]
    lines.append(" " * w0 + "".join(f"  {h:>{w}}" for h, w in zip(headers, widths, strict=True)))
    for (label, _), row in zip(ROWS, cells, strict=True):
        lines.append(f"{label:<{w0}}" + "".join(f"  {c:>{w}}" for c, w in zip(row, widths, strict=True)))
    for r in results:
        sites = r["memory"].get("top_sites")
        if not sites:
            continue
        lines.append("")
        lines.append(
            f"where the traced bytes live at P = {r['players']:,} (bytes/player, by allocating line):"
        )
        for s in sites:
            what = s["line"][:70]
            if s["site"].startswith("bench/"):
                what = "player-name strings kept by the engine (decoded per event in warm_up)"
            lines.append(f"  {s['bytes_per_player']:>8,.1f}  {s['site']:<28} {what}")
    lines.append("")
    lines.append(f"total benchmark time {report['total_s']:.0f} s; figures as JSON on the next line")
    return "\n".join(lines)
