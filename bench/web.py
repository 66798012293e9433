"""Web layer latency at 100k–1M players, beside the NDJSON query op on the same ladder in the same run.

Run:  .venv/bin/python -m bench.web [--players 100000,1000000] [--requests 2000] [--ingest 50000]
                                    [--quick] [--json] | --serve ADDR

For each population P: a global ladder of P players (bench/stream.py's server network,
``bench.core.warm_up``, then its main stream), 10 of them hidden, and a synthetic history reader
that hands every player 500 points and 10 sessions (so the figures are the web layer's cost, not a
store's). Two measurements per request kind:

* **handler**: ``WebApp.handle`` called in-process (routing, parameters, the read, JSON or HTML,
  the ETag): what one request holds the event loop for. Reference: ``QueryHandler.handle_line``
  (the NDJSON query op) for ``get`` and ``top`` on the same engine.
* **e2e**: a real server — arenad's (``start_web``, llhttp on a protocol) and, for the choice,
  the same app on aiohttp (bench/web_aiohttp.py) — and the real query server (``serve_query``) on one
  uvloop loop in a thread; one blocking keep-alive client in a forked process (not sharing the
  server's GIL) sends the requests one after another over loopback: latency as the client sees
  it (client overhead included, on the same 2 cores).

With ``--ingest R`` the e2e requests run once more while kills go into the engine on the same
loop at R events/s (``Ingest``: slices every 5 ms as the engine task's; no journal, no UDP, no
recalibration), so the web answers wait behind engine slices as they would in the daemon. The
collector thresholds are the daemon's (``gc.set_threshold(50_000, 20, 100)``, as ``run_daemon``).
Everything is bounded: a fixed number of requests, socket timeouts. stdout: a Markdown table;
``--json`` adds one line of JSON with every figure, the commit and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import multiprocessing
import random
import socket
import subprocess
import sys
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import structlog
import uvloop

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from arenad.daemon.config import QuerySettings
from arenad.daemon.query import QueryHandler, close_servers, serve_query
from arenad.scopes import ScopeSet
from arenad.web.api import WebApp
from arenad.web.config import WebSettings
from arenad.web.pages import player_url
from arenad.web.port import HistoryPoint, Session, WebPorts
from arenad.web.request import Request
from arenad.web.server import start_web
from bench.core import machine, warm_up
from bench.stream import StreamConfig, generate
from bench.web_aiohttp import start_web_aiohttp

TIMEOUT = 30.0


class SyntheticHistory:
    """The same 500 points (one an hour up to the ladder's clock) and 10 sessions for anyone,
    made once: the figures are the web layer's cost, not a store's."""

    def __init__(self, now: float) -> None:
        rng = random.Random(1)
        r = 1000.0
        self._points = []
        for k in range(500):
            r += rng.gauss(0, 5)
            self._points.append(HistoryPoint(now - (500 - k) * 3600.0, r, r - 60.0, "3M"))
        self._t = [p.t for p in self._points]
        self._sessions = [
            Session("eu-1", now - k * 7200.0 - 1800.0, now - k * 7200.0, 20, 15, 4.5, 1000.0)
            for k in range(10)
        ]

    def points(self, scope: str, player: str, since: float, until: float) -> Sequence[HistoryPoint]:
        return self._points[bisect_left(self._t, since) : bisect_left(self._t, until)]

    def sessions(self, scope: str, player: str, limit: int) -> Sequence[Session]:
        return self._sessions[:limit]


class FewHidden:
    def __init__(self, names: Collection[str]) -> None:
        self.names = frozenset(names)

    def is_hidden(self, scope: str, player: str) -> bool:
        return player in self.names

    def hidden(self, scope: str) -> Collection[str]:
        return self.names


def build(players: int, events: int) -> tuple[ScopeSet, list[str], list[tuple[str, str, float]]]:
    work = generate(StreamConfig(players=players, events=events))
    sset = ScopeSet(ADRParams())
    eng: Engine = sset.global_engine
    warm_up(eng, work)
    for a, v, t in work.events:
        eng.feed(a, v, t)
    return sset, work.names, work.events


class Ingest:
    """Kills into the engine on the server's loop, in slices every 5 ms as the engine task does
    (``[daemon] commit_interval``): ``rate`` events/s, the stream replayed with later times when
    it runs out. ``Engine.apply`` (no recalibration: the daemon plans those in a worker thread)."""

    SLICE = 0.005
    #: Slices the feeder may lag its schedule before it counts as behind: the daemon's
    #: ``BEHIND_BATCHES`` (16 datagrams of 50 kills) is about 16 ms of work at 50k events/s.
    BEHIND_SLICES = 3

    def __init__(self, eng: Engine, events: list[tuple[str, str, float]], rate: float) -> None:
        self.eng = eng
        self.events = events
        self.rate = rate
        self.stop = False
        self.applied = 0
        self.seconds = 0.0
        self.lag = 0.0

    def behind(self) -> bool:
        """Whether the web should keep to ``[web] loop_share``, as the daemon's engine_behind."""
        return self.lag >= self.BEHIND_SLICES * self.SLICE

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        per_slice = max(1, round(self.rate * self.SLICE))
        apply = self.eng.apply
        events = self.events
        span = events[-1][2] - events[0][2] + 1.0
        shift = span
        k = 0
        start = due = loop.time()
        while not self.stop:
            for _ in range(per_slice):
                a, v, t = events[k]
                apply(a, v, t + shift)
                k += 1
                if k == len(events):
                    k = 0
                    shift += span
            self.applied += per_slice
            due += self.SLICE
            self.lag = loop.time() - due
            await asyncio.sleep(max(0.0, due - loop.time()))  # behind schedule: only yield
        self.seconds = loop.time() - start


def pct(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1e6
    return {
        "n": len(samples),
        "p50_us": round(float(np.percentile(a, 50)), 1),
        "p99_us": round(float(np.percentile(a, 99)), 1),
        "max_us": round(float(a.max()), 1),
    }


def kinds(names: list[str], rng: random.Random) -> dict[str, Callable[[], str]]:
    def pick() -> str:
        return names[rng.randrange(len(names))]

    def seg(n: str) -> str:
        return player_url(n).removeprefix("/players/")

    return {
        "api player": lambda: f"/api/v1/players/{seg(pick())}",
        "api players (256 ids)": lambda: "/api/v1/players?ids=" + ",".join(seg(pick()) for _ in range(256)),
        "api leaderboard (100)": lambda: f"/api/v1/leaderboard?limit=100&offset={rng.randrange(len(names))}",
        "api leaderboard (500, top)": lambda: "/api/v1/leaderboard?limit=500",
        "api history (500 points)": lambda: f"/api/v1/players/{seg(pick())}/history",
        "api balance (12 players)": lambda: "/api/v1/balance?players=" + ",".join(pick() for _ in range(12)),
        "api balance (64 players, 4 teams)": lambda: (
            "/api/v1/balance?teams=4&players=" + ",".join(pick() for _ in range(64))
        ),
        "api search": lambda: f"/api/v1/search?q={pick()[:3]}",
        "page leaderboard (50)": lambda: f"/?page={1 + rng.randrange(len(names) // 50)}",
        "page player (chart 500 points)": lambda: player_url(pick()),
        "HTTP floor (stylesheet)": lambda: "/static/web.css",
    }


def handler_times(app: WebApp, targets: Callable[[], str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        target = targets()
        path, _, query = target.partition("?")
        req = Request("GET", path, query, {}, "bench")
        t0 = time.perf_counter()
        resp = app.handle(req, t0)
        out.append(time.perf_counter() - t0)
        assert resp.status == 200, (target, resp.status, resp.body[:200])
    return out


def query_times(handler: QueryHandler, lines: Callable[[], bytes], n: int) -> list[float]:
    out = []
    for _ in range(n):
        line = lines()
        t0 = time.perf_counter()
        reply = handler.handle_line(line)
        out.append(time.perf_counter() - t0)
        assert reply.startswith(b'{"ok":true'), reply[:200]
    return out


class Loop:
    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT)


def in_child(fn: Callable[..., list[float]], *args: Any) -> list[float]:
    """``fn(*args)`` in a forked process: the client must not share the server's GIL, or every
    blocking step of a request would wait up to a switch interval (5 ms) for the loop thread."""
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(sender, fn, args), daemon=True)
    proc.start()
    sender.close()
    try:
        if not receiver.poll(10 * TIMEOUT):
            raise TimeoutError(f"{fn.__name__} did not finish")
        out: list[float] | str = receiver.recv()
    finally:
        proc.join(TIMEOUT)
        if proc.is_alive():
            proc.kill()
    if isinstance(out, str):
        raise RuntimeError(out)
    return out


def _child(sender: Any, fn: Callable[..., list[float]], args: tuple[Any, ...]) -> None:
    try:
        sender.send(fn(*args))
    except Exception as e:
        sender.send(f"{type(e).__name__}: {e}")


def e2e_http(address: str, targets: list[str]) -> list[float]:
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
    out = []
    try:
        for target in targets:
            t0 = time.perf_counter()
            conn.request("GET", target)
            r = conn.getresponse()
            r.read()
            out.append(time.perf_counter() - t0)
            assert r.status == 200, (target, r.status)
    finally:
        conn.close()
    return out


def e2e_query(port: int, lines: list[bytes]) -> list[float]:
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    f = s.makefile("rb")
    out = []
    try:
        for line in lines:
            t0 = time.perf_counter()
            s.sendall(line + b"\n")
            reply = f.readline()
            out.append(time.perf_counter() - t0)
            assert reply.startswith(b'{"ok":true'), reply[:200]
    finally:
        f.close()
        s.close()
    return out


def run(players: int, events: int, n: int, ingest: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    sset, names, stream = build(players, events)
    built = time.perf_counter() - t0
    rng = random.Random(1)
    hidden = FewHidden([names[k * (players // 10)] for k in range(10)])
    clock = sset.global_engine.clock
    feeding: list[Ingest] = []  # the feeder while one runs
    ports = WebPorts(
        scopes=lambda: sset,
        status=lambda: {"events_per_second": 0.0},
        history=SyntheticHistory(clock),
        hidden=hidden,
        # As the daemon's: the loop share holds only while the engine is behind.
        engine_behind=lambda: bool(feeding) and feeding[0].behind(),
    )
    # The adapter on one loop, by design (the daemon's forked readers: bench.web_daemon).
    settings = WebSettings(listen="127.0.0.1:0", rate_limit=0.0, readers=0)
    app = WebApp(ports, settings)
    t1 = time.perf_counter()
    while not app.reader.warm(50_000):
        pass
    indexed = time.perf_counter() - t1
    visible = [nm for nm in names if nm not in hidden.names]
    qh = QueryHandler(lambda: sset, QuerySettings(rate_limit=0.0))
    qlines: dict[str, Callable[[], bytes]] = {
        "query get (reference)": lambda: json.dumps({"op": "get", "player": rng.choice(names)}).encode(),
        "query top 100 (reference)": lambda: json.dumps(
            {"op": "top", "n": 100, "offset": rng.randrange(players)}
        ).encode(),
    }
    rows: dict[str, dict[str, Any]] = {}
    for label, targets in kinds(visible, rng).items():
        rows[label] = {"handler": pct(handler_times(app, targets, n))}
    for label, lines in qlines.items():
        rows[label] = {"handler": pct(query_times(qh, lines, n))}
    achieved: dict[str, int | None] = {}
    for adapter, start in ADAPTERS.items():
        achieved[adapter] = e2e(
            adapter,
            start,
            settings=settings,
            ports=ports,
            sset=sset,
            stream=stream,
            visible=visible,
            qh=qh,
            qlines=qlines,
            rows=rows,
            n=n,
            ingest=ingest,
            rng=rng,
            feeding=feeding,
        )
    return {
        "players": players,
        "build_s": round(built, 1),
        "name_index_s": round(indexed, 2),
        "ingest_target": ingest,
        "ingest_achieved": achieved,
        "rows": rows,
    }


def serve(address: str, players: int, seconds: float) -> int:
    """A simulated ladder of ``players`` with synthetic history, served until ``seconds`` pass."""
    sset, _, _ = build(players, 20_000)
    ports = WebPorts(
        scopes=lambda: sset,
        status=lambda: {"feeds": {"demo": {"state": "simulated", "last_event_age": 0.0}}},
        history=SyntheticHistory(sset.global_engine.clock),
    )

    async def run_for() -> None:
        handle = await start_web(WebSettings(listen=address), ports)
        sys.stdout.write(f"serving http://{handle.address}/ for {seconds:.0f} s\n")
        sys.stdout.flush()
        try:
            await asyncio.sleep(seconds)
        finally:
            await handle.close()

    uvloop.run(run_for())
    return 0


ADAPTERS: dict[str, Callable[..., Any]] = {"llhttp": start_web, "aiohttp": start_web_aiohttp}


def e2e(
    adapter: str,
    start: Callable[..., Any],
    *,
    settings: WebSettings,
    ports: WebPorts,
    sset: ScopeSet,
    stream: list[tuple[str, str, float]],
    visible: list[str],
    qh: QueryHandler,
    qlines: dict[str, Callable[[], bytes]],
    rows: dict[str, dict[str, Any]],
    n: int,
    ingest: float,
    rng: random.Random,
    feeding: list[Ingest],
) -> int | None:
    """The end-to-end rows of one adapter (idle, then while ingesting); the ingest rate achieved."""
    loop = Loop()
    achieved = None
    try:
        handle = loop.call(start(settings, ports))
        assert handle.address is not None
        qservers = loop.call(serve_query(qh, QuerySettings(listen="127.0.0.1:0", rate_limit=0.0)))
        qport = qservers[0].sockets[0].getsockname()[1]

        def measure(column: str) -> None:
            for label, targets in kinds(visible, rng).items():
                rows[label][column] = pct(in_child(e2e_http, handle.address, [targets() for _ in range(n)]))
            for label, lines in qlines.items():
                rows[label][column] = pct(in_child(e2e_query, qport, [lines() for _ in range(n)]))

        measure(f"e2e {adapter}")
        if ingest > 0:
            feeder = Ingest(sset.global_engine, stream, ingest)
            feeding.append(feeder)
            task = asyncio.run_coroutine_threadsafe(feeder.run(), loop.loop)
            try:
                measure(f"ingesting {adapter}")
            finally:
                feeder.stop = True
                task.result(TIMEOUT)
                feeding.clear()
            achieved = round(feeder.applied / feeder.seconds) if feeder.seconds else None
        loop.call(close_servers(qservers))
        loop.call(handle.close())
    finally:
        loop.stop()
    return achieved


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--players", default="100000,1000000", help="comma-separated populations")
    ap.add_argument("--events", type=int, default=50_000, help="main-stream kills after the warm-up")
    ap.add_argument("--requests", type=int, default=2000, help="requests per kind and measurement")
    ap.add_argument("--quick", action="store_true", help="smoke run: 5,000 players, 100 requests")
    ap.add_argument(
        "--ingest", type=float, default=0.0, metavar="EVENTS_PER_S", help="also measure e2e while ingesting"
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--serve", metavar="ADDR", help="instead: serve a simulated ladder on ADDR (see the pages by hand)"
    )
    ap.add_argument("--seconds", type=float, default=600.0, help="with --serve: stop after this long")
    args = ap.parse_args(argv)
    # As the daemon runs (arenad.daemon.service.run_daemon): with a million players' names alive,
    # default collection thresholds walk them all every few thousand allocations.
    gc.set_threshold(50_000, 20, 100)
    # Log lines (web_listening, query_listening) to stderr: stdout is the table.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    if args.serve:
        return serve(args.serve, int(args.players.split(",")[0]), args.seconds)
    pops = [5000] if args.quick else [int(p) for p in args.players.split(",")]
    n = 100 if args.quick else args.requests
    events = 5000 if args.quick else args.events
    results = [run(p, events, n, args.ingest) for p in pops]
    info: dict[str, Any] = {
        "commit": commit(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
    }
    out = sys.stdout
    out.write(
        f"bench.web at {info['commit']} on {info['machine']['cpu']} ({info['machine']['cores']} cores)\n\n"
    )
    for res in results:
        columns = [c for c in next(iter(res["rows"].values())) if c != "handler"]
        head = ["handler p50", "handler p99", "handler max"]
        for c in columns:
            head += [f"{c} p50", f"{c} p99"]
        out.write(f"P = {res['players']:,} (built in {res['build_s']} s; name index {res['name_index_s']} s)")
        if res["ingest_target"]:
            rates = ", ".join(f"{a} {r:,}/s" for a, r in res["ingest_achieved"].items() if r is not None)
            out.write(f"; ingest {res['ingest_target']:,.0f}/s asked, achieved: {rates}")
        out.write("\n\n| request (µs) | " + " | ".join(head) + " |\n|---|" + "---:|" * len(head) + "\n")
        for label, row in res["rows"].items():
            h = row["handler"]
            cells = [h["p50_us"], h["p99_us"], h["max_us"]]
            for c in columns:
                cells += [row[c]["p50_us"], row[c]["p99_us"]]
            out.write(f"| {label} | " + " | ".join(f"{c:,.0f}" for c in cells) + " |\n")
        out.write("\n")
    if args.json:
        out.write(json.dumps(info) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
