"""Batch paths through the C kernel (issue 14): ``arenad replay`` of a JSON-lines file, one tuning
evaluation, and the per-call ``Engine.feed`` against openskill's ``rate()``, each beside its
reference measured in the same run.

    .venv/bin/python -m bench.replay                 # 100,000 players, 1,000,000 events (~2 min)
    .venv/bin/python -m bench.replay --quick         # small sizes, a smoke run (~10 s)
    .venv/bin/python -m bench.replay --json | tail -1

The stream is bench/stream.py's server network (warm-up history, then the main stream at 200
events per second of event time), written as one JSON line per kill with a server field.

* **replay**: ``arenad.replay.replay_files`` (what ``arenad replay`` runs: the C line scanner,
  ``decode_json_rows`` for the lines it hands back, ``Engine.feed_many`` with the ladder index
  deferred) on that file, from reading the bytes to the last event;
  reference: the per-event path it replaced, ``replay_events(engine, iter_file(path))``
  (the standard library's JSON and one ``Engine.feed`` call per kill), on the same file.
* **tune**: ``arenad.evaluation.fast.walk_forward_adr`` (one configuration of ``arenad tune``:
  every kill predicted, four blocks in five learnt) on the same events; reference: the harness it
  replaces, ``walk_forward({"adr": ADRModel(params)}, ...)``, on the first 200,000.
* **feed**: ``Engine.feed`` called once per kill from Python (what an embedding program does) on
  the first 200,000 kills after the warm-up; reference: ``openskill``'s
  ``PlackettLuce().rate([[a], [b]])`` over the same pairs in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import orjson
from openskill.models import PlackettLuce

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from arenad.evaluation.fast import columns, walk_forward_adr
from arenad.evaluation.walkforward import walk_forward
from arenad.models.adr import ADRModel
from arenad.replay import iter_file, replay_events, replay_files
from bench.stream import StreamConfig, Workload, generate

Event = tuple[str, str, float]


def stream_events(work: Workload) -> list[Event]:
    """Warm-up then main stream, as (attacker, victim, t) in time order."""
    names = work.names
    warm = [
        (names[a], names[v], t)
        for a, v, t in zip(
            work.warm_attacker.tolist(), work.warm_victim.tolist(), work.warm_t.tolist(), strict=True
        )
    ]
    return warm + work.events


def write_jsonl(events: list[Event], path: Path) -> None:
    dumps = orjson.dumps
    with path.open("wb") as out:
        out.write(
            b"\n".join(dumps({"t": t, "attacker": a, "victim": v, "server": "eu-1"}) for a, v, t in events)
        )
        out.write(b"\n")


def replay_part(path: Path, events: int, params: ADRParams) -> dict[str, Any]:
    started = time.perf_counter()
    engine, summary = replay_files([path], params)
    batch = time.perf_counter() - started
    started = time.perf_counter()
    ref = Engine(params)
    ref_summary = replay_events(ref, iter_file(path))
    per_event = time.perf_counter() - started
    return {
        "events": events,
        "batch_events_per_s": events / batch,
        "per_event_events_per_s": events / per_event,
        "speedup": per_event / batch,
        "same_state": engine.export_state() == ref.export_state() and summary.applied == ref_summary.applied,
    }


def tune_part(events: list[Event], params: ADRParams, reference_events: int) -> dict[str, Any]:
    cols = columns(events)
    started = time.perf_counter()
    walk_forward_adr(params, cols, block=1000, test_every=5)
    fast = time.perf_counter() - started
    head = events[:reference_events]
    started = time.perf_counter()
    walk_forward({"adr": ADRModel(params)}, head, block=1000, test_every=5)
    harness = time.perf_counter() - started
    return {
        "events": len(events),
        "fast_events_per_s": len(events) / fast,
        "harness_events_per_s": len(head) / harness,
    }


def feed_part(warm: list[Event], main: list[Event], params: ADRParams, n: int) -> dict[str, Any]:
    engine = Engine(params)
    for a, v, t in warm:
        engine.feed(a, v, t)
    pairs = main[:n]
    feed = engine.feed
    started = time.perf_counter()
    for a, v, t in pairs:
        feed(a, v, t)
    adr = time.perf_counter() - started
    out: dict[str, Any] = {"kills": len(pairs), "engine_feed_per_s": len(pairs) / adr}
    model = PlackettLuce()
    ratings: dict[str, Any] = {}
    started = time.perf_counter()
    for a, v, _t in pairs:
        ra = ratings.get(a) or model.rating()
        rv = ratings.get(v) or model.rating()
        (na,), (nv,) = model.rate([[ra], [rv]])
        ratings[a] = na
        ratings[v] = nv
    ref = time.perf_counter() - started
    out["openskill_rate_per_s"] = len(pairs) / ref
    out["ratio"] = ref / adr
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--players", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="10,000 players, 100,000 events")
    ap.add_argument("--json", action="store_true", help="print every figure as one JSON object last")
    ap.add_argument("--paper", action="store_true", help='rate with preset = "paper" instead of the defaults')
    ap.add_argument(
        "--main-only",
        action="store_true",
        help="only the main stream (dense: 200 events/s of event time), without the 90-day warm-up history",
    )
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="an [adr] key, repeatable"
    )
    args = ap.parse_args()
    players, n = (10_000, 100_000) if args.quick else (args.players, args.events)
    table: dict[str, Any] = {"preset": "paper" if args.paper else "default"}
    for item in args.set:
        key, _, value = item.partition("=")
        table[key] = tomllib.loads(f"v = {value}")["v"]
    params = ADRParams.from_mapping(table)
    results_params = {k: v for k, v in table.items() if k != "preset"}
    work = generate(StreamConfig(players=players, events=n))
    events = list(work.events) if args.main_only else stream_events(work)
    warm = events[: len(events) - len(work.events)]
    results: dict[str, Any] = {
        "players": players,
        "main_events": n,
        "events": len(events),
        "preset": table["preset"],
        "set": results_params,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        write_jsonl(events, path)
        results["file_bytes"] = os.path.getsize(path)
        results["replay"] = replay_part(path, len(events), params)
    results["tune"] = tune_part(events, params, min(len(events), 200_000))
    results["feed"] = feed_part(warm, work.events, params, min(n, 200_000))
    r, t, f = results["replay"], results["tune"], results["feed"]
    print(f"{players:,} players, {len(events):,} events ({len(warm):,} warm-up)")
    print(
        f"replay   batch {r['batch_events_per_s']:>10,.0f} ev/s   per-event reference "
        f"{r['per_event_events_per_s']:>10,.0f} ev/s   x{r['speedup']:.2f}   same state: {r['same_state']}"
    )
    print(
        f"tune     batch {t['fast_events_per_s']:>10,.0f} ev/s   harness reference "
        f"{t['harness_events_per_s']:>10,.0f} ev/s"
    )
    print(
        f"feed     Engine.feed {f['engine_feed_per_s']:>10,.0f} /s   openskill rate() "
        f"{f['openskill_rate_per_s']:>10,.0f} /s   x{f['ratio']:.2f}"
    )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
