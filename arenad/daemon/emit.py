"""``arenad emit``: send simulated kills to a running arenad over UDP or MQTT.

For a newcomer's first minute (see the loop work end to end) and for tests and benchmarks.
"""

from __future__ import annotations

import math
import random
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import msgpack
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from arenad.auth import Signer
from arenad.daemon.config import parse_hostport


def simulated_kills(
    players: int,
    events: int,
    *,
    seed: int = 1,
    server: str = "sim-1",
    start: float | None = None,
    rate: float = 0.0,
) -> Iterator[dict[str, Any]]:
    """Kills among ``players`` with hidden Gaussian skills, timestamped from ``start`` (now).

    With ``rate`` > 0 the timestamps advance 1/rate seconds per kill; otherwise they all carry
    the current wall-clock time when generated. Every event has a unique ``id``.
    """
    rng = random.Random(seed)
    skill = [rng.gauss(0.0, 1.0) for _ in range(players)]
    t0 = time.time() if start is None else start
    for k in range(events):
        a, b = rng.sample(range(players), 2)
        if rng.random() >= 1.0 / (1.0 + math.exp(skill[b] - skill[a])):
            a, b = b, a
        t = t0 + k / rate if rate > 0 else (time.time() if start is None else t0)
        yield {
            "t": t,
            "attacker": f"player{a:04d}",
            "victim": f"player{b:04d}",
            "server": server,
            "id": f"{seed}-{k}",
        }


def emit_udp(
    target: str,
    events: Iterator[dict[str, Any]],
    batch: int = 50,
    rate: float = 0.0,
    signer: Signer | None = None,
) -> int:
    """Send events as msgpack arrays of ``batch`` events per datagram; returns the count sent.

    With ``signer`` every datagram is signed (``arenad.auth``, ``[udp] auth``).
    """

    def pack(chunk: list[dict[str, Any]]) -> bytes:
        payload: bytes = msgpack.packb(chunk)
        return payload if signer is None else signer.sign(payload, time.time_ns() // 1_000_000)

    host, port = parse_hostport(target)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sent = 0
    started = time.monotonic()
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        chunk: list[dict[str, Any]] = []
        for ev in events:
            chunk.append(ev)
            if len(chunk) >= batch:
                sock.sendto(pack(chunk), (host, port))
                sent += len(chunk)
                chunk = []
                _pace(sent, rate, started)
        if chunk:
            sock.sendto(pack(chunk), (host, port))
            sent += len(chunk)
    return sent


def emit_mqtt(
    url: str, topic: str, events: Iterator[dict[str, Any]], batch: int = 50, rate: float = 0.0
) -> int:
    """Publish msgpack arrays of events with QoS 1, waiting for each PUBACK; returns the count."""
    parts = urlsplit(url)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"arenad-emit-{time.time_ns()}")
    if parts.username:
        client.username_pw_set(parts.username, parts.password)
    if parts.scheme in ("mqtts", "ssl"):
        client.tls_set()
    client.connect(parts.hostname or "127.0.0.1", parts.port or (8883 if parts.scheme == "mqtts" else 1883))
    client.loop_start()
    sent = 0
    started = time.monotonic()
    try:
        chunk: list[dict[str, Any]] = []
        for ev in events:
            chunk.append(ev)
            if len(chunk) >= batch:
                client.publish(topic, msgpack.packb(chunk), qos=1).wait_for_publish(timeout=30)
                sent += len(chunk)
                chunk = []
                _pace(sent, rate, started)
        if chunk:
            client.publish(topic, msgpack.packb(chunk), qos=1).wait_for_publish(timeout=30)
            sent += len(chunk)
    finally:
        client.loop_stop()
        client.disconnect()
    return sent


def _pace(sent: int, rate: float, started: float) -> None:
    if rate > 0:
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
