"""Measure the complete ADR step of ``arenad.core.engine.Engine`` at one population size.

One scenario, in order (bench/README.md describes each figure):

1. generate the workload (untimed);
2. engine A: construction + warm-up with tracing off; VmRSS before and after -> RSS per player;
3. main stream on engine A: ``recalibrate`` whenever due (as ``Engine.feed`` and replay do),
   then ``apply``. Chunks of ``CHUNK`` events alternate between *plain* chunks (no per-event
   timer: throughput) and *timed* chunks (``perf_counter_ns`` around each ``apply``: latency);
4. engine B: the same construction + warm-up under tracemalloc -> traced bytes per player and
   the allocation sites that hold them.
"""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from array import array
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from arenad.core.engine import Engine, Outcome
from arenad.core.params import ADRParams
from bench.stream import StreamConfig, Workload, generate

CHUNK = 1024
Result = dict[str, Any]
Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def vm_rss() -> int:
    """Resident set size of this process in bytes (VmRSS of /proc/self/status), 0 if unknown."""
    return _proc_status("VmRSS")


def _proc_status(key: str) -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def warm_up(engine: Engine, work: Workload) -> None:
    """Feed the history (untimed): one introduction event per player, interleaved in time with
    the regulars' recent play, so all P players are tracked when the main stream starts.

    Names are decoded afresh for each event, as a wire decoder would hand them over, so the name
    strings the engine keeps are allocated (and measured) here. The history is sparse in time, so
    it recalibrates every 1/64 of its span rather than every ``recalibrate_interval``.
    """
    names = work.names
    apply = engine.apply
    t_arr = work.warm_t
    step = max(engine.params.recalibrate_interval, float(t_arr[-1] - t_arr[0]) / 64.0)
    next_recal = float(t_arr[0])
    for a, v, t in zip(work.warm_attacker.tolist(), work.warm_victim.tolist(), t_arr.tolist(), strict=True):
        if t >= next_recal:
            engine.recalibrate(t)
            next_recal = t + step
        apply(names[a].encode().decode(), names[v].encode().decode(), t)


def _percentiles(ns: np.ndarray[Any, np.dtype[np.int64]]) -> dict[str, float]:
    if len(ns) == 0:
        return {}
    q = np.percentile(ns, [50.0, 90.0, 99.0, 99.9], method="linear")
    return {
        "n": len(ns),
        "mean": round(float(ns.mean()), 1),
        "p50": round(float(q[0]), 1),
        "p90": round(float(q[1]), 1),
        "p99": round(float(q[2]), 1),
        "p99.9": round(float(q[3]), 1),
        "max": float(ns.max()),
    }


def timer_overhead_ns(rounds: int = 100_000) -> float:
    """Median cost of the back-to-back ``perf_counter_ns`` pair wrapped around each timed apply."""
    pc = time.perf_counter_ns
    out = array("q", bytes(8 * rounds))
    for k in range(rounds):
        t0 = pc()
        t1 = pc()
        out[k] = t1 - t0
    return float(np.median(np.frombuffer(out, dtype=np.int64)))


def run_main(engine: Engine, events: list[tuple[str, str, float]]) -> Result:
    """Feed the main stream; returns throughput, latency and recalibration figures."""
    apply = engine.apply
    due = engine.recalibration_due
    recalibrate = engine.recalibrate
    pc = time.perf_counter_ns
    n = len(events)
    lat = array("q", bytes(8 * (n // 2 + CHUNK)))
    kind = bytearray(len(lat))  # Outcome value of each timed event
    k = 0
    recal_ns: list[int] = []
    plain_ns = 0  # wall time of the plain chunks, recalibrations included
    plain_recal_ns = 0
    plain_events = 0
    gc_before = [s["collections"] for s in gc.get_stats()]
    wall0 = pc()
    for c, lo in enumerate(range(0, n, CHUNK)):
        chunk = events[lo : lo + CHUNK]
        if c % 2 == 0:
            r_ns = 0
            s0 = pc()
            for a, v, t in chunk:
                if due(t):
                    r0 = pc()
                    recalibrate(t)
                    r1 = pc() - r0
                    recal_ns.append(r1)
                    r_ns += r1
                apply(a, v, t)
            plain_ns += pc() - s0
            plain_recal_ns += r_ns
            plain_events += len(chunk)
        else:
            for a, v, t in chunk:
                if due(t):
                    r0 = pc()
                    recalibrate(t)
                    recal_ns.append(pc() - r0)
                t0 = pc()
                o = apply(a, v, t)
                t1 = pc()
                lat[k] = t1 - t0
                kind[k] = o
                k += 1
    wall_ns = pc() - wall0
    gc_after = [s["collections"] for s in gc.get_stats()]

    apply_s = (plain_ns - plain_recal_ns) / 1e9
    apply_rate = plain_events / apply_s if apply_s > 0 else float("nan")
    recal_total_s = sum(recal_ns) / 1e9
    # All N events at the plain-chunk apply rate, plus every recalibration of the stream.
    overall = n / (n / apply_rate + recal_total_s)
    ns = np.frombuffer(lat, dtype=np.int64)[:k]
    kinds = np.frombuffer(kind, dtype=np.uint8)[:k]
    recal = np.asarray(recal_ns, dtype=np.float64) / 1e6
    return {
        "throughput": {
            "events_per_s": round(overall, 1),
            "apply_events_per_s": round(apply_rate, 1),
            "us_per_event": round(1e6 / overall, 3),
            "plain_events": plain_events,
            "main_wall_s": round(wall_ns / 1e9, 3),
        },
        "recalibration": {
            "count": len(recal_ns),
            "mean_ms": round(float(recal.mean()), 3) if len(recal) else None,
            "max_ms": round(float(recal.max()), 3) if len(recal) else None,
            "total_s": round(recal_total_s, 4),
        },
        "latency_sample": "every event of the timed chunks (alternate 1024-event chunks, ~50%)",
        "latency_ns": _percentiles(ns),
        "latency_applied_ns": _percentiles(ns[kinds == int(Outcome.APPLIED)]),
        "gc_collections": [b - a for a, b in zip(gc_before, gc_after, strict=True)],
    }


def _outcomes(engine: Engine, before: dict[str, Any]) -> dict[str, Any]:
    rejected = {k: v - before["rejected"].get(k, 0) for k, v in sorted(engine.rejected.items())}
    return {
        "applied": engine.applied - before["applied"],
        "filtered": engine.filtered - before["filtered"],
        "rejected": sum(rejected.values()),
        "rejected_by_reason": {k: v for k, v in rejected.items() if v},
        "late_applied": engine.late_applied - before["late_applied"],
    }


def _counters(engine: Engine) -> dict[str, Any]:
    return {
        "applied": engine.applied,
        "filtered": engine.filtered,
        "rejected": dict(engine.rejected),
        "late_applied": engine.late_applied,
    }


def _active_flags(engine: Engine) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
    # Private column, read only for the "expired" diagnostic; absent in another engine layout.
    flags = getattr(engine, "_active", None)
    if not isinstance(flags, bytearray):
        return None
    return np.frombuffer(bytes(flags), dtype=np.uint8).astype(bool)


def _noop_profile(frame: FrameType, event: str, arg: object) -> None:
    return None


def prime_line_tables(work: Workload, params: ADRParams, events: int = 3000) -> None:
    """Run a throwaway engine briefly with a profile hook set, so tracemalloc stays affordable.

    tracemalloc records the line of every allocation. On CPython 3.11 that line is found by
    scanning the code object's line table from its start unless the code object has a line
    array, which is built only for code run while a trace or profile hook is set and then kept.
    ``Engine.apply`` is long, so without this a traced warm-up is ~20x slower than an untraced
    one; with it, ~4x.
    """
    engine = Engine(params)
    n = len(work.warm_t)
    idx = [*range(min(events, n)), *range(max(events, n - events), n)]
    names = work.names
    a = work.warm_attacker
    v = work.warm_victim
    t = work.warm_t
    sys.setprofile(_noop_profile)
    try:
        for k in idx:
            engine.recalibrate(float(t[k]))
            engine.apply(names[int(a[k])], names[int(v[k])], float(t[k]))
    finally:
        sys.setprofile(None)


def traced_memory(work: Workload, params: ADRParams, top: int = 8) -> Result:
    """Engine construction + warm-up under tracemalloc: bytes still held at the end, by site."""
    prime_line_tables(work, params)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    engine = Engine(params)
    warm_up(engine, work)
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    players = len(engine)
    del engine
    stats = snap.statistics("lineno")
    del snap
    sites = []
    for s in stats[:top]:
        frame = s.traceback[0]
        sites.append(
            {
                "site": f"{_short_path(frame.filename)}:{frame.lineno}",
                "bytes_per_player": round(s.size / players, 1),
                "line": _source_line(frame.filename, frame.lineno),
            }
        )
    return {
        "traced_bytes": current - base,
        "traced_bytes_per_player": round((current - base) / players, 1),
        "traced_peak_bytes_per_player": round((peak - base) / players, 1),
        "top_sites": sites,
    }


def _short_path(filename: str) -> str:
    parts = Path(filename).parts
    for anchor in ("arenad", "sortedcontainers", "bench"):
        if anchor in parts:
            return "/".join(parts[len(parts) - 1 - parts[::-1].index(anchor) :])
    return Path(filename).name


def _source_line(filename: str, lineno: int) -> str:
    try:
        with open(filename, encoding="utf-8") as f:
            for k, line in enumerate(f, start=1):
                if k == lineno:
                    return line.strip()
    except OSError:
        pass
    return ""


def engine_version() -> dict[str, Any]:
    """Where the measured engine comes from: its file and the git state of its checkout."""
    import arenad.core.engine as mod  # noqa: PLC0415  # only to locate the measured source

    src = Path(mod.__file__ or "")
    out: dict[str, Any] = {"engine_file": str(src)}
    try:
        root = subprocess.run(
            ["git", "-C", str(src.parent), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.split()
        dirty = subprocess.run(
            ["git", "-C", root[0], "status", "--porcelain", "--", "arenad"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        out["git_commit"] = root[1][:12]
        out["arenad_dirty"] = bool(dirty)
    except (OSError, subprocess.SubprocessError, IndexError):
        out["git_commit"] = None
    return out


def loadavg() -> float | None:
    """1-minute load average; the benchmark itself accounts for about 1 of it while it runs."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "loadavg_1m": loadavg(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu": cpu or platform.processor(),
        "cores": os.cpu_count(),
        "numpy": np.__version__,
    }


def run_scenario(
    cfg: StreamConfig, trace: bool = True, log: Log = _stderr, preset: str = "default"
) -> Result:
    """Everything for one population size; returns a JSON-ready dict. ``preset``: the ``[adr]``
    preset rated with ("default" or "paper", the configuration before issue 14)."""
    params = ADRParams.from_mapping({"preset": preset})
    p = cfg.players
    log(f"[P={p:,}] generating {cfg.events:,} events + warm-up ...")
    g0 = time.perf_counter()
    work = generate(cfg)
    gen_s = time.perf_counter() - g0
    n_warm = len(work.warm_t)
    log(f"[P={p:,}] generated in {gen_s:.1f} s; warm-up of {n_warm:,} events (engine A) ...")

    gc.collect()
    rss0 = vm_rss()
    w0 = time.perf_counter()
    engine = Engine(params)
    warm_up(engine, work)
    warm_s = time.perf_counter() - w0
    gc.collect()
    rss1 = vm_rss()
    if len(engine) != p:
        raise RuntimeError(f"warm-up tracked {len(engine)} players, expected {p}")
    warm_counts = _outcomes(engine, {"applied": 0, "filtered": 0, "rejected": {}, "late_applied": 0})

    log(f"[P={p:,}] warm-up {warm_s:.1f} s; main stream of {cfg.events:,} events ...")
    before = _counters(engine)
    active0 = _active_flags(engine)
    n_active0 = engine.active_count
    calib0 = engine.calibrations
    tiers0 = engine.tier_changes
    load0 = loadavg()
    timing = run_main(engine, work.events)
    timing["loadavg_1m"] = [load0, loadavg()]
    active1 = _active_flags(engine)
    times = [e[2] for e in work.events]
    span = max(times) - min(times) if times else 0.0
    state = {
        "tracked": len(engine),
        "active_start": n_active0,
        "active_end": engine.active_count,
        "expired": int((active0 & ~active1).sum()) if active0 is not None and active1 is not None else None,
        "calibrations": engine.calibrations - calib0,
        "tier_changes": engine.tier_changes - tiers0,
        "event_time_span_s": round(span, 1),
    }
    outcomes = _outcomes(engine, before)
    log(
        f"[P={p:,}] {timing['throughput']['events_per_s']:,.0f} events/s; "
        f"main stream took {timing['throughput']['main_wall_s']:.1f} s"
    )
    del engine
    gc.collect()

    memory: Result = {
        "rss_growth_bytes": rss1 - rss0,
        "rss_bytes_per_player": round((rss1 - rss0) / p, 1) if rss0 and rss1 else None,
    }
    if trace:
        log(f"[P={p:,}] traced warm-up (engine B, tracemalloc on) ...")
        t0 = time.perf_counter()
        memory |= traced_memory(work, params)
        log(f"[P={p:,}] traced warm-up {time.perf_counter() - t0:.1f} s")
    return {
        "players": p,
        "events": cfg.events,
        "warmup_events": n_warm,
        "workload": {
            "seed": cfg.seed,
            "rate_events_per_s": cfg.rate,
            "online": work.online,
            "servers": cfg.servers,
            "regulars": work.regulars,
            "visitor_share": cfg.visitor_share,
            "history_days": cfg.history_days,
        },
        "generate_s": round(gen_s, 2),
        "warmup_s": round(warm_s, 2),
        **timing,
        "timer_overhead_ns": timer_overhead_ns(),
        "outcomes": outcomes,
        "warmup_outcomes": warm_counts,
        "state": state,
        "memory": memory,
    }
