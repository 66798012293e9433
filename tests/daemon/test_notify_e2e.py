"""Rating-change notifications from a real daemon to a real mosquitto: a game server that
subscribes late still finds every player's last placement or promotion, retained per player, and
it agrees with what the query port says."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

import paho.mqtt.client as paho
from daemon_harness import DaemonProcess
from paho.mqtt.enums import CallbackAPIVersion
from waiting import settled, wait_until


class Broker(Protocol):
    """What the ``mosquitto`` fixture (tests/daemon/conftest.py) provides."""

    host: str
    port: int


def collect(
    host: str, port: int, topic: str, quiet: float = 1.0, limit: float = 20.0
) -> dict[str, dict[str, Any]]:
    """Subscribe, then gather messages until none came for ``quiet`` seconds: topic -> payload."""
    got: dict[str, dict[str, Any]] = {}
    last = [time.monotonic()]
    subscribed = threading.Event()
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="test-subscriber")

    def on_connect(c: paho.Client, *_: Any) -> None:
        c.subscribe(topic, qos=1)

    def on_subscribe(*_: Any) -> None:
        subscribed.set()

    def on_message(_c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        got[msg.topic] = {"retained": bool(msg.retain), **json.loads(msg.payload)}
        last[0] = time.monotonic()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.connect(host, port)
    client.loop_start()
    try:
        assert subscribed.wait(10), "no SUBACK"
        last[0] = time.monotonic()
        deadline = time.monotonic() + limit
        while time.monotonic() - last[0] < quiet and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        client.loop_stop()
        client.disconnect()
    return got


def test_tier_changes_are_published_retained_per_player(tmp_path: Path, mosquitto: Broker) -> None:
    config = tmp_path / "a.toml"
    config.write_text(
        "[adr]\nn_min = 3\np_min = 5\n"
        f'[notify]\nmqtt = "mqtt://{mosquitto.host}:{mosquitto.port}"\n'
        'retain = true\nqos = 1\nchanges = "tiers"\n'
    )
    rng = random.Random(4)
    now = time.time()
    events = []
    for k in range(1500):
        a, b = rng.sample(range(20), 2)
        events.append({"t": now - 1500 + k, "attacker": f"p{a:02d}", "victim": f"p{b:02d}", "server": "eu-1"})
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        d.send_events(events)
        d.wait_for(lambda s: s["journal_seq"] == len(events) and s["queue_depth"] == 0)
        wait_until(lambda: d.metric("arenad_notify_published_total") > 0, "a change published", 20)
        # Drained: nothing more is published for a while, so every change is retained at the broker
        # before the subscriber below arrives (and gets them as retained messages, not live ones).
        settled(lambda: d.metric("arenad_notify_published_total"), "the publisher draining", quiet=0.5)
        retained = collect(mosquitto.host, mosquitto.port, "arena/+/ratings/+")
        assert retained, "no retained rating messages"
        players = {}
        for topic, msg in retained.items():
            prefix, _, player = topic.rpartition("/")
            assert prefix == "arena/eu-1/ratings"
            assert msg["retained"] is True
            assert unquote(player) == msg["player"]
            assert msg["kind"] in ("placed", "promoted", "demoted")
            assert msg["scope"] == "global" and msg["server"] == "eu-1"
            players[msg["player"]] = msg
        placed = {r["player"]: r["tier"] for r in d.ladder() if r["tier"] is not None}
        # Every placed player was announced, and the retained message is its tier now.
        assert set(players) == set(placed)
        for name, msg in players.items():
            assert msg["tier"] == placed[name], name
        assert d.metric("arenad_notify_dropped_total") == 0
        assert d.metric("arenad_notify_published_total") >= len(players)
        assert d.stop() == 0
    finally:
        d.kill()
