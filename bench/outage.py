"""Broker outage soak: ``python -m bench.outage [--minutes 3]``.

A real mosquitto (persistence on, on a free loopback port), a real ``arenad run`` subscribed with
QoS 1, and a publisher sending one kill per QoS 1 message at a steady ``--rate``. The publisher is
a paho client with a persistent session (``clean_session=False``) that reconnects by itself: while
the broker is down its messages wait in paho's outgoing queue and go out when the broker is back.

Timeline: publish for ``--before`` seconds, stop the broker cleanly (SIGTERM: it saves sessions and
queued messages to its persistence file), keep it down for ``--minutes``, start it again on the same
port with the same persistence file, keep publishing for ``--after`` seconds, wait for every PUBACK,
wait until the daemon has journaled every event, stop the daemon (SIGTERM). Then verify:

* every event the publisher got a PUBACK for, and every event it queued while the broker was down,
  is journaled exactly once: the whole history (``History(state_dir).records()``: the archive and
  the journal, no gap in sequence numbers) holds each published id once, and nothing else;
* ``journal_seq`` (query ``stats``) equals the number of events published;
* ``arenad_mqtt_disconnects_total`` >= 1 and ``arenad_mqtt_disconnected_seconds_total`` (its growth
  over the outage) is about the broker's downtime (plus the daemon's reconnect backoff, at most
  ``--reconnect-max`` seconds);
* ``/healthz`` answered 200 throughout the outage.

Prints a table of figures; ``--json`` adds one line of JSON. Exit status 1 if a check fails.
The daemon runs with its default settings except ``[mqtt] reconnect_max`` (``--reconnect-max``,
default 2 s; arenad's default is 30 s, which would add up to 30 s to the measured outage). The
broker gets ``max_queued_messages 1000000``: after the restart the publisher flushes its backlog
faster than the daemon reconnects, and mosquitto's default per-client queue of 1,000 would drop the
rest (an operator setting, see arenad/daemon/sources/mqtt.py).

``Broker`` is also what ``bench.scale`` uses for its MQTT measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from arenad.daemon.history import History

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from daemon_harness import DaemonProcess

TOPIC = "arena/eu-1/kills"
#: paho numbers QoS 1 messages 1..65535 and keys its outgoing queue by that number: a run must
#: publish fewer messages than that for the acknowledgement bookkeeping here to be exact.
MAX_MESSAGES = 65_000
PLAYERS = 1_000


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- mosquitto
def mosquitto_binary() -> str | None:
    found = shutil.which("mosquitto")
    if found is None and os.access("/usr/sbin/mosquitto", os.X_OK):
        found = "/usr/sbin/mosquitto"
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Broker:
    """One mosquitto on a fixed free loopback port; ``stop()`` then ``start()`` restarts the same
    broker (same port, same persistence file), as tests/daemon/conftest.py's ``Mosquitto`` does."""

    host = "127.0.0.1"

    def __init__(self, workdir: Path, *, persistence: bool = True, extra: Sequence[str] = ()) -> None:
        binary = mosquitto_binary()
        if binary is None:
            raise RuntimeError("mosquitto is not installed (apt-get install mosquitto)")
        self.binary = binary
        self.workdir = workdir
        self.persistence = persistence
        self.extra = list(extra)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    def _config(self) -> Path:
        # As root, mosquitto would drop to user "mosquitto" and could not write its persistence
        # file in our temporary directory.
        user = pwd.getpwuid(os.getuid()).pw_name
        lines = [
            f"user {user}",
            f"listener {self.port} {self.host}",
            "allow_anonymous true",
            f"persistence {'true' if self.persistence else 'false'}",
            f"persistence_location {self.workdir}/",
            f"log_dest file {self.workdir / 'mosquitto.log'}",
            *self.extra,
        ]
        path = self.workdir / "mosquitto.conf"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def start(self, timeout: float = 10.0) -> None:
        """Start (or restart) and wait until the port accepts connections."""
        if self.proc is not None:
            raise RuntimeError("broker already running")
        proc = subprocess.Popen(
            [self.binary, "-c", str(self._config())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.proc = proc
        deadline = time.monotonic() + timeout
        while not self._accepts():
            if proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"mosquitto exited with {proc.returncode} at start")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mosquitto did not listen on {self.port} within {timeout} s")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        """Clean shutdown (SIGTERM: the broker saves sessions and queued messages); idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def _accepts(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.5):
            return True
        return False


# ---------------------------------------------------------------------------- the publisher
class Publisher(threading.Thread):
    """``total`` kills, ``batch`` per QoS 1 message, at ``rate`` events/s, then every PUBACK.

    Persistent session and automatic reconnects: a message published while the broker is away
    waits in paho's queue. PUBACKs are counted by ``on_publish`` (``wait_for_publish`` raises for
    a message published while disconnected although paho keeps and later sends it).
    """

    def __init__(
        self, port: int, *, total: int, rate: float, batch: int, seed: int, ack_timeout: float
    ) -> None:
        super().__init__(daemon=True)
        self.total = total
        self.rate = rate
        self.batch = batch
        self.ack_timeout = ack_timeout
        self.rng = random.Random(seed)
        self.names = [f"soak{i:05d}" for i in range(PLAYERS)]
        #: Per message: its event ids, its mid, and whether paho was connected when it was published.
        self.messages: list[tuple[list[str], int, bool]] = []
        self.published = 0  # events handed to paho so far
        self.error: BaseException | None = None
        self.done_publishing = threading.Event()
        self.all_acked = False
        self._acked: set[int] = set()
        self._cond = threading.Condition()
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=f"arenad-outage-pub-{time.time_ns()}", clean_session=False
        )
        self.client.reconnect_delay_set(min_delay=1, max_delay=1)  # seconds (paho takes integers)
        self.client.max_queued_messages_set(0)  # unbounded outgoing queue (paho's default)
        self.client.on_publish = self._on_publish
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, *args: Any) -> None:
        with self._cond:
            self._acked.add(mid)
            self._cond.notify_all()

    def _event(self, k: int) -> dict[str, Any]:
        a, v = self.rng.sample(self.names, 2)
        return {"t": time.time(), "attacker": a, "victim": v, "id": f"soak-{k}"}

    def run(self) -> None:
        try:
            started = time.monotonic()
            for lo in range(0, self.total, self.batch):
                evs = [self._event(k) for k in range(lo, min(lo + self.batch, self.total))]
                payload = msgpack.packb(evs[0] if len(evs) == 1 else evs)
                connected = self.client.is_connected()
                info = self.client.publish(TOPIC, payload, qos=1)
                self.messages.append(([e["id"] for e in evs], info.mid, connected))
                self.published += len(evs)
                ahead = self.published / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)  # the pace of the load
            self.done_publishing.set()
            with self._cond:
                self.all_acked = self._cond.wait_for(
                    lambda: all(m[1] in self._acked for m in self.messages), self.ack_timeout
                )
        except BaseException as e:  # reported by finish()
            self.error = e
        finally:
            self.done_publishing.set()
            self.client.loop_stop()
            self.client.disconnect()

    def finish(self, timeout: float) -> None:
        self.join(timeout)
        if self.is_alive():
            raise RuntimeError("publisher did not finish")
        if self.error is not None:
            raise self.error

    def acked_ids(self) -> set[str]:
        with self._cond:
            return {i for ids, mid, _ in self.messages if mid in self._acked for i in ids}

    def queued_while_down_ids(self) -> set[str]:
        return {i for ids, _mid, connected in self.messages if not connected for i in ids}


# ---------------------------------------------------------------------------- helpers
def healthz(d: DaemonProcess) -> int:
    host, port = d.addr("metrics")
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def wait_until(predicate: Any, timeout: float, step: float = 0.05) -> float | None:
    """Poll ``predicate()`` until true; seconds it took, or None on timeout."""
    t0 = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            return None
        time.sleep(step)


def journaled_ids(state_dir: Path) -> tuple[list[str | None], int]:
    """Event ids of every journaled kill in sequence order (archive + journal), and the last seq."""
    ids: list[str | None] = []
    last = 0
    for rec in History(state_dir).records():
        if isinstance(rec, tuple):
            ids.append(rec[5])
            last = rec[0]
    return ids, last


# ---------------------------------------------------------------------------- the soak
def soak(args: argparse.Namespace, workdir: Path, log: Any = _stderr) -> dict[str, Any]:
    outage_s = args.minutes * 60.0
    total = round(args.rate * (args.before + outage_s + args.after))
    broker = Broker(workdir / "mosquitto", persistence=True, extra=["max_queued_messages 1000000"])
    config = workdir / "arenad.toml"
    config.write_text(f"[mqtt]\nreconnect_max = {args.reconnect_max}\n", encoding="utf-8")
    d = DaemonProcess(workdir / "state", config=config)
    result: dict[str, Any] = {
        "minutes": args.minutes,
        "rate_events_per_s": args.rate,
        "events_per_message": args.batch,
        "before_s": args.before,
        "after_s": args.after,
        "reconnect_max_s": args.reconnect_max,
        "events": total,
    }
    pub: Publisher | None = None
    try:
        broker.start()
        d.start(mqtt=broker.url)
        if wait_until(lambda: d.stats()["mqtt_connected"], 30) is None:
            raise RuntimeError("the daemon did not connect to the broker")
        pub = Publisher(
            broker.port, total=total, rate=args.rate, batch=args.batch, seed=args.seed,
            ack_timeout=120 + total / 500,
        )  # fmt: skip
        pub.start()
        log(f"publishing {total:,} events at {args.rate:g}/s; broker stops in {args.before:g} s")
        time.sleep(args.before)
        down_before = d.metric("arenad_mqtt_disconnected_seconds_total")
        disconnects_before = d.metric("arenad_mqtt_disconnects_total")
        seq_at_stop = int(d.stats()["journal_seq"])
        t_stop = time.monotonic()
        broker.stop()
        t_stopped = time.monotonic()
        noticed = wait_until(lambda: not d.stats()["mqtt_connected"], 30)
        log(f"broker stopped (journal_seq {seq_at_stop:,}); down for {outage_s:g} s")
        health: Counter[int] = Counter()
        queries_ok = 0
        while time.monotonic() - t_stopped < outage_s:
            health[healthz(d)] += 1
            if d.stats()["journal_seq"] >= 0:
                queries_ok += 1
            time.sleep(min(1.0, max(0.0, outage_s - (time.monotonic() - t_stopped))))
        published_at_restart = pub.published
        broker.start()
        t_started = time.monotonic()
        reconnect = wait_until(lambda: d.stats()["mqtt_connected"], 60, step=0.02)
        backlog = wait_until(lambda: d.stats()["journal_seq"] >= published_at_restart, 300, step=0.1)
        log(f"broker back; daemon reconnected after {reconnect} s; backlog journaled after {backlog} s")
        pub.finish(timeout=args.after + 300 + total / 500)
        log("publisher done; waiting for the daemon to journal everything")
        caught_up = wait_until(lambda: d.stats()["journal_seq"] >= total, 300, step=0.1)
        time.sleep(0.5)  # any late duplicate would be journaled (or rejected) by now
        stats = d.stats()
        metrics = d.metrics()
        down_total = d.metric("arenad_mqtt_disconnected_seconds_total")
        disconnects = d.metric("arenad_mqtt_disconnects_total")
        duplicates = d.metric("arenad_events_rejected_total", 'reason="duplicate_id"')
        received = d.series("arenad_events_received_total", "source", metrics).get("mqtt", 0.0)
        code = d.stop(120)
        ids, last_seq = journaled_ids(d.state_dir)
        counts = Counter(ids)
        published = {f"soak-{k}" for k in range(total)}
        acked = pub.acked_ids()
        queued = pub.queued_while_down_ids()
        twice = sorted(i for i, c in counts.items() if c > 1 and i is not None)
        result |= {
            "published": pub.published,
            "acked": len(acked),
            "all_acked": pub.all_acked,
            "queued_while_broker_down": len(queued),
            "journal_seq": int(stats["journal_seq"]),
            "journaled_records": len(ids),
            "history_last_seq": last_seq,
            "journaled_twice": len(twice),
            "acked_missing": len(acked - set(counts)),
            "queued_missing": len(queued - set(counts)),
            "published_missing": len(published - set(counts)),
            "unknown_journaled": len(set(counts) - published),
            "duplicates_rejected_by_id": duplicates,
            "mqtt_events_received": received,
            "dropped": stats["dropped"],
            "broker_down_s": round(t_started - t_stopped, 3),
            "broker_stop_s": round(t_stopped - t_stop, 3),
            "daemon_noticed_s": None if noticed is None else round(noticed, 3),
            "reconnect_after_restart_s": None if reconnect is None else round(reconnect, 3),
            "backlog_journaled_after_restart_s": None if backlog is None else round(backlog, 3),
            "all_journaled_after_publisher_s": None if caught_up is None else round(caught_up, 3),
            "mqtt_disconnected_seconds_growth": round(down_total - down_before, 3),
            "mqtt_disconnected_seconds_total": round(down_total, 3),
            "mqtt_disconnects_growth": disconnects - disconnects_before,
            "mqtt_disconnects_total": disconnects,
            "healthz_during_outage": {str(k): v for k, v in sorted(health.items())},
            "stats_answered_during_outage": queries_ok,
            "daemon_exit": code,
        }
    finally:
        if pub is not None and pub.is_alive():
            pub.client.loop_stop()
        d.kill()
        broker.stop()
    checks = {
        "every acked event journaled": result["acked_missing"] == 0,
        "every event queued during the outage journaled": result["queued_missing"] == 0,
        "every published event journaled": result["published_missing"] == 0,
        "no event journaled twice": result["journaled_twice"] == 0,
        "nothing else journaled": result["unknown_journaled"] == 0,
        "journal_seq = events published": result["journal_seq"] == total == result["history_last_seq"],
        "every PUBACK arrived": bool(result["all_acked"]),
        "arenad_mqtt_disconnects_total >= 1": result["mqtt_disconnects_total"] >= 1,
        "disconnected seconds ~ the outage": (
            result["broker_down_s"] - 1.0
            <= result["mqtt_disconnected_seconds_growth"]
            <= result["broker_down_s"] + args.reconnect_max + 2.0
        ),
        "/healthz 200 throughout the outage": set(result["healthz_during_outage"]) == {"200"},
        "clean daemon exit": result["daemon_exit"] == 0,
    }
    result["checks"] = checks
    result["ok"] = all(checks.values())
    return result


def format_result(r: dict[str, Any]) -> str:
    rows = [
        ("outage requested", f"{r['minutes']:g} min ({r['minutes'] * 60:.0f} s)"),
        ("broker down (stop returned -> start accepting)", f"{r['broker_down_s']:.2f} s"),
        ("arenad_mqtt_disconnected_seconds_total growth", f"{r['mqtt_disconnected_seconds_growth']:.2f} s"),
        ("arenad_mqtt_disconnects_total (growth)",
         f"{r['mqtt_disconnects_total']:.0f} ({r['mqtt_disconnects_growth']:+.0f})"),
        ("daemon noticed the broker gone after", f"{r['daemon_noticed_s']} s"),
        ("daemon reconnected after broker start", f"{r['reconnect_after_restart_s']} s"),
        ("backlog journaled after broker start", f"{r['backlog_journaled_after_restart_s']} s"),
        ("events published (rate, per message)",
         f"{r['published']:,} ({r['rate_events_per_s']:g}/s, {r['events_per_message']})"),
        ("  queued in paho while the broker was down", f"{r['queued_while_broker_down']:,}"),
        ("  PUBACKed", f"{r['acked']:,}"),
        ("journal_seq / records in history", f"{r['journal_seq']:,} / {r['journaled_records']:,}"),
        ("  journaled twice / missing / unknown",
         f"{r['journaled_twice']} / {r['published_missing']} / {r['unknown_journaled']}"),
        ("redeliveries refused by id (duplicate_id)", f"{r['duplicates_rejected_by_id']:.0f}"),
        ("MQTT events received (incl. redeliveries)", f"{r['mqtt_events_received']:,.0f}"),
        ("/healthz during the outage (status: polls)", json.dumps(r["healthz_during_outage"])),
    ]  # fmt: skip
    w = max(len(k) for k, _ in rows)
    lines = ["arenad broker outage soak (real mosquitto, real daemon, QoS 1)", ""]
    lines += [f"{k:<{w}}  {v}" for k, v in rows]
    lines.append("")
    lines += [f"{'ok  ' if ok else 'FAIL'} {name}" for name, ok in r["checks"].items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.outage", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="broker downtime in minutes (default 3)")
    ap.add_argument("--rate", type=float, default=200.0, help="events per second published (default 200)")
    ap.add_argument("--batch", type=int, default=1, help="events per QoS 1 message (default 1)")
    ap.add_argument("--before", type=float, default=20.0, help="seconds of publishing before the outage")
    ap.add_argument("--after", type=float, default=20.0, help="seconds of publishing after the restart")
    ap.add_argument("--reconnect-max", type=float, default=2.0, help="the daemon's [mqtt] reconnect_max")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = ap.parse_args(argv)
    if args.minutes < 0 or args.rate <= 0 or args.batch < 1 or args.before < 0 or args.after < 0:
        ap.error("--minutes, --before, --after must be >= 0; --rate > 0; --batch >= 1")
    messages = args.rate * (args.before + args.minutes * 60 + args.after) / args.batch
    if messages > MAX_MESSAGES:
        ap.error(f"{messages:,.0f} messages: more than {MAX_MESSAGES:,}; raise --batch or lower --rate")
    workdir = Path(tempfile.mkdtemp(prefix="arenad-outage-"))
    try:
        result = soak(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(format_result(result))
    if args.json:
        print(json.dumps(result, separators=(",", ":"), allow_nan=False))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
