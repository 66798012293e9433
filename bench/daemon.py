"""End-to-end benchmark: a real ``arenad run`` process fed over UDP or MQTT QoS 1, queried meanwhile.

Run:  .venv/bin/python -m bench.daemon [--players 10000,100000] [--events 300000] [--mqtt]
                                      [--shadows elo,glicko2] [--compare-shadows]

For each population: start a daemon on a fresh state directory, introduce every player, then send
the main stream as fast as the daemon takes it (UDP: msgpack arrays of 50 events per datagram,
paced by watching the daemon's queue so nothing is dropped; MQTT: QoS 1 messages of 50 events,
each waiting for its PUBACK from the broker) while a second thread issues ``get`` queries and
times them. Prints events/s (until the rating core has decided on every event of the stream:
applied, filtered or rejected, and every shadow model has scored and learnt from it), query
p50/p99 and drops. ``--shadows`` runs the daemon with those shadow models (``[models] shadows``);
``--compare-shadows`` runs each population without and then with them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from daemon_harness import DaemonProcess

BATCH = 50


def stream(players: int, events: int, seed: int, t0: float, workload: str) -> list[dict[str, Any]]:
    """The main stream, ending about now so the daemon's clock checks accept it.

    ``network`` (default): the rating-core benchmark's server network (bench/stream.py) — a few
    thousand players online at once on 16-slot servers, 10 % visitors from the whole population,
    late deliveries and suicides, 200 kills per second of event time. ``uniform``: every kill
    between two players drawn uniformly from all P, the worst case for memory locality.
    """
    if workload == "uniform":
        from arenad.daemon.emit import simulated_kills  # noqa: PLC0415

        evs = list(simulated_kills(players, events, seed=seed, start=t0, rate=1000.0))
        for e in evs:  # the simulated names use 4 digits; widen to the introduction's 6
            e["attacker"] = "player" + e["attacker"][6:].zfill(6)
            e["victim"] = "player" + e["victim"][6:].zfill(6)
        return evs
    from bench.stream import StreamConfig, generate  # noqa: PLC0415

    work = generate(StreamConfig(players=players, events=events, seed=seed))
    index = {name: i for i, name in enumerate(work.names)}
    shift = t0 - work.events[0][2]
    # Suicides are refused at decoding and never journaled; leave them out so the journal
    # counter measures exactly the stream.
    return [
        {"t": t + shift, "attacker": f"player{index[a]:06d}", "victim": f"player{index[v]:06d}"}
        for a, v, t in work.events
        if a != v
    ]


def send_udp(d: DaemonProcess, evs: list[dict[str, Any]]) -> None:
    addr = d.addr("udp")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for k in range(0, len(evs), BATCH):
            s.sendto(msgpack.packb(evs[k : k + BATCH]), addr)
            if k % (BATCH * 200) == 0:
                # Stay under the daemon's queue (UDP cannot be paused): wait while it is deep.
                while d.stats()["queue_depth"] > 200:
                    time.sleep(0.001)


def send_mqtt(url: str, topic: str, evs: list[dict[str, Any]]) -> None:
    from arenad.daemon.emit import emit_mqtt  # noqa: PLC0415

    emit_mqtt(url, topic, iter(evs), batch=BATCH)


def model_update_us(d: DaemonProcess) -> dict[str, float]:
    """Mean µs per sampled event of each model (``arenad_model_update_seconds``: for a shadow its
    prediction and update, for the primary its apply)."""
    text = d.metrics()
    total = d.series("arenad_model_update_seconds_sum", "model", text)
    count = d.series("arenad_model_update_seconds_count", "model", text)
    return {m: round(1e6 * total[m] / count[m], 2) for m in total if count.get(m)}


def query_load(addr: tuple[str, int], names: list[str], stop: Any, out: Any) -> None:
    """In its own process (so the sender's GIL cannot delay it): time ``get`` round trips."""
    lat: list[float] = []
    with socket.create_connection(addr, timeout=10) as s:
        f = s.makefile("rwb")
        k = 0
        while not stop.is_set():
            req = json.dumps({"op": "get", "player": names[k % len(names)]}).encode() + b"\n"
            t0 = time.perf_counter()
            f.write(req)
            f.flush()
            f.readline()
            lat.append(time.perf_counter() - t0)
            k += 1
            time.sleep(0.002)
    out.send(lat)


def run_one(
    players: int,
    events: int,
    mqtt: str | None,
    workdir: Path,
    workload: str,
    *,
    shadows: tuple[str, ...] = (),
) -> dict[str, Any]:
    label = f"{players}-{'mqtt' if mqtt else 'udp'}-{'+'.join(shadows) or 'none'}"
    state = workdir / f"state-{label}"
    config = workdir / f"arenad-{label}.toml"
    config.write_text("[models]\nshadows = [" + ", ".join(f'"{n}"' for n in shadows) + "]\n")
    d = DaemonProcess(state, config=config)
    d.start(mqtt=mqtt)
    try:
        t0 = time.time() - 3600
        intro = [
            {"t": t0 + i * 0.001, "attacker": f"player{i:06d}", "victim": f"player{(i + 1) % players:06d}"}
            for i in range(players)
        ]
        send_udp(d, intro)
        d.wait_for(lambda s: s["journal_seq"] >= players, timeout=600)
        evs = stream(players, events, seed=7, t0=t0 + players * 0.001 + 1, workload=workload)
        names = [f"player{i:06d}" for i in range(0, players, max(1, players // 1000))]
        ctx = multiprocessing.get_context("fork")
        stop = ctx.Event()
        receiver, sender = ctx.Pipe(duplex=False)
        qproc = ctx.Process(target=query_load, args=(d.addr("query"), names, stop, sender))

        def rated(s: dict[str, Any]) -> int:
            # Every event the rating core has decided on (applied, filtered or rejected by it) and,
            # with shadows, that every shadow has scored (a shadow runs after ADR's slice; the
            # primary's own count, from the engine's ring, never counts what the engine refused).
            core = int(s["applied"] + s["filtered"] + sum(s["rejected"].values()))
            shadows = (int(m["predictions"]) for m in s["models"].values() if m.get("role") == "shadow")
            return min([core, *shadows])

        base = rated(d.stats())
        qproc.start()
        started = time.perf_counter()
        if mqtt:
            send_mqtt(mqtt, "arena/bench-1/kills", evs)
        else:
            send_udp(d, evs)
        final = d.wait_for(lambda s: rated(s) - base >= len(evs), timeout=900)
        elapsed = time.perf_counter() - started
        stop.set()
        update_us = model_update_us(d)
        lat: list[float] = sorted(receiver.recv()) if receiver.poll(30) else []
        qproc.join(10)
        return {
            "players": players,
            "source": "mqtt" if mqtt else "udp",
            "shadows": list(shadows),
            "workload": workload,
            "events": len(evs),
            "events_per_s": round(len(evs) / elapsed, 1),
            "query_p50_ms": round(1000 * lat[len(lat) // 2], 3) if lat else None,
            "query_p99_ms": round(1000 * lat[int(len(lat) * 0.99)], 3) if lat else None,
            "query_mean_ms": round(1000 * statistics.fmean(lat), 3) if lat else None,
            "queries": len(lat),
            "dropped": final["dropped"],
            "applied": final["applied"],
            "model_update_us": update_us,
        }
    finally:
        d.stop(60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.daemon", description=__doc__)
    ap.add_argument("--players", default="10000,100000")
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--mqtt", action="store_true", help="also run through a local mosquitto (QoS 1)")
    ap.add_argument("--workload", choices=("network", "uniform"), default="network")
    ap.add_argument("--shadows", default="", help="comma-separated shadow models, e.g. elo,glicko2")
    ap.add_argument(
        "--compare-shadows", action="store_true", help="run every population without, then with --shadows"
    )
    args = ap.parse_args(argv)
    shadows = tuple(n.strip() for n in args.shadows.split(",") if n.strip())
    variants = [(), shadows] if args.compare_shadows and shadows else [shadows]
    results = []
    workdir = Path(tempfile.mkdtemp(prefix="arenad-bench-"))
    broker: subprocess.Popen[bytes] | None = None
    try:
        mqtt_url = None
        if args.mqtt:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            conf = workdir / "mosquitto.conf"
            conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n")
            broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            mqtt_url = f"mqtt://127.0.0.1:{port}"
        for p in (int(x) for x in args.players.split(",")):
            for src, models in [(s, m) for s in ([None, mqtt_url] if mqtt_url else [None]) for m in variants]:
                r = run_one(p, args.events, src, workdir, args.workload, shadows=models)
                results.append(r)
                print(
                    f"{r['source']:>4} {r['workload']} P={r['players']:>7,} "
                    f"shadows={','.join(models) or '-'} "
                    f"{r['events_per_s']:>9,.0f} events/s  "
                    f"query p50 {r['query_p50_ms']} ms  p99 {r['query_p99_ms']} ms  dropped {r['dropped']}  "
                    f"µs/event by model {r['model_update_us']}",
                    flush=True,
                )
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
