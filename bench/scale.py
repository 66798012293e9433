"""Issue 7's scale targets, each measured side by side with a reference in the same run.

Run:  .venv/bin/python -m bench.scale [--quick] [--json] [--parts engine,e2e,query,restart]
                                      [--redis 127.0.0.1:6379 | --redis off]
                                      [--query-players 100000] [--ingest 50000]

One table: target | arenad measured | reference measured | met?. The references are the
``openskill`` package (``PlackettLuce().rate([[a], [b]])``, bench.models' own loop) and a Redis
sorted set on the local Redis, spoken to in RESP over a plain socket (no client library):

* **engine** (for each population P; a fresh interpreter each): bench/stream.py's server network,
  ``bench.core.warm_up`` then ``bench.core.run_main`` (the complete ADR step with decay, ladder
  index and tiers, due recalibrations included, no I/O) -> events/s. In the same interpreter, on
  the first ``ref_events`` kills of the same stream (suicides left out): openskill ``rate()``
  events/s; and Redis with the sorted set pre-filled with all P players (random scores), per kill
  ``ZADD key s_a a s_v v`` (both players' new scores, from a plain Elo computed beforehand,
  untimed) + ``ZREVRANK key a``: pipelined (1,000 kills per round trip) and unpipelined (one
  command per round trip), events/s as the Python client sees them, plus the Redis server's own
  CPU per kill (``INFO cpu`` growth).
* **memory** (largest engine P): VmRSS growth of engine construction + warm-up, per player (the
  bench.core figure). References: Redis ``used_memory`` growth of the pre-fill (16-character
  members, as the engine's names) per member, and ``MEMORY USAGE key SAMPLES 0`` per member;
  openskill: a dict of P ``PlackettLuceRating`` objects keyed by fresh name strings, VmRSS growth
  per player in a fresh interpreter.
* **e2e**: ``bench.daemon.run_one`` (a real ``arenad run``; every player introduced first, then the
  server-network stream as UDP datagrams of 50 events, or MQTT QoS 1 messages of 50 events through
  a local mosquitto, until the rating core decided on every event). References: Redis pipelined
  with 50 kills per round trip (as a datagram carries), and for MQTT the transport alone: the same
  messages published the same way to a paho QoS 1 subscriber that only counts them.
* **query**: a real daemon (``[query] rate_limit = 0``) with P players; a forked process sends
  UDP datagrams of 50 events at ``ingest`` events/s (paced every millisecond), another runs
  ``conns`` connections issuing ``get`` and ``top n=10`` alternately at ``qps`` queries/s in total
  (open loop: each request at its scheduled time; latency = reply received - request sent, and
  "schedule" latency from the scheduled time, which also counts waiting behind a slow reply).
  The first and last half second are not queried. UDP cannot be paused: when the daemon cannot
  keep up its queue fills and datagrams are dropped (counted); the row then reports the rate it
  rated and the share dropped, and the target is not met. Reference: the same two processes against
  Redis (pipelined ``ZADD``+``ZREVRANK`` batches of 50 kills at the same rate; ``ZREVRANK`` for
  get, ``ZREVRANGE key 0 9 WITHSCORES`` for top).
* **restart**: a state directory built in a fresh interpreter with arenad's own writers: a
  ``Daemon`` (arenad.daemon.service) whose global engine is warmed up with every player
  (bench.core.warm_up), its checkpoint written by ``Daemon.checkpoints.write(seq,
  LiveState.checkpoint_payload())``, then a journal tail of ``tail`` kills of the server-network
  stream (each with a server and an event id, as game servers send) appended through
  ``Journal.append`` in chunks of 64 and fsynced. Then a real ``python -m arenad run`` on it:
  seconds from ``Popen`` until ``/healthz`` answers 200 (polled every 10 ms), with the daemon's
  own ``state_loaded`` seconds (checkpoint load + journal replay) and its VmRSS once ready. No
  reference: Redis' RDB/AOF load is not comparable work.

Everything is bounded in time (daemon waits, child processes, sockets). ``--quick`` is a smoke
run on small sizes (~16 s here); its "met?" column says n/a because the sizes are not the targets'.
stdout: the table (Markdown); with ``--json`` one more line of JSON with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
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
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from bench.core import engine_version, loadavg, machine, run_main, vm_rss, warm_up
from bench.models import openskill_kills
from bench.outage import Broker, free_port, mosquitto_binary
from bench.stream import StreamConfig, generate, player_names

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import daemon_harness
from daemon_harness import DaemonProcess

from bench.daemon import run_one, send_mqtt, send_udp, stream

Result = dict[str, Any]
KEY_PREFIX = "arenad-bench-scale"
BATCH = 50  # events per UDP datagram / MQTT message (bench.daemon's)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- sizes
@dataclass(frozen=True, slots=True)
class Sizes:
    engine_players: tuple[int, ...]
    engine_events: tuple[int, ...]
    ref_events: int  # openskill / Redis pipelined: the first kills of the engine stream
    unpipelined_events: int
    e2e_players: int
    e2e_events: int
    query_players: int
    query_seconds: float
    restart_players: int
    restart_tail: int


FULL = Sizes(
    engine_players=(100_000, 1_000_000),
    engine_events=(1_000_000, 500_000),  # as `python -m bench`
    ref_events=200_000,
    unpipelined_events=50_000,
    e2e_players=100_000,
    e2e_events=300_000,
    query_players=100_000,
    query_seconds=20.0,
    restart_players=1_000_000,
    restart_tail=1_000_000,
)
QUICK = Sizes(
    engine_players=(10_000,),
    engine_events=(30_000,),
    ref_events=10_000,
    unpipelined_events=2_000,
    e2e_players=2_000,
    e2e_events=20_000,
    query_players=2_000,
    query_seconds=3.0,
    restart_players=20_000,
    restart_tail=20_000,
)
INGEST = 50_000.0  # events/s while querying
QPS = 5_000.0
QUERY_CONNS = 8


# ---------------------------------------------------------------------------- children
def _child(fn: Callable[..., Result], kwargs: dict[str, Any], conn: Connection) -> None:
    try:
        conn.send(fn(**kwargs))
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})


def in_fresh_interpreter(fn: Callable[..., Result], timeout: float, **kwargs: Any) -> Result:
    """``fn(**kwargs)`` in a spawned interpreter (its heap cannot lend memory to the next RSS figure);
    killed after ``timeout`` seconds."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, kwargs, send))
    proc.start()
    try:
        if not recv.poll(timeout):
            raise TimeoutError(f"{fn.__name__} did not finish within {timeout:.0f} s")
        out: Result = recv.recv()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    if "error" in out and len(out) == 1:
        raise RuntimeError(out["error"])
    return out


# ---------------------------------------------------------------------------- RESP (Redis)
class RespError(Exception):
    """An error reply from Redis."""


def resp_command(*args: bytes | str | int | float) -> bytes:
    """One command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, float):
            b = repr(a).encode()
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Resp:
    """A minimal blocking RESP2 client: send bytes (one command or a pipeline), read replies."""

    def __init__(self, host: str, port: int, timeout: float = 60.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.pos = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("Redis closed the connection")
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = self.buf[self.pos : i]
                self.pos = i + 2
                return line
            self._fill()

    def reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode(errors="replace"))
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) - self.pos < n + 2:
                self._fill()
            data = self.buf[self.pos : self.pos + n]
            self.pos += n + 2
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RespError(f"unexpected reply {line[:40]!r}")

    def one_line_replies(self, n: int) -> None:
        """Consume ``n`` replies of one line each (integers and nils: what ZADD and ZREVRANK
        answer) with a scan per read instead of a parse per reply, so a pipelining load generator
        costs the load CPU little (a Python parse per reply starved the query client sharing it).
        Raises RespError if one is an error."""
        while (avail := self.buf.count(b"\r\n", self.pos)) < n:
            self._fill()
        if avail == n:
            end = self.buf.rfind(b"\r\n") + 2
        else:
            end = self.pos
            for _ in range(n):
                end = self.buf.index(b"\r\n", end) + 2
        part = self.buf[self.pos : end]
        self.pos = end
        if part.startswith(b"-") or b"\n-" in part:
            raise RespError(part[:120].decode(errors="replace"))

    def call(self, *args: bytes | str | int | float) -> Any:
        self.send(resp_command(*args))
        return self.reply()

    def info(self, section: str) -> dict[str, str]:
        text = self.call("INFO", section)
        out: dict[str, str] = {}
        for line in bytes(text).decode().splitlines():
            if ":" in line and not line.startswith("#"):
                k, _, v = line.partition(":")
                out[k] = v
        return out

    def cpu_seconds(self) -> float:
        info = self.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def parse_addr(text: str) -> tuple[str, int] | None:
    if text == "off":
        return None
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def redis_reachable(addr: tuple[str, int] | None) -> str | None:
    """None if Redis answers PING at ``addr``, else why not."""
    if addr is None:
        return "Redis reference off (--redis off)"
    try:
        r = Resp(*addr, timeout=5)
        try:
            if r.call("PING") != "PONG":
                return f"no PONG from {addr[0]}:{addr[1]}"
        finally:
            r.close()
    except (OSError, RespError) as e:
        return f"no Redis at {addr[0]}:{addr[1]} ({e})"
    return None


def redis_key(part: str) -> str:
    return f"{KEY_PREFIX}:{os.getpid()}:{part}"


def redis_prefill(r: Resp, key: str, names: Sequence[str], seed: int) -> tuple[dict[str, float], Result]:
    """Every player in the sorted set with a random score; what that cost Redis in memory."""
    r.call("UNLINK", key)
    rng = np.random.default_rng(seed)
    scores = (1500.0 + 200.0 * rng.standard_normal(len(names))).tolist()
    before = int(r.info("memory")["used_memory"])
    step = 1000
    pending = 0
    buf: list[bytes] = []
    for lo in range(0, len(names), step):
        args: list[bytes | str | int | float] = ["ZADD", key]
        for s, n in zip(scores[lo : lo + step], names[lo : lo + step], strict=True):
            args += [s, n]
        buf.append(resp_command(*args))
        pending += 1
        if pending == 16:
            r.send(b"".join(buf))
            for _ in range(pending):
                r.reply()
            buf, pending = [], 0
    if pending:
        r.send(b"".join(buf))
        for _ in range(pending):
            r.reply()
    after = int(r.info("memory")["used_memory"])
    usage = r.call("MEMORY", "USAGE", key, "SAMPLES", "0")
    members = int(r.call("ZCARD", key))
    return dict(zip(names, scores, strict=True)), {
        "members": members,
        "used_memory_growth_bytes": after - before,
        "used_memory_bytes_per_member": round((after - before) / members, 1),
        "memory_usage_bytes_per_member": round(int(usage) / members, 1),
    }


def elo_scores(pairs: Sequence[tuple[str, str]], initial: dict[str, float]) -> list[tuple[float, float]]:
    """Both players' new scores after each kill (plain Elo, K = 24): what the reference stores."""
    r = dict(initial)
    out = []
    for a, v in pairs:
        ra = r.get(a, 1500.0)
        rv = r.get(v, 1500.0)
        d = 24.0 / (1.0 + 10.0 ** ((ra - rv) / 400.0))
        ra += d
        rv -= d
        r[a] = ra
        r[v] = rv
        out.append((ra, rv))
    return out


def redis_batches(
    key: str, pairs: Sequence[tuple[str, str]], scores: Sequence[tuple[float, float]], per_trip: int
) -> list[tuple[bytes, int]]:
    """``per_trip`` kills' ``ZADD key s_a a s_v v`` + ``ZREVRANK key a`` as one pipelined write,
    with the number of replies it gets."""
    out = []
    for lo in range(0, len(pairs), per_trip):
        cmds = [
            resp_command("ZADD", key, sa, a, sv, v) + resp_command("ZREVRANK", key, a)
            for (a, v), (sa, sv) in zip(pairs[lo : lo + per_trip], scores[lo : lo + per_trip], strict=True)
        ]
        out.append((b"".join(cmds), 2 * len(cmds)))
    return out


def redis_ingest(
    r: Resp, key: str, pairs: Sequence[tuple[str, str]], scores: Sequence[tuple[float, float]], per_trip: int
) -> Result:
    """Per kill ``ZADD key s_a a s_v v`` + ``ZREVRANK key a``; ``per_trip`` kills per round trip
    (0: unpipelined, every command its own round trip). Commands are encoded before timing."""
    n = len(pairs)
    cpu0 = r.cpu_seconds()
    if per_trip <= 0:
        zadd = [
            resp_command("ZADD", key, sa, a, sv, v) for (a, v), (sa, sv) in zip(pairs, scores, strict=True)
        ]
        rank = [resp_command("ZREVRANK", key, a) for a, _ in pairs]
        send, reply = r.send, r.reply
        t0 = time.perf_counter_ns()
        for z, k in zip(zadd, rank, strict=True):
            send(z)
            reply()
            send(k)
            reply()
        ns = time.perf_counter_ns() - t0
    else:
        batches = redis_batches(key, pairs, scores, per_trip)
        t0 = time.perf_counter_ns()
        for data, replies in batches:
            r.send(data)
            for _ in range(replies):
                r.reply()
        ns = time.perf_counter_ns() - t0
    cpu = r.cpu_seconds() - cpu0
    return {
        "events": n,
        "kills_per_round_trip": per_trip,
        "events_per_s": round(n / (ns / 1e9), 1),
        "redis_cpu_us_per_event": round(1e6 * cpu / n, 2),
    }


# ---------------------------------------------------------------------------- engine + memory
def engine_part(
    *, players: int, events: int, ref_events: int, unpipelined: int, redis: str, seed: int
) -> Result:
    """In a fresh interpreter: the engine on the stream, then openskill and Redis on its start."""
    cfg = StreamConfig(players=players, events=events, seed=seed)
    work = generate(cfg)
    gc.collect()
    rss0 = vm_rss()
    engine = Engine(ADRParams())
    warm_up(engine, work)
    gc.collect()
    rss1 = vm_rss()
    load0 = loadavg()
    timing = run_main(engine, work.events)
    out: Result = {
        "players": players,
        "events": events,
        "arenad": {
            "events_per_s": timing["throughput"]["events_per_s"],
            "apply_events_per_s": timing["throughput"]["apply_events_per_s"],
            "us_per_event": timing["throughput"]["us_per_event"],
            "latency_p99_us": round(timing["latency_ns"]["p99"] / 1000, 2),
            "recalibrations": timing["recalibration"]["count"],
            "rss_bytes_per_player": round((rss1 - rss0) / players, 1) if rss0 and rss1 else None,
            "loadavg_1m": [load0, loadavg()],
        },
    }
    del engine
    gc.collect()
    kills = [(a, v, t) for a, v, t in work.events[:ref_events] if a != v]
    ns = openskill_kills(kills, {})
    out["openskill"] = {"events": len(kills), "events_per_s": round(len(kills) / (ns / 1e9), 1)}
    addr = parse_addr(redis)
    why = redis_reachable(addr)
    if why is not None or addr is None:
        out["redis"] = {"error": why}
        return out
    r = Resp(*addr)
    key = redis_key(f"engine-{players}")
    try:
        initial, memory = redis_prefill(r, key, work.names, seed)
        pairs = [(a, v) for a, v, _ in kills]
        scores = elo_scores(pairs, initial)
        out["redis"] = {
            "memory": memory,
            "pipelined": redis_ingest(r, key, pairs, scores, 1000),
            "unpipelined": redis_ingest(r, key, pairs[:unpipelined], scores[:unpipelined], 0),
        }
    finally:
        r.call("UNLINK", key)
        r.close()
    return out


def openskill_memory(*, players: int) -> Result:
    """In a fresh interpreter: VmRSS growth of a dict of ``players`` PlackettLuceRating objects."""
    from openskill.models import PlackettLuce  # noqa: PLC0415  # only this child needs it

    names = player_names(players)
    model = PlackettLuce()
    gc.collect()
    rss0 = vm_rss()
    ratings = {n.encode().decode(): model.rating() for n in names}  # fresh name strings, as the engine's
    gc.collect()
    rss1 = vm_rss()
    return {"players": len(ratings), "rss_bytes_per_player": round((rss1 - rss0) / players, 1)}


# ---------------------------------------------------------------------------- end to end
def _mqtt_sink(*, port: int, topic: str, total: int, ready: Any, out: Connection, timeout: float) -> None:
    """A paho QoS 1 subscriber that counts events and reports when the last one arrived."""
    import paho.mqtt.client as paho  # noqa: PLC0415  # forked child
    from paho.mqtt.enums import CallbackAPIVersion  # noqa: PLC0415

    done = threading.Event()
    state = {"count": 0, "last": 0.0}

    def on_connect(client: paho.Client, userdata: Any, flags: Any, rc: Any, props: Any = None) -> None:
        client.subscribe(topic, qos=1)

    def on_subscribe(client: paho.Client, userdata: Any, mid: int, *args: Any) -> None:
        ready.set()

    def on_message(client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        state["count"] += len(msgpack.unpackb(msg.payload))
        if state["count"] >= total:
            state["last"] = time.monotonic()
            done.set()

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-scale-sink-{os.getpid()}")
    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.connect("127.0.0.1", port)
    client.loop_start()
    done.wait(timeout)
    client.loop_stop()
    client.disconnect()
    out.send((state["count"], state["last"]))


def mqtt_transport(broker: Broker, evs: list[dict[str, Any]], timeout: float) -> Result:
    """The same messages published as bench.daemon does, to a subscriber that only counts them."""
    topic = "arena/transport-1/kills"
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_mqtt_sink,
        kwargs={
            "port": broker.port,
            "topic": topic,
            "total": len(evs),
            "ready": ready,
            "out": sender,
            "timeout": timeout,
        },
    )
    proc.start()
    try:
        if not ready.wait(10):
            raise RuntimeError("the MQTT sink did not subscribe")
        t0 = time.monotonic()
        send_mqtt(broker.url, topic, evs)
        if not receiver.poll(timeout):
            raise RuntimeError("the MQTT sink did not report")
        count, last = receiver.recv()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return {"events": count, "events_per_s": round(count / (last - t0), 1) if last else None}


def e2e_part(sizes: Sizes, redis: str, workdir: Path, seed: int, log: Callable[[str], None]) -> Result:
    p, n = sizes.e2e_players, sizes.e2e_events
    out: Result = {"players": p, "events": n}
    log(f"[e2e] UDP: {p:,} players, {n:,} events")
    out["udp"] = run_one(p, n, None, workdir, "network")
    if mosquitto_binary() is None:
        out["mqtt"] = {"error": "mosquitto is not installed"}
    else:
        broker = Broker(workdir / "mosquitto-e2e", persistence=False, extra=["max_queued_messages 0"])
        broker.start()
        try:
            log(f"[e2e] MQTT QoS 1: {p:,} players, {n:,} events")
            out["mqtt"] = run_one(p, n, broker.url, workdir, "network")
            evs = stream(p, n, seed=7, t0=time.time() - 3600, workload="network")
            log("[e2e] MQTT transport alone (no daemon)")
            out["mqtt_transport"] = mqtt_transport(broker, evs, timeout=120 + n / 2000)
        finally:
            broker.stop()
    addr = parse_addr(redis)
    why = redis_reachable(addr)
    if why is not None or addr is None:
        out["redis"] = {"error": why}
        return out
    log(f"[e2e] Redis, {BATCH} kills per round trip")
    evs = stream(p, n, seed=7, t0=time.time() - 3600, workload="network")
    r = Resp(*addr)
    key = redis_key("e2e")
    try:
        initial, _ = redis_prefill(r, key, [f"player{i:06d}" for i in range(p)], seed)
        pairs = [(e["attacker"], e["victim"]) for e in evs]
        out["redis"] = redis_ingest(r, key, pairs, elo_scores(pairs, initial), BATCH)
    finally:
        r.call("UNLINK", key)
        r.close()
    return out


# ---------------------------------------------------------------------------- queries under load
def _paced(n: int, per_s: float, start_at: float, send: Callable[[int], None]) -> None:
    """``send(k)`` for k = 0..n-1, each at ``start_at + k / per_s`` (wakes every ~0.5 ms)."""
    k = 0
    while k < n:
        due = start_at + k / per_s
        now = time.monotonic()
        if now < due:
            time.sleep(min(0.0005, due - now))
            continue
        send(k)
        k += 1


def _udp_pacer(
    addr: tuple[str, int], datagrams: list[bytes], per_s: float, start_at: float, out: Connection
) -> None:
    """Datagram k at ``start_at + k / per_s``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)

        def send(k: int) -> None:
            s.sendto(datagrams[k], addr)

        _paced(len(datagrams), per_s, start_at, send)
        out.send(time.monotonic())


def _redis_pacer(
    addr: tuple[str, int], batches: list[tuple[bytes, int]], per_s: float, start_at: float, out: Connection
) -> None:
    """Pipelined batch k (its kills' ZADD + ZREVRANK) at ``start_at + k / per_s``; replies read."""
    r = Resp(*addr)

    def send(k: int) -> None:
        data, replies = batches[k]
        r.send(data)
        r.one_line_replies(replies)

    _paced(len(batches), per_s, start_at, send)
    r.close()
    out.send(time.monotonic())


async def _resp_read(reader: asyncio.StreamReader) -> bool:
    """One RESP reply; False if it is an error."""
    line = await reader.readline()
    kind = line[:1]
    if kind == b"*":
        ok = True
        for _ in range(max(0, int(line[1:-2]))):
            ok = await _resp_read(reader) and ok
        return ok
    if kind == b"$":
        size = int(line[1:-2])
        if size >= 0:
            await reader.readexactly(size + 2)
        return True
    return kind in (b":", b"+")


@dataclass(frozen=True, slots=True)
class QueryLoad:
    """What a query process does: ``conns`` connections, ``qps`` in all, get/top alternately.

    With ``parts`` > 1 this process is one of ``parts`` (its number ``part``) and takes every
    ``parts``-th request of the schedule, starting at ``part``.
    """

    kind: str  # "arenad" (JSON lines) or "redis" (RESP)
    addr: tuple[str, int]
    key: str  # the Redis sorted set
    names: list[str]  # players to get
    qps: float = QPS
    conns: int = QUERY_CONNS
    start_at: float = 0.0  # time.monotonic() of the first request
    seconds: float = 1.0
    part: int = 0
    parts: int = 1


def _requests(load: QueryLoad) -> list[bytes]:
    """The whole schedule's requests, get and top alternately (the same for every client)."""
    rng = random.Random(11)
    reqs: list[bytes] = []
    for j in range(int(load.qps * load.seconds)):
        if load.kind == "arenad":
            if j % 2 == 0:
                reqs.append(json.dumps({"op": "get", "player": rng.choice(load.names)}).encode() + b"\n")
            else:
                reqs.append(b'{"op": "top", "n": 10}\n')
        elif j % 2 == 0:
            reqs.append(resp_command("ZREVRANK", load.key, rng.choice(load.names)))
        else:
            reqs.append(resp_command("ZREVRANGE", load.key, 0, 9, "WITHSCORES"))
    return reqs


def build_qload(workdir: Path) -> Path | None:
    """Compile bench/qload.c (the C query client) into ``workdir``; None without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    exe = workdir / "qload"
    subprocess.run([cc, "-O2", "-o", str(exe), str(Path(__file__).with_name("qload.c"))], check=True)
    return exe


def _query_proc_c(load: QueryLoad, exe: str, out: Connection) -> None:
    """The query load through bench/qload.c: ``conns`` connections in one epoll loop."""
    try:
        reqs = _requests(load)
        with tempfile.TemporaryDirectory(prefix="arenad-qload-") as tmp:
            req_file = Path(tmp) / "requests"
            req_file.write_bytes(b"".join(struct.pack("<I", len(r)) + r for r in reqs))
            res_file = Path(tmp) / "latencies"
            proto = "line" if load.kind == "arenad" else "resp"
            # time.monotonic() is CLOCK_MONOTONIC on Linux, the clock qload schedules by.
            start_ns = str(int(load.start_at * 1e9))
            args = [exe, load.addr[0], str(load.addr[1]), proto, str(load.conns), str(load.qps), start_ns]
            done = subprocess.run(
                [*args, str(req_file), str(res_file)], timeout=load.seconds + 90, check=False
            )
            if done.returncode != 0:
                out.send({"error": f"qload exited with {done.returncode}"})
                return
            rows = np.fromfile(res_file, dtype=np.float64).reshape(-1, 3)
        out.send({"lat": rows[:, 0].tolist(), "lag": rows[:, 1].tolist(), "errors": int(rows[:, 2].sum())})
    except BaseException as e:
        out.send({"error": f"{type(e).__name__}: {e}"})


async def _query_clients(load: QueryLoad) -> Result:
    qps, conns, start_at = load.qps, load.conns, load.start_at
    kind = load.kind
    reqs = _requests(load)
    total = len(reqs)
    lat = [0.0] * total
    lag = [0.0] * total
    errors = [0]

    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection(*load.addr)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for j in range(load.part + i * load.parts, total, conns * load.parts):
                due = start_at + j / qps
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                t0 = time.monotonic()
                writer.write(reqs[j])
                if kind == "arenad":
                    line = await reader.readline()
                    ok = line.startswith((b'{"ok": true', b'{"ok":true'))
                else:
                    ok = await _resp_read(reader)
                t1 = time.monotonic()
                if not ok:
                    errors[0] += 1
                lat[j] = t1 - t0
                lag[j] = t1 - due
        finally:
            writer.close()

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(conns))), timeout=load.seconds + 60)
    return {"lat": lat, "lag": lag, "errors": errors[0]}


def _query_proc(load: QueryLoad, out: Connection) -> None:
    try:
        out.send(asyncio.run(_query_clients(load)))
    except BaseException as e:
        out.send({"error": f"{type(e).__name__}: {e}"})


def _pct(xs: Sequence[float]) -> Result:
    if not xs:
        return {}
    a = np.asarray(xs) * 1000.0
    q = np.percentile(a, [50.0, 99.0, 99.9])
    return {
        "n": len(xs),
        "p50_ms": round(float(q[0]), 3),
        "p99_ms": round(float(q[1]), 3),
        "p99.9_ms": round(float(q[2]), 3),
        "max_ms": round(float(a.max()), 3),
    }


def _latency_figures(res: Result, qps: float) -> Result:
    lat, lag = res["lat"], res["lag"]
    return {
        "qps_asked": qps,
        "queries": len(lat),
        "errors": res["errors"],
        "get": _pct(lat[0::2]),
        "top": _pct(lat[1::2]),
        "all": _pct(lat),
        "from_schedule": _pct(lag),
    }


def _loaded_run(
    ingest: Callable[..., None],
    ingest_args: tuple[Any, ...],
    query: QueryLoad,
    seconds: float,
    *,
    watch: Callable[[], None] | None = None,
    qload: Path | None = None,
) -> tuple[Result, float, float]:
    """Fork the ingesting process (``seconds`` of ingest) and the query process (all but the first
    and last half second) on one schedule; wait for both. Returns the latency figures and when
    the ingest started and ended (``time.monotonic()``)."""
    ctx = multiprocessing.get_context("fork")
    start_at = time.monotonic() + 0.5
    query = replace(query, start_at=start_at + 0.5, seconds=max(0.5, seconds - 1.0))
    i_recv, i_send = ctx.Pipe(duplex=False)
    ingester = ctx.Process(target=ingest, args=(*ingest_args, start_at, i_send))
    # The C client when it could be built: all connections in one epoll loop at microseconds per
    # reply. Otherwise one Python process per connection: in one asyncio loop, replies that arrive
    # together wait for each other's handling, which adds the client's own queueing to what is
    # measured (Redis with no ingest at all: p99 3.4 ms over 8 connections in one loop).
    queriers = []
    if qload is not None:
        parts = 1
        recv, send = ctx.Pipe(duplex=False)
        queriers.append((ctx.Process(target=_query_proc_c, args=(query, str(qload), send)), recv))
    else:
        parts = query.conns
        for part in range(parts):
            recv, send = ctx.Pipe(duplex=False)
            load = replace(query, conns=1, part=part, parts=parts)
            queriers.append((ctx.Process(target=_query_proc, args=(load, send)), recv))
    ingester.start()
    for proc, _ in queriers:
        proc.start()
    results: list[Result] = []
    try:
        deadline = time.monotonic() + seconds + 120
        while not i_recv.poll(0.25):
            if watch is not None:
                watch()
            if time.monotonic() > deadline:
                raise RuntimeError("the ingesting process did not finish")
        ended = float(i_recv.recv())
        for _, recv in queriers:
            if not recv.poll(max(1.0, deadline - time.monotonic())):
                raise RuntimeError("a query process did not report")
            results.append(recv.recv())
    finally:
        for proc in [ingester, *(q for q, _ in queriers)]:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    for res in results:
        if "error" in res:
            raise RuntimeError(f"query process: {res['error']}")
    merged: Result = {"lat": list(results[0]["lat"]), "lag": list(results[0]["lag"]), "errors": 0}
    for part, res in enumerate(results):
        merged["errors"] += res["errors"]
        merged["lat"][part::parts] = res["lat"][part::parts]
        merged["lag"][part::parts] = res["lag"][part::parts]
    return _latency_figures(merged, query.qps), start_at, ended


def pin_split() -> tuple[set[int], set[int]] | None:
    """(the server's CPU, the load generators' CPUs) when this process may use two or more."""
    cpus = sorted(os.sched_getaffinity(0))
    return ({cpus[0]}, set(cpus[1:])) if len(cpus) >= 2 else None


def pin_process(pid: int, cpus: set[int]) -> dict[int, set[int]]:
    """Every thread of ``pid`` onto ``cpus``; returns what each had, to restore."""
    before: dict[int, set[int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        tid = int(task.name)
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
    return before


def unpin(before: dict[int, set[int]]) -> None:
    for tid, cpus in before.items():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


@contextlib.contextmanager
def pinned(server_pid: int | None, split: tuple[set[int], set[int]] | None) -> Iterator[None]:
    """The server under test on one CPU ("targets on one core"), this process and the load
    generators it forks on the others, so neither steals the other's time slices."""
    if split is None or server_pid is None:
        yield
        return
    server_before = pin_process(server_pid, split[0])
    self_before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, split[1])
    try:
        yield
    finally:
        os.sched_setaffinity(0, self_before)
        unpin(server_before)


def query_part(
    sizes: Sizes,
    redis: str,
    workdir: Path,
    seed: int,
    log: Callable[[str], None],
    *,
    ingest: float = INGEST,
    pin: bool = True,
) -> Result:
    p = sizes.query_players
    seconds = sizes.query_seconds
    n = int(ingest * seconds)
    split = pin_split() if pin else None
    qload = build_qload(workdir)
    out: Result = {"players": p, "ingest_events_per_s": ingest, "qps": QPS, "connections": QUERY_CONNS}
    out["pinned"] = None if split is None else {"server": sorted(split[0]), "load": sorted(split[1])}
    out["client"] = "bench/qload.c" if qload is not None else "python, a process per connection"
    config = workdir / "arenad-query.toml"
    config.write_text("[query]\nrate_limit = 0\n", encoding="utf-8")
    d = DaemonProcess(workdir / "state-query", config=config)
    d.start()
    try:
        span = n / 200.0 + 60.0  # the stream's event time runs at 200 kills/s
        t_intro = time.time() - span - p * 0.001 - 600.0
        intro = [
            {"t": t_intro + i * 0.001, "attacker": f"player{i:06d}", "victim": f"player{(i + 1) % p:06d}"}
            for i in range(p)
        ]
        log(f"[query] introducing {p:,} players")
        send_udp(d, intro)
        d.wait_for(lambda s: s["journal_seq"] >= p, timeout=600)
        evs = stream(p, n, seed=seed, t0=t_intro + p * 0.001 + 1.0, workload="network")
        datagrams = [msgpack.packb(evs[k : k + BATCH]) for k in range(0, len(evs), BATCH)]
        names = [f"player{i:06d}" for i in range(p)]

        def decided(s: dict[str, Any]) -> int:
            return int(s["applied"] + s["filtered"] + sum(s["rejected"].values()))

        before = d.stats()
        base = decided(before)
        dropped0 = sum(before["dropped"].values())
        depth = [0]

        def watch() -> None:
            depth[0] = max(depth[0], int(d.stats()["queue_depth"]))

        log(f"[query] arenad: {ingest:,.0f} events/s over UDP + {QPS:,.0f} queries/s for {seconds:g} s")
        assert d.proc is not None
        with pinned(d.proc.pid, split):
            lat, start_at, ended = _loaded_run(
                _udp_pacer,
                (d.addr("udp"), datagrams, ingest / BATCH),
                QueryLoad("arenad", d.addr("query"), "", names),
                seconds,
                watch=watch,
                qload=qload,
            )
        at_end = decided(d.stats())
        # Wait until the daemon has decided on everything it took in: every event, or (when its
        # queue overflowed and UDP datagrams were dropped) until nothing moves any more.
        last = -1
        while True:
            s = d.stats()
            done = decided(s) - base + sum(s["dropped"].values()) - dropped0 >= len(evs)
            if done or (s["queue_depth"] == 0 and decided(s) == last):
                break
            if time.monotonic() - ended > 120:
                raise RuntimeError("the daemon did not drain its queue within 120 s")
            last = decided(s)
            time.sleep(0.05)
        drain_s = time.monotonic() - ended
        rated = decided(s) - base
        dropped = sum(s["dropped"].values()) - dropped0
        out["arenad"] = lat | {
            "events": len(evs),
            "sent_events_per_s": round(len(evs) / (ended - start_at), 1),
            "decided_by_last_datagram": at_end - base,
            "decided": rated,
            "decided_events_per_s": round(rated / (ended + drain_s - start_at), 1),
            "dropped_events": dropped,
            "dropped_share": round(dropped / len(evs), 4),
            "drain_after_last_datagram_s": round(drain_s, 3),
            "max_queue_depth_seen": depth[0],
        }
    finally:
        d.stop(60)
    addr = parse_addr(redis)
    why = redis_reachable(addr)
    if why is not None or addr is None:
        out["redis"] = {"error": why}
        return out
    r = Resp(*addr)
    key = redis_key("query")
    try:
        initial, _ = redis_prefill(r, key, names, seed)
        pairs = [(e["attacker"], e["victim"]) for e in evs]
        scores = elo_scores(pairs, initial)
        batches = redis_batches(key, pairs, scores, BATCH)
        log(f"[query] Redis: {ingest:,.0f} kills/s (ZADD+ZREVRANK) + {QPS:,.0f} queries/s for {seconds:g} s")
        redis_pid = int(r.info("server").get("process_id", 0)) or None
        if redis_pid is not None and not Path(f"/proc/{redis_pid}").exists():
            redis_pid = None  # another host or namespace: not ours to pin
        with pinned(redis_pid, split):
            lat, start_at, ended = _loaded_run(
                _redis_pacer,
                (addr, batches, ingest / BATCH),
                QueryLoad("redis", addr, key, names),
                seconds,
                qload=qload,
            )
        out["redis"] = lat | {
            "events": len(pairs),
            "sent_events_per_s": round(len(pairs) / (ended - start_at), 1),
        }
    finally:
        r.call("UNLINK", key)
        r.close()
    return out


# ---------------------------------------------------------------------------- restart
def build_restart_state(*, state_dir: str, players: int, tail: int, seed: int) -> Result:
    """In a fresh interpreter: a checkpoint of ``players`` players and a journal tail of ``tail``
    kills, written with the daemon's own checkpoint payload and the journal writer."""
    from arenad.daemon.history import load_scopes  # noqa: PLC0415  # only this child needs them
    from arenad.daemon.service import Daemon  # noqa: PLC0415
    from arenad.daemon.state import Checkpoints, Journal, Record  # noqa: PLC0415
    from arenad.scopes import ScopeConfig  # noqa: PLC0415
    from arenad.settings import Settings  # noqa: PLC0415

    t0 = time.perf_counter()
    # A few more kills than ``tail``: suicides (0.3 %) are refused at decoding and never journaled.
    work = generate(StreamConfig(players=players, events=tail + tail // 100 + 100, seed=seed))
    daemon = Daemon(Settings.from_mapping({"daemon": {"state_dir": state_dir}}))
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    engine = daemon.engine
    warm_up(engine, work)
    seq = len(work.warm_t)
    daemon.state.seq = seq
    daemon.state.applied = engine.applied
    ckpt = daemon.store.checkpoints.write(seq, daemon.state.checkpoint_payload(daemon.models.export_state()))
    journal = Journal(Path(state_dir))
    journal.open_segment(seq + 1)
    chunk: list[Record] = []
    written = 0
    for k, (a, v, t) in enumerate(work.events):
        if a == v:
            continue
        if written == tail:
            break
        written += 1
        chunk.append((seq + written, t, a, v, f"srv-{k % 64}", f"e{k}"))
        if len(chunk) == 64:
            journal.append(chunk)
            chunk = []
    if chunk:
        journal.append(chunk)
    journal.sync()
    path = journal.current_path
    journal.close()
    players = len(engine)
    # What the daemon's recovery does before the replay, timed here on its own.
    del daemon, engine
    gc.collect()
    c0 = time.perf_counter()
    load_scopes(Checkpoints.read(ckpt), ADRParams(), ScopeConfig())
    load_s = time.perf_counter() - c0
    return {
        "players": players,
        "checkpoint_seq": seq,
        "checkpoint_bytes": ckpt.stat().st_size,
        "journal_records": written,
        "journal_bytes": path.stat().st_size if path is not None else 0,
        "build_s": round(time.perf_counter() - t0, 1),
        "checkpoint_read_and_load_s": round(load_s, 3),
    }


def other_benchmarks() -> list[str]:
    """Command lines of other ``python -m bench...`` processes (not this one, its ancestors or its
    children)."""
    me = os.getpid()
    mine = {me}
    pid = os.getppid()
    while pid > 1 and pid not in mine:
        mine.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me:
            continue
        for k, arg in enumerate(argv[:-1]):
            if arg == b"-m" and argv[k + 1].startswith(b"bench"):
                found.append(" ".join(a.decode(errors="replace") for a in argv if a))
                break
    return sorted(found)


def _proc_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure_restart(state_dir: Path, timeout: float) -> Result:
    """A real ``arenad run`` on the state: seconds from Popen until /healthz answers 200."""
    port = free_port()
    daemon_harness.STARTUP_TIMEOUT = timeout  # the harness waits for "arenad_started" this long
    d = DaemonProcess(state_dir, extra=["--metrics", f"127.0.0.1:{port}"])
    seen: dict[str, float] = {}
    stop = threading.Event()

    def poll() -> None:
        url = f"http://127.0.0.1:{port}/healthz"
        while not stop.is_set() and time.monotonic() - t0 < timeout:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        seen["ready"] = time.monotonic() - t0
                        return
            except urllib.error.HTTPError:
                seen.setdefault("metrics_up", time.monotonic() - t0)  # 503 while loading
            except OSError:
                pass
            time.sleep(0.01)

    t0 = time.monotonic()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()  # polls from t0, taken just before: the daemon's Popen comes within microseconds
    try:
        d.start()
        started = time.monotonic() - t0
        poller.join(timeout)
        pid = d.proc.pid if d.proc is not None else 0
        rss = _proc_rss(pid)
        stats = d.stats()
        loaded: Result = {}
        for line in d.log_lines:
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec.get("event") == "state_loaded":
                    loaded = rec
    finally:
        stop.set()
        d.stop(300)
    return {
        "ready_s": round(seen["ready"], 3) if "ready" in seen else None,
        "metrics_up_s": round(seen["metrics_up"], 3) if "metrics_up" in seen else None,
        "started_log_s": round(started, 3),
        "state_loaded_s": loaded.get("seconds"),
        "replayed": loaded.get("replayed"),
        "players": stats.get("players"),
        "daemon_rss_bytes": rss,
    }


def restart_part(sizes: Sizes, workdir: Path, seed: int, log: Callable[[str], None]) -> Result:
    state = workdir / "state-restart"
    log(f"[restart] building a state dir: {sizes.restart_players:,} players + {sizes.restart_tail:,} journal")
    built = in_fresh_interpreter(
        build_restart_state,
        900,
        state_dir=str(state),
        players=sizes.restart_players,
        tail=sizes.restart_tail,
        seed=seed,
    )
    log(f"[restart] built in {built['build_s']} s; starting arenad on it")
    return {"state": built, "arenad": measure_restart(state, timeout=300)}


# ---------------------------------------------------------------------------- the table
TARGETS = {
    "engine_100k": 150_000.0,
    "engine_1m": 80_000.0,
    "udp": 100_000.0,
    "mqtt": 30_000.0,
    "query_p99_ms": 1.0,
    "memory": 400.0,
    "restart_s": 15.0,
}


def _k(x: Any) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _sub(total: float | None, *parts: float | None) -> str:
    if total is None or any(x is None for x in parts):
        return "?"
    return f"{total - sum(x for x in parts if x is not None):.1f}"


def _met(ok: bool | None, full: bool, quick: bool = False) -> str:
    """yes / no, or n/a when the run was not at the target's size (``full`` false)."""
    if ok is None:
        return "n/a"
    if not full:
        return "n/a (quick)" if quick else "n/a (not the target's size)"
    return "yes" if ok else "**no**"


def _err(part: Result | None) -> str | None:
    if part is None:
        return "not run"
    return str(part["error"]) if "error" in part else None


def table(report: Result) -> list[str]:
    quick = bool(report["quick"])

    def met(ok: bool | None, at_size: bool = True) -> str:
        return _met(ok, at_size and not quick, quick)

    rows: list[tuple[str, str, str, str]] = []
    for e in report.get("engine", []):
        p = e.get("players", 0)
        target = TARGETS["engine_1m"] if p >= 1_000_000 else TARGETS["engine_100k"]
        if "error" in e:
            rows.append((f"engine alone at {p:,} players", e["error"], "", "n/a"))
            continue
        a = e["arenad"]
        red = e.get("redis", {})
        ref = f"openskill rate(): {_k(e['openskill']['events_per_s'])}/s"
        if "error" in red:
            ref += f"; Redis: {red['error']}"
        else:
            pip, unp = red["pipelined"], red["unpipelined"]
            ref += (
                f"; Redis ZADD×2+ZREVRANK: pipelined {_k(pip['events_per_s'])}/s, unpipelined "
                f"{_k(unp['events_per_s'])}/s (Redis CPU {pip['redis_cpu_us_per_event']} µs/kill)"
            )
        size_ok = p in (100_000, 1_000_000)
        rows.append(
            (
                f"engine alone ≥ {target:,.0f} events/s at {p:,} players",
                f"{_k(a['events_per_s'])} events/s ({e['events']:,} events)",
                ref,
                met(a["events_per_s"] >= target, size_ok),
            )
        )
    e2e = report.get("e2e")
    if e2e is not None and "error" not in e2e:
        red = e2e.get("redis", {})
        red_txt = (
            f"Redis, {BATCH} kills per round trip: {_k(red['events_per_s'])}/s"
            if "error" not in red
            else red["error"]
        )
        u = e2e["udp"]
        rows.append(
            (
                f"UDP end to end ≥ {TARGETS['udp']:,.0f} events/s ({e2e['players']:,} players)",
                f"{_k(u['events_per_s'])} events/s (dropped {sum(u['dropped'].values())})",
                red_txt,
                met(u["events_per_s"] >= TARGETS["udp"]),
            )
        )
        m = e2e.get("mqtt", {})
        if "error" in m:
            rows.append((f"MQTT QoS 1 end to end ≥ {TARGETS['mqtt']:,.0f} events/s", m["error"], "", "n/a"))
        else:
            tr = e2e.get("mqtt_transport", {})
            rows.append(
                (
                    f"MQTT QoS 1 end to end ≥ {TARGETS['mqtt']:,.0f} events/s ({e2e['players']:,} players)",
                    f"{_k(m['events_per_s'])} events/s",
                    f"transport alone (mosquitto → paho subscriber, no rating): "
                    f"{_k(tr.get('events_per_s'))}/s; {red_txt}",
                    met(m["events_per_s"] >= TARGETS["mqtt"]),
                )
            )
    elif e2e is not None:
        rows.append(("end to end (UDP, MQTT)", e2e["error"], "", "n/a"))
    q = report.get("query")
    if q is not None and "error" not in q:
        a = q["arenad"]
        red = q.get("redis", {})
        if "error" in red:
            red_txt = red["error"]
        else:
            red_txt = (
                f"Redis ZREVRANK p99 {red['get']['p99_ms']} ms, ZREVRANGE 0 9 p99 {red['top']['p99_ms']} ms "
                f"(ingesting {_k(red['sent_events_per_s'])} kills/s)"
            )
        kept_up = a["drain_after_last_datagram_s"] < 1.0 and a["dropped_events"] == 0
        worst = max(a["get"]["p99_ms"], a["top"]["p99_ms"])
        ingest_txt = (
            f"all rated, queue drained {a['drain_after_last_datagram_s']} s after the last datagram"
            if kept_up
            else f"daemon rated {_k(a['decided_events_per_s'])}/s, dropped {100 * a['dropped_share']:.0f} % "
            "(queue full)"
        )
        rows.append(
            (
                f"get/top p99 ≤ 1 ms at {q['qps']:,.0f} queries/s while ingesting "
                f"{q['ingest_events_per_s']:,.0f} events/s ({q['players']:,} players)",
                f"get p99 {a['get']['p99_ms']} ms, top p99 {a['top']['p99_ms']} ms "
                f"(p50 {a['all']['p50_ms']} ms); ingest {_k(a['sent_events_per_s'])}/s sent: {ingest_txt}",
                red_txt,
                met(worst <= TARGETS["query_p99_ms"] and kept_up, q["ingest_events_per_s"] >= INGEST),
            )
        )
    elif q is not None:
        rows.append(("get/top p99 under load", q["error"], "", "n/a"))
    engines = [e for e in report.get("engine", []) if "error" not in e]
    if engines:
        big = max(engines, key=lambda e: int(e["players"]))
        b = big["arenad"]["rss_bytes_per_player"]
        red = big.get("redis", {})
        osk = report.get("openskill_memory", {})
        ref = (
            f"Redis sorted set: used_memory {red['memory']['used_memory_bytes_per_member']} B/member, "
            f"MEMORY USAGE {red['memory']['memory_usage_bytes_per_member']} B/member"
            if "memory" in red
            else str(red.get("error"))
        )
        if "rss_bytes_per_player" in osk:
            ref += f"; openskill dict of ratings: {osk['rss_bytes_per_player']} B/player (RSS)"
        rows.append(
            (
                f"memory ≤ 400 bytes per player at {big['players']:,} players (RSS growth)",
                f"{b} bytes/player",
                ref,
                met(None if b is None else b <= TARGETS["memory"], big["players"] >= 1_000_000),
            )
        )
    rs = report.get("restart")
    if rs is not None and "error" not in rs:
        a, st = rs["arenad"], rs["state"]
        ready = a["ready_s"]
        rows.append(
            (
                f"restart ≤ 15 s with {st['players']:,} players "
                f"+ {st['journal_records']:,}-event journal tail",
                f"ready (/healthz 200) after {ready} s: start-up {a['metrics_up_s']} s, state loaded "
                f"{a['state_loaded_s']} s (checkpoint read + load ≈ {st['checkpoint_read_and_load_s']} s, "
                f"the rest the journal replay), then the initial checkpoint "
                f"{_sub(ready, a['metrics_up_s'], a['state_loaded_s'])} s; "
                f"RSS {a['daemon_rss_bytes'] / 2**20:,.0f} MiB",
                "none comparable (Redis RDB/AOF load is other work)",
                met(None if ready is None else ready <= TARGETS["restart_s"], st["players"] >= 1_000_000),
            )
        )
    elif rs is not None:
        rows.append(("restart", rs["error"], "", "n/a"))
    lines = ["| target | arenad measured | reference measured | met? |", "| --- | --- | --- | --- |"]
    lines += [f"| {t} | {a} | {r} | {m} |" for t, a, r, m in rows]
    return lines


def format_report(report: Result) -> str:
    m = report["machine"]
    e = report["engine_version"]
    head = [
        "arenad scale targets (issue 7)"
        + (" - QUICK smoke run, not the target sizes" if report["quick"] else ""),
        f"commit {e.get('git_commit')}{' + uncommitted arenad/ changes' if e.get('arenad_dirty') else ''}; "
        f"Python {m['python']}, {m['cpu']}, {m['cores']} cores; load average {report['loadavg_1m']}",
        "",
    ]
    others = report.get("other_benchmarks_seen") or []
    if others:
        head.insert(2, "WARNING: other benchmarks ran meanwhile (not a quiet machine): " + "; ".join(others))
    else:
        head.insert(2, "no other `python -m bench...` process seen between parts")
    return "\n".join([*head, *table(report), "", f"total {report['total_s']:.0f} s"])


# ---------------------------------------------------------------------------- main
PARTS = ("engine", "e2e", "query", "restart")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run on small sizes (~25 s)")
    ap.add_argument("--json", action="store_true", help="end with one line of JSON holding every figure")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    ap.add_argument("--redis", default="127.0.0.1:6379", help='Redis for the references, or "off"')
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--query-players", type=int, default=None, help="players of the query part (default 100,000)"
    )
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="query part: leave CPU placement to the scheduler (default: server on 1 CPU, load on the rest)",
    )
    ap.add_argument(
        "--ingest", type=float, default=INGEST, help="events/s ingested in the query part (50,000)"
    )
    args = ap.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    if not parts or any(x not in PARTS for x in parts):
        ap.error(f"--parts must name some of {', '.join(PARTS)}")
    sizes = QUICK if args.quick else FULL
    if args.query_players is not None:
        sizes = replace(sizes, query_players=args.query_players)
    log = _stderr
    started = time.perf_counter()
    report: Result = {
        "bench": "arenad.scale",
        "quick": args.quick,
        "command": "python -m bench.scale " + " ".join(sys.argv[1:] if argv is None else argv),
        "unix_time": int(time.time()),
        "machine": machine(),
        "engine_version": engine_version(),
        "targets": TARGETS,
        "sizes": {k: getattr(sizes, k) for k in Sizes.__slots__},
    }
    loads: list[float | None] = []
    competing: set[str] = set()

    def look() -> None:  # between parts: the load average and any other benchmark running
        loads.append(loadavg())
        competing.update(other_benchmarks())

    look()
    workdir = Path(tempfile.mkdtemp(prefix="arenad-scale-"))
    failed = False
    try:
        if "engine" in parts:
            report["engine"] = []
            for p, n in zip(sizes.engine_players, sizes.engine_events, strict=True):
                log(
                    f"[engine] {p:,} players, {n:,} events "
                    f"(+ openskill and Redis on the first {sizes.ref_events:,})"
                )
                try:
                    r = in_fresh_interpreter(
                        engine_part,
                        1200,
                        players=p,
                        events=n,
                        ref_events=sizes.ref_events,
                        unpipelined=sizes.unpipelined_events,
                        redis=args.redis,
                        seed=args.seed,
                    )
                except Exception as exc:
                    failed = True
                    r = {"players": p, "error": f"{type(exc).__name__}: {exc}"}
                report["engine"].append(r)
                look()
            big = max(sizes.engine_players)
            log(f"[memory] openskill: a dict of {big:,} ratings")
            try:
                report["openskill_memory"] = in_fresh_interpreter(openskill_memory, 600, players=big)
            except Exception as exc:
                report["openskill_memory"] = {"error": f"{type(exc).__name__}: {exc}"}
        runs: list[tuple[str, Callable[[], Result]]] = [
            ("e2e", lambda: e2e_part(sizes, args.redis, workdir, args.seed, log)),
            (
                "query",
                lambda: query_part(
                    sizes, args.redis, workdir, args.seed, log, ingest=args.ingest, pin=not args.no_pin
                ),
            ),
            ("restart", lambda: restart_part(sizes, workdir, args.seed, log)),
        ]
        for name, run in runs:
            if name not in parts:
                continue
            try:
                report[name] = run()
            except Exception as exc:
                failed = True
                report[name] = {"error": f"{type(exc).__name__}: {exc}"}
            look()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["loadavg_1m"] = [x for x in loads if x is not None]
    report["other_benchmarks_seen"] = sorted(competing)
    report["total_s"] = round(time.perf_counter() - started, 1)
    print(format_report(report))
    if args.json:
        print(json.dumps(report, separators=(",", ":"), allow_nan=False, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
