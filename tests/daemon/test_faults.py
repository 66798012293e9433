"""Faults against a real ``arenad run`` process and a real mosquitto (issue 7, "Faults").

* ``kill -9`` at seeded random moments under a steady MQTT QoS 1 load, repeated: every message the
  broker accepted ends up in the journal exactly once, and the daemon's ladder equals an offline
  ``arenad replay`` of the journal in journal order.
* The broker down at start-up: the daemon comes up ready and serves queries, reports
  ``arenad_mqtt_connected`` 0, and connects within bounded time once the broker is up.
* The broker down mid-stream: the daemon reconnects, the QoS 1 backlog is delivered, nothing is
  lost, and ``arenad_mqtt_disconnects_total`` / ``arenad_mqtt_disconnected_seconds_total`` show the
  outage. The issue asks for outages of minutes; this test holds the broker down for
  ``OUTAGE_SECONDS`` to stay fast. Nothing in the daemon depends on the outage's length (the
  backoff is capped at ``mqtt.reconnect_max``); what does is the broker's per-client queue
  (``max_queued_messages``) for messages published meanwhile. A minutes-long soak is not automated.

Everything is on loopback, bounded in count and time, and seeded.
"""

from __future__ import annotations

import functools
import json
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import paho.mqtt.client as paho
import pytest
from daemon_harness import DaemonProcess
from paho.mqtt.enums import CallbackAPIVersion
from waiting import wait_until

from arenad.daemon.emit import simulated_kills
from arenad.daemon.state import read_records

TOPIC = "arena/eu-1/kills"
SEED = 7007
PUBLISH_TIMEOUT = 60.0  # seconds for every outstanding PUBACK once publishing has ended
OUTAGE_SECONDS = 10.0

# Checkpoints drop journal segments older than the oldest kept one; keeping many (and a long
# interval) leaves the whole journal on disk, so the test can read every event back. Short
# reconnect backoff bounds the time to notice the broker is back.
CONFIG = """\
[daemon]
checkpoint_interval = 3600.0
checkpoints_kept = 100

[mqtt]
reconnect_min = 0.1
reconnect_max = 1.0
"""


def kill_events(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` valid kills with unique ids, timestamps one second apart ending about now."""
    evs = list(simulated_kills(40, n, seed=seed, start=time.time() - n, rate=1.0))
    for e in evs:
        del e["server"]  # taken from the topic
    return evs


class Publisher(threading.Thread):
    """Publishes one event per QoS 1 message at a steady pace, then waits for every PUBACK.

    A persistent session (clean_session False) and automatic reconnects: messages published while
    the broker is away wait in paho's queue and go out when it is back, so nothing is dropped on
    the publishing side. ``acked`` holds the ids whose PUBACK arrived: what the broker accepted.
    """

    def __init__(self, port: int, evs: list[dict[str, Any]], rate: float) -> None:
        super().__init__(daemon=True)
        self.evs = evs
        self.rate = rate
        self.acked: list[str] = []
        self.error: BaseException | None = None
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=f"faults-pub-{time.time_ns()}", clean_session=False
        )
        self.client.reconnect_delay_set(min_delay=1, max_delay=1)  # seconds (paho takes ints)
        self._acked_mids: set[int] = set()  # fewer than 65535 messages: a mid is never reused
        self._acked_changed = threading.Condition()
        self.client.on_publish = self._on_publish
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, *args: Any) -> None:
        with self._acked_changed:
            self._acked_mids.add(mid)
            self._acked_changed.notify_all()

    def run(self) -> None:
        try:
            infos = []
            started = time.monotonic()
            for k, ev in enumerate(self.evs):
                infos.append((ev["id"], self.client.publish(TOPIC, msgpack.packb(ev), qos=1)))
                ahead = (k + 1) / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)  # the pace of the load, not a synchronisation
            # PUBACKs are counted by on_publish, not wait_for_publish()/is_published(): those raise
            # for a message published while disconnected (rc NO_CONN), although paho keeps such a
            # QoS 1 message and sends it on reconnect.
            deadline = time.monotonic() + PUBLISH_TIMEOUT
            with self._acked_changed:
                self._acked_changed.wait_for(
                    lambda: len(self._acked_mids) >= len(infos), max(0.0, deadline - time.monotonic())
                )
                self.acked = [event_id for event_id, info in infos if info.mid in self._acked_mids]
        except BaseException as e:  # reported by finish() in the test thread
            self.error = e
        finally:
            self.client.loop_stop()
            self.client.disconnect()

    def finish(self) -> list[str]:
        self.join(PUBLISH_TIMEOUT + 60)
        assert not self.is_alive(), "publisher did not finish"
        if self.error is not None:
            raise self.error
        return self.acked


def journal(state_dir: Path) -> list[tuple[int, float, str, str, str | None, str | None]]:
    """Every journaled kill, in journal order (all segments, oldest first)."""
    out = []
    for path in sorted(state_dir.glob("journal-*.log")):
        records, _ = read_records(path.read_bytes())
        for rec in records:
            assert isinstance(rec, tuple)
            out.append(rec)
    return out


def offline_ladder(tmp_path: Path, config: Path, records: list[Any]) -> dict[str, Any]:
    """``arenad replay`` of the journaled events in journal order: player -> state row."""
    src = tmp_path / "journal-replay.jsonl"
    src.write_text(
        "".join(
            json.dumps({"t": t, "attacker": a, "victim": v, "server": s, "id": i}) + "\n"
            for _seq, t, a, v, s, i in records
        )
    )
    out = src.with_suffix(".state")
    cmd = [sys.executable, "-m", "arenad", "replay", "--config", str(config), "--out", str(out), str(src)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return {row["player"]: row for row in map(json.loads, out.read_text().splitlines())}


def assert_complete_and_replayable(
    d: DaemonProcess, tmp_path: Path, config: Path, evs: list[dict[str, Any]], acked: list[str]
) -> None:
    """Every acknowledged event journaled exactly once, as published; the ladder equals replay."""
    records = journal(d.state_dir)
    seqs = [r[0] for r in records]
    assert seqs == list(range(1, len(records) + 1)), "the journal has a gap or starts late"
    counts = Counter(r[5] for r in records)
    assert not [i for i, c in counts.items() if c > 1], "an event was journaled twice"
    assert set(acked) <= set(counts), f"lost acknowledged events: {sorted(set(acked) - set(counts))[:10]}"
    assert set(counts) == {e["id"] for e in evs}  # and nothing invented
    by_id = {e["id"]: e for e in evs}
    for _seq, t, attacker, victim, server, event_id in records:
        e = by_id[str(event_id)]
        assert (t, attacker, victim, server) == (e["t"], e["attacker"], e["victim"], "eu-1"), event_id
    rows = d.ladder()
    offline = offline_ladder(tmp_path, config, records)
    assert {r["player"] for r in rows} == set(offline)
    for row in rows:
        ref = offline[row["player"]]
        assert row["mu"] == pytest.approx(ref["mu"], abs=1e-9), row["player"]
        assert row["sigma"] == pytest.approx(ref["sigma"], abs=1e-9), row["player"]
        assert row["tier"] == ref["tier"], row["player"]


def journaled_beyond(seq: int, stats: dict[str, Any]) -> bool:
    return int(stats["journal_seq"]) > seq


def healthz(d: DaemonProcess) -> int:
    host, port = d.addr("metrics")
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def roomy_broker(mosquitto: Any) -> None:
    """Restart the broker with a per-client queue large enough for the whole test.

    mosquitto drops a session's queued QoS 1 messages beyond ``max_queued_messages`` (default
    1000) — an operator setting (see the MQTT source's docstring); sized here so that any loss the
    test sees is arenad's.
    """
    mosquitto.stop()
    mosquitto.extra_config.append("max_queued_messages 100000")
    mosquitto.start()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "arenad.toml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def daemon(tmp_path: Path, config: Path) -> Any:
    d = DaemonProcess(tmp_path / "state", config=config)
    yield d
    d.kill()


class TestKill9UnderLoad:
    """kill -9 at random moments under a QoS 1 load, repeated: nothing the broker accepted is lost,
    nothing is applied twice, and the state equals an offline replay of the journal."""

    def test_repeated_kill_9_loses_nothing_and_equals_replay(
        self, daemon: DaemonProcess, mosquitto: Any, config: Path, tmp_path: Path
    ) -> None:
        rng = random.Random(SEED)
        roomy_broker(mosquitto)
        daemon.start(mqtt=mosquitto.url)
        daemon.wait_for(lambda s: s["mqtt_connected"])  # the persistent session exists from here
        evs = kill_events(3000, seed=SEED)
        publisher = Publisher(mosquitto.port, evs, rate=200.0)  # about 15 s of load
        publisher.start()
        kills = 0
        for _ in range(4):
            # Under load: this run has journaled something, then a seeded random moment later...
            seq = daemon.stats()["journal_seq"]
            daemon.wait_for(functools.partial(journaled_beyond, seq), timeout=30)
            time.sleep(rng.uniform(0.2, 2.0))  # the point: a kill at an arbitrary moment of the load
            daemon.kill()  # ...SIGKILL: no final journal flush, no checkpoint, no PUBACK grace
            kills += 1
            daemon.start(mqtt=mosquitto.url)
        assert kills == 4
        acked = publisher.finish()
        assert len(acked) == len(evs)  # the broker accepted every message
        stats = daemon.wait_for(lambda s: s["journal_seq"] >= len(evs), timeout=60)
        assert stats["journal_seq"] == len(evs)
        assert_complete_and_replayable(daemon, tmp_path, config, evs, acked)
        # The journal holds what the ladder was computed from, and stays so after a clean stop.
        assert daemon.stop() == 0
        assert len(journal(daemon.state_dir)) == len(evs)


class TestBrokerDownAtStartUp:
    """With the broker down the daemon still starts and serves; it connects once the broker is up."""

    def test_starts_ready_without_broker_then_connects(self, daemon: DaemonProcess, mosquitto: Any) -> None:
        mosquitto.stop()
        daemon.start(mqtt=mosquitto.url)
        assert healthz(daemon) == 200
        stats = daemon.stats()
        assert stats["mqtt_connected"] is False
        assert daemon.query({"op": "top", "n": 10})["ok"]
        assert daemon.metric("arenad_mqtt_connected") == 0
        assert daemon.metric("arenad_ready") == 1
        # The outage counter runs from start-up while no session exists.
        first = daemon.metric("arenad_mqtt_disconnected_seconds_total")
        wait_until(
            lambda: daemon.metric("arenad_mqtt_disconnected_seconds_total") > first,
            "the outage counter grows",
        )
        # The log is read by the harness's reader thread: wait for the line, bounded.
        wait_until(
            lambda: any('"mqtt_connect_failed"' in line for line in daemon.log_lines),
            "a mqtt_connect_failed line",
        )
        mosquitto.start()
        daemon.wait_for(lambda s: s["mqtt_connected"], timeout=10)  # backoff ceiling 1 s
        assert daemon.metric("arenad_mqtt_connected") == 1
        assert daemon.metric("arenad_mqtt_disconnects_total") == 0  # never had a session to lose
        # Connected: the counter stops.
        frozen = daemon.metric("arenad_mqtt_disconnected_seconds_total")
        assert frozen > 0
        time.sleep(0.3)  # time passes while connected; the counter must not move
        assert daemon.metric("arenad_mqtt_disconnected_seconds_total") == frozen


class TestBrokerDownMidStream:
    """The broker stops mid-stream for OUTAGE_SECONDS: the daemon keeps serving, reconnects, the
    QoS 1 backlog arrives, nothing is lost, and the outage shows in the metrics."""

    def test_outage_mid_stream_loses_nothing_and_is_measured(
        self, daemon: DaemonProcess, mosquitto: Any, config: Path, tmp_path: Path
    ) -> None:
        roomy_broker(mosquitto)
        daemon.start(mqtt=mosquitto.url)
        daemon.wait_for(lambda s: s["mqtt_connected"])
        evs = kill_events(2000, seed=SEED + 1)
        publisher = Publisher(mosquitto.port, evs, rate=150.0)  # about 13 s of load
        publisher.start()
        daemon.wait_for(lambda s: s["journal_seq"] >= 200, timeout=30)
        mosquitto.stop()  # clean shutdown: the broker saves the sessions and queued messages
        daemon.wait_for(lambda s: not s["mqtt_connected"], timeout=10)
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_SECONDS:
            # The daemon keeps answering throughout, and reports the outage.
            assert healthz(daemon) == 200
            assert daemon.metric("arenad_mqtt_connected") == 0
            time.sleep(0.25)  # the pace of these checks while the outage lasts, not a synchronisation
        mosquitto.start()
        daemon.wait_for(lambda s: s["mqtt_connected"], timeout=10)
        acked = publisher.finish()
        assert len(acked) == len(evs)
        stats = daemon.wait_for(lambda s: s["journal_seq"] >= len(evs), timeout=60)
        assert stats["journal_seq"] == len(evs)
        assert daemon.metric("arenad_mqtt_disconnects_total") == 1
        outage = daemon.metric("arenad_mqtt_disconnected_seconds_total")
        assert OUTAGE_SECONDS - 0.5 <= outage <= OUTAGE_SECONDS + 15, outage
        assert_complete_and_replayable(daemon, tmp_path, config, evs, acked)
