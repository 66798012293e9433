"""Issue 18's benchmark: the cluster mode on a real 3-node NATS JetStream cluster (R3).

Run:  .venv/bin/python -m bench.cluster [--events 200000] [--rate 50000] [--seconds 20]
                                        [--qps 2000] [--restart-players 1000000] [--parts ...] [--json]

Every node is a real process on this machine: three ``nats-server`` (tests/nats_cluster.py),
one ingest and two replicas (``arenad run``), the UDP sender and the query clients in their own
processes. The single-node figures of the same run stand beside each cluster figure.

Parts (``--parts``, default all):

* ``ingest``: ``--events`` kills over UDP as fast as the node takes them (the sender paced by
  the node's queue depth, so nothing is dropped), timed until every replica has applied every
  one: events/s through JetStream (R3) into 2 replicas. Single node: the same stream into one
  ``arenad run``.
* ``lag``: ``--rate`` events/s for ``--seconds`` s; every 50 ms the ingest's published count
  and each replica's applied count are read: replica lag p50/p99 in events and in ms of ingest
  (events / rate), and the ingest's publish-to-ack latency (its histogram) p50/p99.
* ``query``: bench/qload.c at ``--qps`` (get and top alternately, 8 connections) against one
  replica, then split over both, while the ingest runs at ``--query-ingest`` events/s; p50/p99
  and the answered rate. Single node: the same load on one daemon ingesting the same stream.
* ``failover``: ``kill -9`` of the lease holder; seconds until the other replica holds the
  lease (``arenad_cluster_leader``), against ``lease_ttl``.
* ``restart``: a replica's state dir with ``--restart-players`` players (a checkpoint written
  with the daemon's own payload, bench.scale.build_restart_state) and ``--restart-tail`` kills
  in the stream after it: seconds until /healthz answers and until the replica's lag is 0.
  Single node: the same checkpoint with the same tail in its journal.

stdout: a Markdown table; ``--json`` adds one line of JSON with every figure, the commit, the
machine and its load. Everything is bounded and every process is stopped in ``finally``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from bench.core import loadavg, machine
from bench.daemon import stream
from bench.scale import QueryLoad, _query_proc_c, build_qload, build_restart_state, in_fresh_interpreter
from bench.web import commit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cluster_harness import Nodes
from daemon_harness import DaemonProcess
from nats_cluster import NatsCluster

BATCH = 50
#: The bench's histories reach back further than the week the daemon's intake takes by default.
RELAXED = "max_event_age = 315360000.0\n"
PARTS = ("ingest", "lag", "query", "failover", "restart")
Result = dict[str, Any]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def metric(d: DaemonProcess, name: str) -> float:
    return d.metric(name)


def intro_and_stream(players: int, events: int, seed: int) -> list[dict[str, Any]]:
    """Every player introduced once, then the network workload (bench/stream.py), ending now."""
    t0 = time.time() - events / 200.0 - players * 0.001 - 600.0
    intro = [
        {
            "t": t0 + i * 0.001,
            "attacker": f"player{i:06d}",
            "victim": f"player{(i + 1) % players:06d}",
            "id": f"i{i}",
        }
        for i in range(players)
    ]
    evs = stream(players, events, seed=seed, t0=t0 + players * 0.001 + 1.0, workload="network")
    for k, e in enumerate(evs):
        e["id"] = f"e{k}"
    return intro + evs


def send_paced_by_queue(addr: tuple[str, int], evs: list[dict[str, Any]], depth: Callable[[], float]) -> None:
    """UDP as fast as the node takes it: every 200 datagrams wait while its queue is deep."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        for k in range(0, len(evs), BATCH):
            s.sendto(msgpack.packb(evs[k : k + BATCH]), addr)
            if k % (BATCH * 200) == 0:
                while depth() > 200:
                    time.sleep(0.001)


def _paced_sender(
    addr: tuple[str, int], datagrams: list[bytes], per_s: float, start_at: float, out: Any
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        for k, dgram in enumerate(datagrams):
            due = start_at + k / per_s
            while (now := time.monotonic()) < due:
                time.sleep(min(0.0005, due - now))
            s.sendto(dgram, addr)
    out.send(time.monotonic())


def paced(addr: tuple[str, int], evs: list[dict[str, Any]], rate: float) -> tuple[Any, Any, float]:
    """A process sending ``evs`` at ``rate`` events/s from 0.3 s on; (process, pipe, start)."""
    ctx = multiprocessing.get_context("fork")
    datagrams = [msgpack.packb(evs[k : k + BATCH]) for k in range(0, len(evs), BATCH)]
    start_at = time.monotonic() + 0.3
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_paced_sender, args=(addr, datagrams, rate / BATCH, start_at, send))
    proc.start()
    return proc, recv, start_at


def decided(d: DaemonProcess) -> int:
    s = d.stats()
    return int(s["applied"] + s["filtered"] + sum(s["rejected"].values()))


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout} s")
        time.sleep(0.02)


def pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * len(ys)))] if ys else float("nan")


def histogram_quantile(d: DaemonProcess, name: str, q: float) -> float | None:
    """A quantile of a histogram from its cumulative buckets (linear inside the bucket)."""
    buckets = sorted(
        (float("inf") if le == "+Inf" else float(le), v) for le, v in d.series(f"{name}_bucket", "le").items()
    )
    if not buckets or buckets[-1][1] == 0:
        return None
    want = q * buckets[-1][1]
    lo_edge, lo_count = 0.0, 0.0
    for edge, count in buckets:
        if count >= want:
            if edge == float("inf"):
                return lo_edge
            return lo_edge + (edge - lo_edge) * ((want - lo_count) / max(count - lo_count, 1e-9))
        lo_edge, lo_count = edge, count
    return None


# ---------------------------------------------------------------------------- parts
def ingest_part(nodes: Nodes, single: DaemonProcess, evs: list[dict[str, Any]], base: int) -> Result:
    ingest, replicas = nodes.procs[0], nodes.procs[1:3]
    out: Result = {"events": len(evs)}
    started = time.perf_counter()
    send_paced_by_queue(single.addr("udp"), evs, lambda: float(single.stats()["queue_depth"]))
    wait(lambda: decided(single) >= base + len(evs), 600, "single node")
    out["single_events_per_s"] = round(len(evs) / (time.perf_counter() - started), 1)
    before = [decided(r) for r in replicas]
    started = time.perf_counter()
    send_paced_by_queue(ingest.addr("udp"), evs, lambda: metric(ingest, "arenad_queue_depth"))
    wait(
        lambda: all(decided(r) >= b + len(evs) for r, b in zip(replicas, before, strict=True)),
        600,
        "replicas",
    )
    out["cluster_events_per_s"] = round(len(evs) / (time.perf_counter() - started), 1)
    out["dropped"] = metric(ingest, "arenad_events_dropped_total")
    return out


def lag_part(nodes: Nodes, evs: list[dict[str, Any]], rate: float) -> Result:
    ingest, replicas = nodes.procs[0], nodes.procs[1:3]
    base_pub = metric(ingest, "arenad_cluster_stream_position")
    base = [int(r.stats()["journal_seq"]) for r in replicas]
    proc, recv, start_at = paced(ingest.addr("udp"), evs, rate)
    lags: list[list[float]] = [[] for _ in replicas]
    try:
        while not recv.poll(0):
            published = metric(ingest, "arenad_cluster_stream_position") - base_pub
            for k, r in enumerate(replicas):
                applied = int(r.stats()["journal_seq"]) - base[k]
                lags[k].append(max(0.0, published - applied))
            time.sleep(0.05)
        ended = float(recv.recv())
    finally:
        proc.join(10)
    sent_rate = len(evs) / (ended - start_at)

    def current() -> bool:
        published = metric(ingest, "arenad_cluster_stream_position") - base_pub
        return all(int(r.stats()["journal_seq"]) - base[k] >= published for k, r in enumerate(replicas))

    wait(
        current,
        120,
        "catch up",
    )
    all_lags = [x for per in lags for x in per]
    return {
        "rate": rate,
        "sent_events_per_s": round(sent_rate, 1),
        "samples": len(all_lags),
        "lag_p50_events": pct(all_lags, 0.5),
        "lag_p99_events": pct(all_lags, 0.99),
        "lag_p50_ms": round(1000 * pct(all_lags, 0.5) / sent_rate, 2),
        "lag_p99_ms": round(1000 * pct(all_lags, 0.99) / sent_rate, 2),
        "publish_p50_ms": round(
            1000 * (histogram_quantile(ingest, "arenad_cluster_publish_seconds", 0.5) or 0), 3
        ),
        "publish_p99_ms": round(
            1000 * (histogram_quantile(ingest, "arenad_cluster_publish_seconds", 0.99) or 0), 3
        ),
        "dropped": metric(ingest, "arenad_events_dropped_total"),
    }


def query_load(
    targets: list[DaemonProcess], qps: float, seconds: float, names: list[str], qload: Path
) -> Result:
    """bench/qload.c processes, one per target at qps / len(targets); merged figures."""
    ctx = multiprocessing.get_context("fork")
    start_at = time.monotonic() + 0.3
    procs = []
    for d in targets:
        recv, send = ctx.Pipe(duplex=False)
        load = QueryLoad(
            "arenad",
            d.addr("query"),
            "",
            names,
            qps=qps / len(targets),
            conns=8,
            start_at=start_at,
            seconds=seconds,
        )
        p = ctx.Process(target=_query_proc_c, args=(load, str(qload), send))
        p.start()
        procs.append((p, recv))
    lat: list[float] = []
    errors = 0
    try:
        for _p, recv in procs:
            if not recv.poll(seconds + 120):
                raise RuntimeError("a query process did not report")
            res = recv.recv()
            if "error" in res:
                raise RuntimeError(res["error"])
            lat.extend(res["lat"])
            errors += res["errors"]
    finally:
        for p, _ in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return {
        "qps_asked": qps,
        "answered": len(lat),
        "p50_ms": round(1000 * pct(lat, 0.5), 3),
        "p99_ms": round(1000 * pct(lat, 0.99), 3),
        "mean_ms": round(1000 * statistics.fmean(lat), 3) if lat else None,
        "errors": errors,
    }


def query_part(
    nodes: Nodes,
    single: DaemonProcess,
    evs: list[dict[str, Any]],
    *,
    rate: float,
    qps: float,
    seconds: float,
    players: int,
    workdir: Path,
) -> Result:
    qload = build_qload(workdir)
    if qload is None:
        return {"error": "no C compiler for bench/qload.c"}
    names = [f"player{i:06d}" for i in range(players)]
    n = min(len(evs), int(rate * (seconds + 1.0)))
    out: Result = {"ingest_events_per_s": rate, "qps": qps}
    runs = (
        ("single", [single], single),
        ("one_replica", nodes.procs[1:2], nodes.procs[0]),
        ("two_replicas", nodes.procs[1:3], nodes.procs[0]),
    )
    for label, targets, feeder in runs:
        chunk = evs[:n]
        evs = evs[n:] + chunk  # each run its own part of the stream
        proc, recv, _ = paced(feeder.addr("udp"), chunk, rate)
        try:
            out[label] = query_load(targets, qps, seconds, names, qload)
        finally:
            recv.poll(seconds + 60)
            proc.join(10)
    return out


def failover_part(nodes: Nodes) -> Result:
    r1, r2 = nodes.procs[1], nodes.procs[2]
    leader, other = (r1, r2) if metric(r1, "arenad_cluster_leader") == 1 else (r2, r1)
    started = time.monotonic()
    leader.kill()
    wait(lambda: metric(other, "arenad_cluster_leader") == 1, 60, "takeover")
    took = time.monotonic() - started
    return {"lease_ttl_s": 3.0, "takeover_s": round(took, 3)}


def _ready(d: DaemonProcess, t0: float) -> float:
    host, port = d.addr("metrics")
    while True:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.01)


def restart_part(cluster: NatsCluster, workdir: Path, players: int, tail: int) -> Result:
    """A replica on a checkpoint of ``players`` with ``tail`` kills after it in the stream; the
    single node on the same checkpoint with the same tail in its journal."""
    out: Result = {"players": players, "tail": tail}
    single_dir = workdir / "restart-single"
    built = in_fresh_interpreter(
        build_restart_state, 1800, state_dir=str(single_dir), players=players, tail=tail, seed=3
    )
    out["state"] = built
    # The replica's copy before the single node runs: its stop writes a checkpoint past the tail.
    replica_dir = workdir / "restart-replica"
    shutil.copytree(single_dir, replica_dir, ignore=shutil.ignore_patterns("*.sock", "lock"))
    t0 = time.monotonic()
    d = DaemonProcess(single_dir)
    d.start()
    out["single_ready_s"] = round(_ready(d, t0), 3)
    d.stop(300)
    # The replica: the same checkpoint (its journal tail removed) and the tail in the stream instead.
    records: list[dict[str, Any]] = []
    for seg in sorted(replica_dir.glob("journal-*.log")):
        from arenad.daemon.state import read_records  # noqa: PLC0415

        recs, _ = read_records(seg.read_bytes())
        records.extend(
            {"t": r[1], "attacker": r[2], "victim": r[3], "server": r[4], "id": r[5]}
            for r in recs
            if isinstance(r, tuple)
        )
        seg.unlink()
    nodes = Nodes(workdir, cluster)  # a stream of its own: the replica takes it from its start
    try:
        return _restart_replica(nodes, replica_dir, records, built, out)
    finally:
        nodes.close()


def _restart_replica(
    nodes: Nodes, replica_dir: Path, records: list[dict[str, Any]], built: Result, out: Result
) -> Result:
    ingest = nodes.start("restart-ingest", "ingest", extra=RELAXED, checkpoint=60.0)
    send_paced_by_queue(ingest.addr("udp"), records, lambda: metric(ingest, "arenad_queue_depth"))
    wait(lambda: metric(ingest, "arenad_cluster_stream_position") >= len(records), 600, "tail published")
    cfg = nodes.config("restart-replica", "replica", checkpoint=600.0)
    r = DaemonProcess(replica_dir, cfg)
    t0 = time.monotonic()
    r.start(udp="off")
    out["replica_ready_s"] = round(_ready(r, t0), 3)
    wait(
        lambda: int(r.stats()["journal_seq"]) >= built["checkpoint_seq"] + len(records),
        900,
        "replica caught up",
    )
    out["replica_caught_up_s"] = round(time.monotonic() - t0, 3)
    out["replica_tail_records"] = len(records)
    r.stop(300)
    return out


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--players", type=int, default=10_000)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rate", type=float, default=50_000.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--qps", type=float, default=2_000.0)
    ap.add_argument("--query-ingest", type=float, default=20_000.0)
    ap.add_argument("--restart-players", type=int, default=1_000_000)
    ap.add_argument("--restart-tail", type=int, default=100_000)
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    report: Result = {"commit": commit(), "machine": machine(), "load_before": loadavg(), "parts": {}}
    with tempfile.TemporaryDirectory(prefix="arenad-bench-cluster-") as tmp:
        root = Path(tmp)
        cluster = NatsCluster(root / "nats")
        nodes = Nodes(root, cluster)
        single: DaemonProcess | None = None
        try:
            cluster.start()
            log("[cluster] 3 nats-server up; starting ingest, 2 replicas and a single node")
            nodes.start("ingest", "ingest", extra=RELAXED, checkpoint=60.0)
            nodes.start("r1", "replica", extra="[query]\nrate_limit = 0\n", checkpoint=60.0)
            nodes.start("r2", "replica", extra="[query]\nrate_limit = 0\n", checkpoint=60.0)
            cfg = root / "single.toml"
            cfg.write_text(f"[daemon]\n{RELAXED}[query]\nrate_limit = 0\n")
            single = DaemonProcess(root / "single", cfg).start()
            need = (
                args.events + int(args.rate * args.seconds) + 3 * int(args.query_ingest * (args.seconds + 1))
            )
            evs = intro_and_stream(args.players, need, seed=1)
            intro, evs = evs[: args.players], evs[args.players :]
            log(f"[cluster] introducing {args.players:,} players everywhere")
            send_paced_by_queue(single.addr("udp"), intro, lambda: float(single.stats()["queue_depth"]))
            send_paced_by_queue(
                nodes.procs[0].addr("udp"), intro, lambda: metric(nodes.procs[0], "arenad_queue_depth")
            )
            wait(
                lambda: (
                    all(decided(r) >= args.players - 5 for r in nodes.procs[1:3])
                    and decided(single) >= args.players - 5
                ),
                600,
                "intro",
            )
            base = decided(single)
            if "ingest" in parts:
                log(f"[ingest] {args.events:,} events as fast as they are taken")
                report["parts"]["ingest"] = ingest_part(nodes, single, evs[: args.events], base)
            rest = evs[args.events :]
            if "lag" in parts:
                n = int(args.rate * args.seconds)
                log(f"[lag] {args.rate:,.0f} events/s for {args.seconds:g} s")
                report["parts"]["lag"] = lag_part(nodes, rest[:n], args.rate)
                rest = rest[n:]
            if "query" in parts:
                log(f"[query] {args.qps:,.0f} queries/s with {args.query_ingest:,.0f} events/s ingest")
                report["parts"]["query"] = query_part(
                    nodes,
                    single,
                    rest,
                    rate=args.query_ingest,
                    qps=args.qps,
                    seconds=args.seconds,
                    players=args.players,
                    workdir=root,
                )
            if "failover" in parts:
                log("[failover] kill -9 of the lease holder")
                report["parts"]["failover"] = failover_part(nodes)
            if "restart" in parts:
                log(f"[restart] {args.restart_players:,} players + {args.restart_tail:,} tail")
                try:
                    report["parts"]["restart"] = restart_part(
                        cluster, root, args.restart_players, args.restart_tail
                    )
                except (RuntimeError, OSError) as e:  # the other parts' figures still print
                    report["parts"]["restart_error"] = repr(e)
        finally:
            report["load_after"] = loadavg()
            nodes.close()
            if single is not None:
                single.kill()
            cluster.close()
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


def _pair(a: Any, b: Any, unit: str = "ms") -> str:
    return f"{a} / {b} {unit}"


def table(report: Result) -> str:
    p = report["parts"]
    rows = ["| figure | single node | cluster (R3, 2 replicas) |", "| --- | ---: | ---: |"]
    if "ingest" in p:
        ing = p["ingest"]
        rows.append(
            f"| UDP events/s, all applied | {ing['single_events_per_s']:,.0f} "
            f"| {ing['cluster_events_per_s']:,.0f} |"
        )
    if "lag" in p:
        lg = p["lag"]
        lag = _pair(lg["lag_p50_ms"], lg["lag_p99_ms"])
        events = _pair(f"{lg['lag_p50_events']:.0f}", f"{lg['lag_p99_events']:.0f}", "events")
        rows.append(
            f"| replica lag p50 / p99 at {lg['sent_events_per_s']:,.0f} ev/s | - | {lag} ({events}) |"
        )
        rows.append(
            f"| ingest publish to ack p50 / p99 | - | {_pair(lg['publish_p50_ms'], lg['publish_p99_ms'])} |"
        )
    if "query" in p and "single" in p["query"]:
        q = p["query"]
        one, two, single = q["one_replica"], q["two_replicas"], q["single"]
        rows.append(
            f"| queries p50 / p99 at {q['qps']:,.0f}/s, {q['ingest_events_per_s']:,.0f} ev/s ingest "
            "(1 replica) "
            f"| {_pair(single['p50_ms'], single['p99_ms'])} | {_pair(one['p50_ms'], one['p99_ms'])} |"
        )
        rows.append(
            f"| queries p50 / p99, split over 2 replicas | - | {_pair(two['p50_ms'], two['p99_ms'])} |"
        )
    if "failover" in p:
        rows.append(f"| lease takeover after kill -9 (ttl 3 s) | - | {p['failover']['takeover_s']} s |")
    if "restart" in p:
        r = p["restart"]
        rows.append(
            f"| restart, {r['players']:,} players + {r['tail']:,} tail: ready | {r['single_ready_s']} s "
            f"| {r['replica_ready_s']} s (caught up {r['replica_caught_up_s']} s) |"
        )
    cpu = report["machine"].get("cpu", "?")
    rows.append(f"\ncommit {report['commit']}, {cpu}, load {report['load_before']} -> {report['load_after']}")
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
