"""Issue 16's benchmark against a real ``arenad run``: the web API and pages under UDP ingest.

Run:  .venv/bin/python -m bench.web_daemon [--players 1000000] [--ingest 50000] [--rps 2000]
                                           [--seconds 20] [--ingest-max 0] [--kinds ...] [--json]

A state dir of P players (a checkpoint written with the daemon's own payload, as
``bench.scale.build_restart_state``; cached under the temp dir keyed by players and seed, copied
fresh for each run) and a real daemon on it (UDP, query, metrics and web on 127.0.0.1:0). Then,
each phase ``--seconds`` long after a short lead-in, in separate client processes (the daemon
must not share a GIL with them; they are kept light: the machine has 2 cores):

1. **ingest, web idle**: a UDP sender at ``--ingest`` events/s (msgpack arrays of 50 kills, the
   bench stream's pairs, stamped now), then as fast as the daemon takes them (paced by its queue depth,
   as bench/daemon.py; or at ``--ingest-max`` events/s): the ≥ 100k events/s target.
   Events/s = the rating core's decisions (applied + filtered + rejected, the ``stats`` op) over
   the window; drops from the same answer.
2. **ingest + HTTP**: the sender at ``--ingest`` and an open-loop HTTP/1.1 load generator (asyncio,
   ``--connections`` keep-alive connections, one request in flight each, requests due every
   1/``--rps`` s, latency counted from the due time so a stalled server is not hidden) cycling
   through player / players (256 ids) / leaderboard (100) / player page / history. Client-side
   p50/p99 by kind, the daemon's own ``arenad_web_request_seconds`` by route (bucket bounds)
   and its ``arenad_web_requests_total`` by status, and the ingest rate beside phase 1's.
3. **reference**: the same load generator on the NDJSON query port (``get`` / ``top 100``) at the
   same rate, ingest running: the daemon's existing read path measured in the same run.

stdout: a Markdown table; ``--json`` adds one line of JSON with every figure, the commit, the
machine and its load. Everything is bounded: socket timeouts, per-phase deadlines, every child
process joined or killed and the daemon stopped (or killed) in ``finally``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import multiprocessing
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from arenad.web.readers import FLUSH_INTERVAL
from bench.core import loadavg, machine
from bench.scale import build_qload, in_fresh_interpreter
from bench.web import commit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import daemon_harness
from daemon_harness import DaemonProcess

BATCH = 50  # kills per datagram, as bench/daemon.py
IO_TIMEOUT = 10.0  # any one request or reply
PACED_DEPTH = 200  # batches queued in the daemon before the paced sender waits
PAIRS = 200_000  # the stream's (attacker, victim) pairs the sender cycles through

TARGETS = {"api_p99_ms": 2.0, "page_p99_ms": 5.0, "ingest_idle": 100_000.0}
HLSTATSX = (
    "HLstatsX:CE player pages take 11–20 s at 100 % CPU with 50,000 players "
    "(NomisCZ/hlstatsx-community-edition issue 31)"
)
API_KINDS = ("api player", "api players (256 ids)", "api leaderboard (100)")


# ---------------------------------------------------------------------------- the state dir
def build_state(*, cache: str, players: int, seed: int) -> dict[str, Any]:
    """In a fresh interpreter: a checkpoint of ``players`` players (bench.core.warm_up, as
    ``bench.scale.build_restart_state``, without its journal tail) plus the names and a pool of
    the main stream's pairs for the sender, in ``cache``."""
    from arenad.daemon.service import Daemon  # noqa: PLC0415  # only this child needs them
    from arenad.settings import Settings  # noqa: PLC0415
    from bench.core import warm_up  # noqa: PLC0415
    from bench.stream import StreamConfig, generate  # noqa: PLC0415

    t0 = time.perf_counter()
    root = Path(cache)
    state = root / "state"
    state.mkdir(parents=True, exist_ok=True)
    work = generate(StreamConfig(players=players, events=PAIRS + PAIRS // 100, seed=seed))
    daemon = Daemon(Settings.from_mapping({"daemon": {"state_dir": str(state)}}))
    warm_up(daemon.engine, work)
    seq = len(work.warm_t)
    daemon.state.seq = seq
    daemon.state.applied = daemon.engine.applied
    daemon.store.checkpoints.write(seq, daemon.state.checkpoint_payload(daemon.models.export_state()))
    pairs = [[a, v] for a, v, _ in work.events if a != v][:PAIRS]  # suicides are refused at decoding
    (root / "names.msgpack").write_bytes(msgpack.packb(work.names))
    (root / "pairs.msgpack").write_bytes(msgpack.packb(pairs))
    info = {"players": len(daemon.engine), "seed": seed, "build_s": round(time.perf_counter() - t0, 1)}
    # Written last: its presence marks a complete cache entry.
    (root / "built.json").write_text(json.dumps(info))
    return info


def cached_state(players: int, seed: int, log: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    cache = Path(tempfile.gettempdir()) / "arenad-bench-web-daemon" / f"p{players}-s{seed}"
    done = cache / "built.json"
    if done.exists():
        info = dict(json.loads(done.read_text()))
        log(f"reusing the state of {players:,} players in {cache}")
        return cache, {**info, "cached": True}
    shutil.rmtree(cache, ignore_errors=True)
    log(f"building a state of {players:,} players in {cache}")
    info = in_fresh_interpreter(build_state, 1800, cache=str(cache), players=players, seed=seed)
    return cache, {**info, "cached": False}


# ---------------------------------------------------------------------------- clients
def udp_sender(
    addr: tuple[str, int],
    query: tuple[str, int],
    pairs: list[list[str]],
    *,
    rate: float,
    stop: Any,
    sent: Any,
) -> None:
    """Datagrams of ``BATCH`` kills due every BATCH/rate s, stamped with the wall clock (the
    daemon's clock checks take them as live); behind schedule it sends without sleeping.

    ``rate`` 0: as fast as the daemon takes them, pausing while its queue is deeper than
    ``PACED_DEPTH`` batches (bench/daemon.py's pacing): UDP cannot push back, and past its
    capacity the daemon spends its time decoding datagrams it then drops (the rate it rates
    falls well under its capacity), so a fixed rate above it would measure that collapse."""
    period = BATCH / rate if rate > 0 else 0.0
    k = 0
    n = 0
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s,
        socket.create_connection(query, IO_TIMEOUT) as q,
    ):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        replies = q.makefile("rb")
        due = time.perf_counter()
        while not stop.is_set():
            now = time.time()
            batch = []
            for _ in range(BATCH):
                a, v = pairs[k]
                k = (k + 1) % len(pairs)
                batch.append({"t": now, "attacker": a, "victim": v})
            try:
                s.sendto(msgpack.packb(batch), addr)
                n += BATCH
            except OSError:  # a full send buffer: that datagram is lost, as UDP would lose it
                pass
            if period:
                due += period
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            elif n % (BATCH * 50) == 0:
                while not stop.is_set():
                    q.sendall(b'{"op": "stats"}\n')
                    if json.loads(replies.readline())["queue_depth"] <= PACED_DEPTH:
                        break
                    time.sleep(0.001)
    sent.value = n


HTTP_KINDS = ("api player", "api players (256 ids)", "api leaderboard (100)", "page player", "api history")


def http_targets(names: list[str], seed: int, only: tuple[str, ...]) -> Callable[[int], tuple[str, bytes]]:
    """Request ``i``: the kinds in turn, random players."""
    from arenad.web.pages import player_url  # noqa: PLC0415

    rng = random.Random(seed)

    def seg() -> str:
        return player_url(names[rng.randrange(len(names))]).removeprefix("/players/")

    kinds: list[tuple[str, Callable[[], str]]] = [
        ("api player", lambda: f"/api/v1/players/{seg()}"),
        ("api players (256 ids)", lambda: "/api/v1/players?ids=" + ",".join(seg() for _ in range(256))),
        (
            "api leaderboard (100)",
            lambda: f"/api/v1/leaderboard?limit=100&offset={rng.randrange(len(names))}",
        ),
        ("page player", lambda: f"/players/{seg()}"),
        ("api history", lambda: f"/api/v1/players/{seg()}/history"),
    ]

    kinds = [k for k in kinds if k[0] in only]

    def target(i: int) -> tuple[str, bytes]:
        kind, make = kinds[i % len(kinds)]
        return kind, f"GET {make()} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()

    return target


def query_targets(players: int, seed: int, names: list[str]) -> Callable[[int], tuple[str, bytes]]:
    rng = random.Random(seed)

    def target(i: int) -> tuple[str, bytes]:
        if i % 2 == 0:
            return "query get", json.dumps(
                {"op": "get", "player": names[rng.randrange(len(names))]}
            ).encode() + b"\n"
        req = {"op": "top", "n": 100, "offset": rng.randrange(players)}
        return "query top 100", json.dumps(req).encode() + b"\n"

    return target


async def _http_reply(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def _line_reply(reader: asyncio.StreamReader) -> int:
    line = await reader.readline()
    return 200 if line.startswith(b'{"ok":true') else 500


async def open_loop(
    addr: tuple[str, int],
    *,
    make: Callable[[int], tuple[str, bytes]],
    http: bool,
    rps: float,
    seconds: float,
    conns: int,
) -> dict[str, Any]:
    """Requests due every 1/rps s for ``seconds``, each taken by the next free connection;
    latency from its due time (waiting for a free connection counts: open loop). Times are
    ``perf_counter``: uvloop's ``loop.time()`` has millisecond steps, the size of the targets."""
    clock = time.perf_counter
    queue: asyncio.Queue[tuple[float, str, bytes] | None] = asyncio.Queue()
    lat: dict[str, list[float]] = {}  # from the write: the daemon's answer and the loopback
    late: dict[str, list[float]] = {}  # from the due time: also waiting for a free connection
    statuses: dict[str, int] = {}
    errors: list[str] = []
    read = _http_reply if http else _line_reply

    async def worker() -> None:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*addr), IO_TIMEOUT)
        try:
            while (item := await queue.get()) is not None:
                due, kind, req = item
                sent = clock()
                try:
                    writer.write(req)
                    status = await asyncio.wait_for(read(reader), IO_TIMEOUT)
                except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as e:
                    errors.append(f"{kind}: {type(e).__name__}")
                    return  # this connection is unusable; the others go on
                now = clock()
                lat.setdefault(kind, []).append(now - sent)
                late.setdefault(kind, []).append(now - due)
                statuses[str(status)] = statuses.get(str(status), 0) + 1
        finally:
            writer.close()

    workers = [asyncio.ensure_future(worker()) for _ in range(conns)]
    start = clock() + 0.05
    n = int(rps * seconds)
    for i in range(n):
        due = start + i / rps
        delay = due - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        kind, req = make(i)
        queue.put_nowait((due, kind, req))
    # The window is over: what no connection has taken yet is the backlog of a server slower
    # than the rate (reported, never sent, so the phase ends on time).
    backlog = 0
    while not queue.empty():
        queue.get_nowait()
        backlog += 1
    for _ in workers:
        queue.put_nowait(None)
    done, pending = await asyncio.wait(workers, timeout=IO_TIMEOUT)
    for w in pending:
        w.cancel()
    for w in done:
        if w.exception() is not None:
            errors.append(repr(w.exception()))
    return {
        "due": n,
        "sent": n - backlog,
        "backlog_at_end": backlog,
        "seconds": round(clock() - start, 3),
        "latency": lat,
        "latency_from_due": late,
        "statuses": statuses,
        "errors": errors[:20],
        "error_count": len(errors),
    }


def load_child(
    out: Any,
    addr: tuple[str, int],
    *,
    exe: str | None,
    kind: str,
    names: list[str],
    players: int,
    rps: float,
    seconds: float,
    conns: int,
    only: tuple[str, ...],
    latencies: Path | None = None,
) -> None:
    """One phase's load: through bench/qload.c at ``exe``, or the asyncio generator."""
    import uvloop  # noqa: PLC0415

    try:
        make = http_targets(names, 1, only) if kind == "http" else query_targets(players, 2, names)
        if exe is not None:
            out.send(
                qload_run(
                    exe,
                    addr,
                    make,
                    http=kind == "http",
                    rps=rps,
                    seconds=seconds,
                    conns=conns,
                    latencies=latencies,
                )
            )
            return
        res = uvloop.run(
            open_loop(addr, make=make, http=kind == "http", rps=rps, seconds=seconds, conns=conns)
        )
        res["latency"] = {k: pct(v) for k, v in res["latency"].items()}
        res["latency_from_due"] = {k: pct(v) for k, v in res["latency_from_due"].items()}
        out.send(res)
    except Exception as e:  # reported to the parent rather than lost
        out.send({"error": f"{type(e).__name__}: {e}"})


def qload_run(
    exe: str,
    addr: tuple[str, int],
    make: Callable[[int], tuple[str, bytes]],
    *,
    http: bool,
    rps: float,
    seconds: float,
    conns: int,
    latencies: Path | None = None,
) -> dict[str, Any]:
    """The requests through bench/qload.c: one epoll loop spending microseconds a reply, so
    what it measures is the daemon and the loopback, not a Python client's own queueing (on 2
    cores the asyncio generator is itself a bound). Request j goes on connection j % conns when
    due, or when that connection's previous answer is in (open loop per connection)."""
    n = int(rps * seconds)
    reqs = [make(i) for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="arenad-qload-") as tmp:
        req_file = Path(tmp) / "requests"
        req_file.write_bytes(b"".join(struct.pack("<I", len(r)) + r for _, r in reqs))
        res_file = Path(tmp) / "latencies"
        # time.monotonic() is CLOCK_MONOTONIC on Linux, the clock qload schedules by.
        start_ns = str(int((time.monotonic() + 0.05) * 1e9))
        args = [exe, addr[0], str(addr[1]), "http" if http else "line", str(conns), str(rps), start_ns]
        # A server slower than the rate leaves a backlog: stop a second after the window, as
        # the asyncio generator does, so the phase ends on time.
        done = subprocess.run([*args, str(req_file), str(res_file), "1.0"], timeout=seconds + 90, check=False)
        if not res_file.exists():
            return {"error": f"qload exited with {done.returncode} and wrote nothing"}
        rows = np.fromfile(res_file, dtype=np.float64).reshape(-1, 3)
    answered = rows[:, 1] > 0  # a request never answered keeps its zeros
    if latencies is not None:
        write_latencies(latencies, [k for k, _ in reqs], rows, answered, rps=rps, conns=conns)
    lat: dict[str, list[float]] = {}
    late: dict[str, list[float]] = {}
    for (k, _), (latency, lag, _err), ok in zip(reqs, rows.tolist(), answered.tolist(), strict=True):
        if ok:
            lat.setdefault(k, []).append(latency)
            late.setdefault(k, []).append(lag)
    if http:  # the status code of each answer
        codes = rows[answered, 2].astype(int).tolist()
        statuses = {str(c): codes.count(c) for c in sorted(set(codes))}
        errors = sum(1 for c in codes if c >= 400)
    else:
        errors = int(rows[answered, 2].sum())
        statuses = (
            {"200": int(answered.sum()) - errors, "500": errors} if errors else {"200": int(answered.sum())}
        )
    failed = done.returncode not in (0, 5)  # 5: some were not answered in time (the backlog)
    return {
        "client": "qload.c",
        "due": n,
        "sent": int(answered.sum()),
        "backlog_at_end": int(n - answered.sum()),
        "seconds": seconds,
        "latency": {k: pct(v) for k, v in lat.items()},
        "latency_from_due": {k: pct(v) for k, v in late.items()},
        "statuses": statuses,
        "errors": [f"qload exited with {done.returncode}"] if failed else [],
        "error_count": errors + failed,
    }


def write_latencies(
    path: Path, kinds: list[str], rows: Any, answered: Any, *, rps: float, conns: int
) -> None:
    """Every request of a phase as one CSV line, in the order due: when it was due (seconds into
    the window), its kind and connection, its latency from its write and from when it was due
    (ms; empty if never answered), and its status (HTTP) or error flag (query port). A p99 is
    one number; this shows whether its slow requests are spread out or come in bursts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write("due_s,kind,connection,client_ms,from_due_ms,status\n")
        for j, (kind, (latency, lag, code), ok) in enumerate(
            zip(kinds, rows.tolist(), answered.tolist(), strict=True)
        ):
            client = f"{1e3 * latency:.4f}" if ok else ""
            late = f"{1e3 * lag:.4f}" if ok else ""
            status = int(code) if ok else ""
            f.write(f"{j / rps:.6f},{kind},{j % conns},{client},{late},{status}\n")


def pct(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1000.0
    return {
        "n": len(samples),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def wait_web_ready(addr: tuple[str, int], timeout: float) -> None:
    """Until search answers (503 while the name index is built): that start-up work takes a step
    every loop turn (~7 s of CPU at a million players) and would be measured as ingest's loss."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection(*addr, timeout=IO_TIMEOUT)
        try:
            conn.request("GET", "/api/v1/search?q=a")
            r = conn.getresponse()
            r.read()
            if r.status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.5)
    raise TimeoutError(f"the web search index was not complete within {timeout:.0f} s")


# ---------------------------------------------------------------------------- daemon figures
def decided(s: dict[str, Any]) -> int:
    """Events the rating core has decided on: applied, filtered or rejected."""
    return int(s["applied"] + s["filtered"] + sum(s["rejected"].values()))


def web_histogram(text: str) -> tuple[dict[str, dict[float, float]], dict[str, float]]:
    """``arenad_web_request_seconds`` cumulative buckets by route, requests by status."""
    buckets: dict[str, dict[float, float]] = {}
    status: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "arenad_web_request_seconds_bucket":
                buckets.setdefault(s.labels["route"], {})[float(s.labels["le"])] = float(s.value)
            elif s.name == "arenad_web_request_seconds_sum":
                # Kept under a key no bucket bound can take: the loop time the route used.
                buckets.setdefault(s.labels["route"], {})[-1.0] = float(s.value)
            elif s.name == "arenad_web_requests_total":
                status[s.labels["status"]] = status.get(s.labels["status"], 0.0) + float(s.value)
    return buckets, status


def server_quantiles(
    before: dict[str, dict[float, float]], after: dict[str, dict[float, float]]
) -> dict[str, Any]:
    """p50/p99 by route over the window, as the bucket bounds that hold them (``le`` ms)."""
    out: dict[str, Any] = {}
    for route, cum in after.items():
        prev = before.get(route, {})
        busy = cum.get(-1.0, 0.0) - prev.get(-1.0, 0.0)
        diff = sorted((le, v - prev.get(le, 0.0)) for le, v in cum.items() if le >= 0)
        total = diff[-1][1] if diff else 0.0
        if total <= 0:
            continue

        def bound(q: float, diff: list[tuple[float, float]] = diff, total: float = total) -> float | None:
            le = next(le for le, c in diff if c >= q * total)
            return None if le == float("inf") else round(le * 1000.0, 3)

        out[route] = {
            "n": int(total),
            "p50_le_ms": bound(0.5),
            "p99_le_ms": bound(0.99),
            "mean_ms": round(1000.0 * busy / total, 3),
            "busy_s": round(busy, 3),  # seconds of the daemon's loop over the window
        }
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of ``pid`` (its own, and its children's: the reaped ones and those
    running, the web readers) and of the whole machine (busy, all cores), from /proc."""

    def stat(p: int | str) -> list[str]:
        try:
            text = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            return []
        return text[text.rindex(")") + 2 :].split()

    own = stat(pid)
    out = {"daemon": 0.0, "children": 0.0, "machine": 0.0}
    if own:
        out["daemon"] = (int(own[11]) + int(own[12])) / _TICK
        out["children"] = (int(own[13]) + int(own[14])) / _TICK
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            f = stat(entry.name)
            if f and int(f[1]) == pid:
                out["children"] += (int(f[11]) + int(f[12])) / _TICK
    with contextlib.suppress(OSError):
        cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        vals = [int(v) for v in cpu]
        out["machine"] = (sum(vals[:8]) - vals[3] - vals[4]) / _TICK  # less idle and iowait
    return out


class Phase:
    """A UDP sender (and optionally a load generator) for one window; the daemon's counters at
    both ends of it."""

    def __init__(self, d: DaemonProcess, pairs: list[list[str]], qload: Path | None = None) -> None:
        self.d = d
        self.pairs = pairs
        self.qload = qload  # the C load generator, or None for the asyncio one
        self.ctx = multiprocessing.get_context("fork")

    def run(
        self,
        rate: float,
        seconds: float,
        lead: float,
        load: tuple[str, list[str], int, float, int, tuple[str, ...]] | None = None,
        latencies: Path | None = None,
    ) -> dict[str, Any]:
        stop = self.ctx.Event()
        sent = self.ctx.Value("q", 0)
        sender = self.ctx.Process(
            target=udp_sender,
            args=(self.d.addr("udp"), self.d.addr("query"), self.pairs),
            kwargs={"rate": rate, "stop": stop, "sent": sent},
            daemon=True,
        )
        loader = None
        receiver = None
        result: dict[str, Any] = {"ingest_target": rate, "seconds": seconds}
        try:
            sender.start()
            time.sleep(lead)  # past the first slices, the queue at its steady depth
            s0, m0, t0 = self.d.stats(), self.d.metrics(), time.monotonic()
            assert self.d.proc is not None
            c0 = tree_cpu(self.d.proc.pid)
            if load is not None:
                kind, names, players, rps, conns, only = load
                receiver, out = self.ctx.Pipe(duplex=False)
                addr = self.d.addr("web" if kind == "http" else "query")
                loader = self.ctx.Process(
                    target=load_child,
                    args=(out, addr),
                    kwargs={
                        "exe": None if self.qload is None else str(self.qload),
                        "kind": kind,
                        "names": names,
                        "players": players,
                        "rps": rps,
                        "seconds": seconds,
                        "conns": conns,
                        "only": only,
                        "latencies": latencies,
                    },
                    daemon=True,
                )
                loader.start()
                out.close()
                if not receiver.poll(seconds + 3 * IO_TIMEOUT):
                    raise TimeoutError("the load generator did not report")
                result["load"] = receiver.recv()
                # The readers report their answers to the daemon every 0.1 s: the last ones
                # reach its histogram a moment after the load generator has its answers.
                time.sleep(3 * FLUSH_INTERVAL)
            else:
                time.sleep(seconds)
            s1, m1, t1 = self.d.stats(), self.d.metrics(), time.monotonic()
            c1 = tree_cpu(self.d.proc.pid)
        finally:
            stop.set()
            for p in (sender, loader):
                if p is not None:
                    p.join(IO_TIMEOUT)
                    if p.is_alive():
                        p.kill()
                        p.join(IO_TIMEOUT)
        span = t1 - t0
        dropped = {
            k: v - s0["dropped"].get(k, 0) for k, v in s1["dropped"].items() if v - s0["dropped"].get(k, 0)
        }
        result.update(
            {
                "window_s": round(span, 2),
                "events_per_s": round((decided(s1) - decided(s0)) / span, 1),
                "received_per_s": round(
                    (sum(s1["received"].values()) - sum(s0["received"].values())) / span, 1
                ),
                "dropped": dropped,
                "sent_by_sender": int(sent.value),
                # Cores in use over the window: the daemon's process, its readers (the web's
                # forks), the whole machine (sender, load generator and everything else too).
                "cores": {k: round((c1[k] - c0[k]) / span, 2) for k in c0},
            }
        )
        if load is not None and load[0] == "http":
            b0, st0 = web_histogram(m0)
            b1, st1 = web_histogram(m1)
            result["server"] = server_quantiles(b0, b1)
            result["server_statuses"] = {
                k: int(v - st0.get(k, 0.0)) for k, v in st1.items() if v - st0.get(k, 0.0)
            }
        return result

    def drain(self, timeout: float = 60.0) -> None:
        """Wait for the queue to empty between phases, so one's backlog is not the next's."""
        self.d.wait_for(lambda s: s["queue_depth"] == 0, timeout=timeout)


# ---------------------------------------------------------------------------- the run
def run(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    load_start = loadavg()
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = set(kinds) - set(HTTP_KINDS)
    if unknown or not kinds:
        raise SystemExit(f"--kinds: unknown {sorted(unknown)}; choose from {', '.join(HTTP_KINDS)}")
    cache, built = cached_state(args.players, args.seed, log)
    names: list[str] = msgpack.unpackb((cache / "names.msgpack").read_bytes())
    pairs: list[list[str]] = msgpack.unpackb((cache / "pairs.msgpack").read_bytes())
    workdir = Path(tempfile.mkdtemp(prefix="arenad-bench-webd-"))
    try:
        state = workdir / "state"
        shutil.copytree(cache / "state", state)  # the daemon writes its state dir: the cache stays pristine
        config = workdir / "arenad.toml"
        # No per-client limits: the load generator is one client sending thousands a second.
        # No periodic checkpoint inside the windows: at a million players one takes seconds while
        # the engine task waits for it (arenad/daemon/recovery.py), a stall of ingest that is not
        # the web layer's and would land in whichever phase the minute ends in.
        config.write_text(
            "[daemon]\ncheckpoint_interval = 3600\n\n[web]\nrate_limit = 0\n"
            f"readers = {args.readers}\nrefresh = {args.refresh}\n\n[query]\nrate_limit = 0\n"
        )
        daemon_harness.STARTUP_TIMEOUT = 600.0  # a million players' checkpoint loads before the log line
        d = DaemonProcess(state, config=config)
        t0 = time.monotonic()
        d.start()
        try:
            d.wait_for(lambda s: s["players"] >= built["players"], timeout=600)
            started_s = time.monotonic() - t0
            log(f"daemon up in {started_s:.1f} s: {d.addresses.get('web')}")
            wait_web_ready(d.addr("web"), timeout=300)
            ready_s = time.monotonic() - t0
            log(f"web ready (search index complete) at {ready_s:.1f} s")
            qload = build_qload(workdir) if args.client == "c" else None
            if args.client == "c" and qload is None:
                raise SystemExit("--client c needs a C compiler (cc or gcc); --client python runs without")
            ph = Phase(d, pairs, qload)
            lead = min(2.0, args.seconds / 4)
            visible = names  # nobody is hidden in this state
            phases: dict[str, Any] = {}
            log(f"[1] ingest {args.ingest:,.0f}/s, web idle")
            phases["ingest_idle"] = ph.run(args.ingest, args.seconds, lead)
            ph.drain()
            log(f"[1] ingest {args.ingest_max or 'as fast as the daemon takes it'} events/s, web idle")
            phases["ingest_max_idle"] = ph.run(args.ingest_max, args.seconds, lead)
            ph.drain()
            log(f"[2] ingest {args.ingest:,.0f}/s + HTTP {args.rps:,.0f} requests/s")
            phases["web"] = ph.run(
                args.ingest,
                args.seconds,
                lead,
                ("http", visible, args.players, args.rps, args.connections, kinds),
                None if args.latencies is None else args.latencies / "web.csv",
            )
            ph.drain()
            log(f"[3] ingest {args.ingest:,.0f}/s + query port {args.rps:,.0f} requests/s (reference)")
            phases["query"] = ph.run(
                args.ingest,
                args.seconds,
                lead,
                ("query", visible, args.players, args.rps, args.connections, ()),
                None if args.latencies is None else args.latencies / "query.csv",
            )
            final = d.stats()
        finally:
            try:
                d.stop(300)
            except Exception:  # a stuck stop must not leave the daemon running
                d.kill()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "command": "python -m bench.web_daemon " + " ".join(sys.argv[1:]),
        "players": built["players"],
        "state": built,
        "daemon_ready_s": round(started_s, 1),
        "web_ready_s": round(ready_s, 1),
        "kinds": list(kinds),
        "rps": args.rps,
        "readers": args.readers,
        "refresh": args.refresh,
        "connections": args.connections,
        "client": args.client,
        "phases": phases,
        "daemon_players_end": final["players"],
        "verdict": verdict(
            phases, at_size=args.players >= 1_000_000 and args.ingest >= 50_000 and args.rps >= 2000
        ),
    }


def verdict(ph: dict[str, Any], *, at_size: bool) -> dict[str, Any]:
    """The targets against the client-side p99s (what a user waits for: the daemon's histogram
    leaves out the loopback and the wait for the loop to read the request)."""
    lat = ph["web"]["load"]["latency"]
    api = max(lat[k]["p99_ms"] for k in API_KINDS if k in lat)
    page = lat["page player"]["p99_ms"] if "page player" in lat else None
    idle, web = ph["ingest_idle"]["events_per_s"], ph["web"]["events_per_s"]
    # The idle window can take more than the asked rate (the sender catching up on the lead-in:
    # 54.8k/s of 50k asked in one run); what the web must not lower is the rate offered.
    idle = min(idle, ph["ingest_idle"]["ingest_target"] or idle)
    return {
        "at_size": at_size,  # 1M players, 50k events/s, 2,000 requests/s: the figures
        "api_p99_ms_worst": api,
        "api_p99_met": api <= TARGETS["api_p99_ms"],
        "page_p99_ms": page,
        "page_p99_met": page is not None and page <= TARGETS["page_p99_ms"],
        "ingest_idle_max_per_s": ph["ingest_max_idle"]["events_per_s"],
        "ingest_idle_met": ph["ingest_max_idle"]["events_per_s"] >= TARGETS["ingest_idle"],
        # "No regression": the engine kept the asked rate with the web loaded as with it idle
        # (within 2 % of the lesser of the idle window and the asked rate: the windows' edges),
        # and nothing more was dropped.
        "ingest_with_web_ratio": round(web / idle, 3) if idle else None,
        "no_ingest_regression": bool(idle) and web >= 0.98 * idle and not ph["web"]["dropped"],
    }


def reader_cpu(r: dict[str, Any]) -> list[str]:
    """The readers' CPU per answered request (user and system, the whole window): with the
    daemon's histogram, which is wall time, it tells work from waiting for a core."""
    web = r["phases"]["web"]
    sent = web["load"]["sent"]
    if not r.get("readers") or not sent:
        return []
    cpu = web.get("cores", {}).get("children", 0.0) * web["window_s"]
    return [f"readers' CPU per answered request: {1000.0 * cpu / sent:.3f} ms"]


def table(r: dict[str, Any]) -> str:
    ph = r["phases"]
    web, q, m = ph["web"], ph["query"], r["machine"]
    lines = [
        f"bench.web_daemon at {r['commit']}, {r['date']}, {m['cpu']} ({m['cores']} cores), "
        f"load {r['loadavg_start']} → {r['loadavg_end']}; P = {r['players']:,}; "
        f"daemon ready in {r['daemon_ready_s']} s; load generator: {r.get('client', 'python')}",
        "",
        f"[web] readers = {r.get('readers', 0)}, refresh = {r.get('refresh', '-')} s",
        "",
        "| phase | asked events/s | achieved events/s | dropped | cores: daemon / readers / machine |",
        "|---|---:|---:|---|---|",
    ]
    for name, label in [
        ("ingest_idle", "ingest, web idle"),
        ("ingest_max_idle", "ingest max, web idle"),
        ("web", f"ingest + HTTP {r['rps']:,.0f}/s"),
        ("query", f"ingest + query port {r['rps']:,.0f}/s"),
    ]:
        p = ph[name]
        asked = f"{p['ingest_target']:,.0f}" if p["ingest_target"] else "paced by the queue"
        c = p.get("cores", {})
        cores = f"{c.get('daemon', 0):.2f} / {c.get('children', 0):.2f} / {c.get('machine', 0):.2f}"
        lines.append(f"| {label} | {asked} | {p['events_per_s']:,.0f} | {p['dropped'] or '-'} | {cores} |")
    lines += [
        "",
        f"| request at {r['rps']:,.0f} requests/s (ms) | n | client p50 | client p99 | client max "
        "| from due p50 | from due p99 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for res in (web["load"], q["load"]):
        for kind, s in res.get("latency", {}).items():
            d = res["latency_from_due"][kind]
            lines.append(
                f"| {kind} | {s['n']:,} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {s['max_ms']:.2f} "
                f"| {d['p50_ms']:.2f} | {d['p99_ms']:.2f} |"
            )
    lines += [
        "",
        f"| route (daemon's histogram, {web['window_s']} s) | n | p50 ≤ ms | p99 ≤ ms | mean ms | loop s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for route, s in web.get("server", {}).items():
        lines.append(
            f"| {route} | {s['n']:,} | {s['p50_le_ms']} | {s['p99_le_ms']} | {s['mean_ms']} | {s['busy_s']} |"
        )
    v = r["verdict"]
    yn = (
        {True: "yes", False: "**no**"}
        if v["at_size"]
        else {True: "n/a (small run)", False: "n/a (small run)"}
    )
    lines += [
        "",
        f"HTTP requests due {web['load']['due']:,}, sent {web['load']['sent']:,} (backlog at the end "
        f"{web['load']['backlog_at_end']:,}); statuses (client): {web['load'].get('statuses')}, "
        f"daemon: {web.get('server_statuses')}; errors {web['load'].get('error_count')}; query port: due "
        f"{q['load']['due']:,}, sent {q['load']['sent']:,}, errors {q['load']['error_count']}",
        *reader_cpu(r),
        "",
        "| target | measured | met? |",
        "|---|---|---|",
        f"| API p99 ≤ {TARGETS['api_p99_ms']} ms | worst {v['api_p99_ms_worst']:.2f} ms "
        f"| {yn[v['api_p99_met']]} |",
        f"| pages p99 ≤ {TARGETS['page_p99_ms']} ms | {v['page_p99_ms']} ms | {yn[v['page_p99_met']]} |",
        f"| UDP ingest ≥ 100,000/s, web idle | {v['ingest_idle_max_per_s']:,.0f}/s "
        f"| {yn[v['ingest_idle_met']]} |",
        f"| no ingest regression | {v['ingest_with_web_ratio']} of the idle rate (at most the asked) "
        f"| {yn[v['no_ingest_regression']]} |",
        "",
        f"Reference: {HLSTATSX}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.web_daemon", description=__doc__)
    ap.add_argument("--players", type=int, default=1_000_000)
    ap.add_argument("--ingest", type=float, default=50_000.0, help="events/s during the web and query phases")
    ap.add_argument(
        "--ingest-max",
        type=float,
        default=0.0,
        help="events/s in the idle maximum phase; 0: paced by the queue",
    )
    ap.add_argument("--rps", type=float, default=2000.0, help="requests/s, open loop")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument(
        "--client",
        choices=("c", "python"),
        default="c",
        help="load generator: bench/qload.c (default; needs cc) or the asyncio one",
    )
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each measured window")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--kinds", default=",".join(HTTP_KINDS), help="comma-separated HTTP request kinds, taken in turn"
    )
    ap.add_argument("--readers", type=int, default=1, help="[web] readers (forked snapshots); 0: the loop")
    ap.add_argument("--refresh", type=float, default=5.0, help="[web] refresh, seconds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--latencies",
        type=Path,
        metavar="DIR",
        help="write each request of the web and query phases to DIR/web.csv and DIR/query.csv (qload.c)",
    )
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    report = run(args, log)
    sys.stdout.write(table(report))
    if args.json:
        sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
