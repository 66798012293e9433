"""Who may speak over MQTT, end to end: a real ``arenad run`` against a real mosquitto that the
test configures with TLS (a CA and server certificate made with openssl), a password file (made
with mosquitto_passwd) and ACLs — see ``SecureMosquitto`` in conftest.py.

A forged event is proven absent, not merely late: after the forbidden publish completes (its QoS 1
PUBACK is back, so the broker has already routed or dropped it), an allowed marker is published
on the same topic, and the test waits for the marker. mosquitto handles packets in the order it
reads them and the daemon applies one session's messages in order, so once the marker is journaled
a forged event that had got through would be journaled too.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import paho.mqtt.client as paho
import pytest
from daemon_harness import DaemonProcess
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode
from waiting import wait_until

pytestmark = pytest.mark.timeout(90)

WAIT = 15.0  # seconds any one expected thing may take


class SecureMosquitto(Protocol):
    """What the ``secure_mosquitto`` fixture (tests/daemon/conftest.py) provides."""

    host: str
    port: int
    ca: Path  # signed the broker's certificate
    other_ca: Path  # did not
    users: dict[str, str]  # user -> password in the broker's password file

    @property
    def url(self) -> str: ...
    def log_text(self) -> str: ...


# ---------------------------------------------------------------------------- helpers
def kill(attacker: str, victim: str) -> bytes:
    return json.dumps(
        {"t": time.time(), "attacker": attacker, "victim": victim, "id": uuid.uuid4().hex}
    ).encode()


class Publisher:
    """A paho client over TLS with a username and password; ``rc`` is the broker's CONNACK code."""

    def __init__(
        self, broker: SecureMosquitto, user: str | None, password: str, ca: Path | None = None
    ) -> None:
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"test-{user}-{uuid.uuid4().hex[:8]}",
            protocol=paho.MQTTv311,
        )
        if user is not None:  # None: anonymous
            self.client.username_pw_set(user, password)
        self.client.tls_set(ca_certs=str(ca or broker.ca))
        self.client.reconnect_delay_set(5, 5)  # a refused client must not hammer the broker here
        self.rc: ReasonCode | None = None
        self._connack = threading.Event()
        self.client.on_connect = self._on_connect
        self.client.connect(broker.host, broker.port, keepalive=10)
        self.client.loop_start()
        assert self._connack.wait(WAIT), "no CONNACK"

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, rc: ReasonCode, props: Any) -> None:
        if self.rc is None:
            self.rc = rc
        self._connack.set()

    @property
    def accepted(self) -> bool:
        return self.rc is not None and not self.rc.is_failure

    def publish(self, topic: str, payload: bytes) -> None:
        """QoS 1, and wait for the PUBACK (the broker acknowledges even what the ACL drops)."""
        info = self.client.publish(topic, payload, qos=1)
        info.wait_for_publish(timeout=WAIT)
        assert info.is_published(), f"no PUBACK for {topic}"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def publishers(secure_mosquitto: SecureMosquitto) -> Iterator[Callable[..., Publisher]]:
    opened: list[Publisher] = []

    def open_one(user: str | None, password: str | None = None, ca: Path | None = None) -> Publisher:
        p = Publisher(secure_mosquitto, user, password or secure_mosquitto.users[str(user)], ca)
        opened.append(p)
        return p

    yield open_one
    for p in opened:
        p.close()


def daemon_config(tmp_path: Path, broker: SecureMosquitto, *, password: str, ca: Path) -> Path:
    secret = tmp_path / "mqtt.password"
    secret.write_text(password + "\n", encoding="utf-8")
    secret.chmod(0o600)
    config = tmp_path / "arenad.toml"
    config.write_text(
        "[mqtt]\n"
        f'url = "{broker.url}"\n'
        'username = "arenad"\n'
        f'password_file = "{secret}"\n'
        f'tls_ca = "{ca}"\n'
        "reconnect_min = 0.1\n"
        "reconnect_max = 0.5\n",
        encoding="utf-8",
    )
    return config


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Callable[[Path], DaemonProcess]]:
    started: list[DaemonProcess] = []

    def start(config: Path) -> DaemonProcess:
        d = DaemonProcess(tmp_path / f"state-{len(started)}", config=config)
        started.append(d)
        return d.start()

    yield start
    for d in started:
        d.kill()


def log_records(d: DaemonProcess, event: str) -> list[dict[str, Any]]:
    out = []
    for line in list(d.log_lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == event:
            out.append(rec)
    return out


def players(d: DaemonProcess) -> set[str]:
    return {row["player"] for row in d.ladder()}


# ---------------------------------------------------------------------------- tests
class TestAuthorisedFeed:
    """arenad connects over TLS with its password and rates what an allowed server publishes."""

    def test_events_from_server_eu1_are_rated(
        self,
        daemon: Callable[[Path], DaemonProcess],
        publishers: Callable[..., Publisher],
        secure_mosquitto: SecureMosquitto,
        tmp_path: Path,
    ) -> None:
        d = daemon(daemon_config(tmp_path, secure_mosquitto, password="arenad-pw", ca=secure_mosquitto.ca))
        d.wait_for(lambda s: s["mqtt_connected"], timeout=WAIT)
        assert d.metric("arenad_mqtt_connected") == 1
        eu1 = publishers("server-eu1")
        assert eu1.accepted, eu1.rc
        for i in range(5):
            eu1.publish("arena/eu-1/kills", kill(f"alice{i}", f"bob{i}"))
        d.wait_for(lambda s: s["journal_seq"] >= 5, timeout=WAIT)
        assert d.metric("arenad_events_received_total", 'source="mqtt"') == 5
        got = d.query({"op": "get", "player": "alice0"})
        assert got["ok"] and got["events"] == 1
        assert "arenad" in secure_mosquitto.log_text()  # the broker saw arenad authenticate


class TestNoRightsNoEvents:
    """Clients without the right credentials or ACL grants cannot inject events."""

    @pytest.fixture
    def running(
        self, daemon: Callable[[Path], DaemonProcess], secure_mosquitto: SecureMosquitto, tmp_path: Path
    ) -> DaemonProcess:
        d = daemon(daemon_config(tmp_path, secure_mosquitto, password="arenad-pw", ca=secure_mosquitto.ca))
        d.wait_for(lambda s: s["mqtt_connected"], timeout=WAIT)
        return d

    def assert_only_marker_arrives(self, d: DaemonProcess, eu1: Publisher, before: dict[str, Any]) -> None:
        eu1.publish("arena/eu-1/kills", kill("marker-a", "marker-v"))
        d.wait_for(lambda s: "marker-a" in players(d), timeout=WAIT)
        # Stats taken after the marker is visible (the condition's own stats came before it).
        after = d.stats()
        assert after["journal_seq"] == before["journal_seq"] + 1
        assert after["received"].get("mqtt", 0) == before["received"].get("mqtt", 0) + 1
        assert not {p for p in players(d) if p.startswith("forged")}

    def test_wrong_password_is_refused_at_connect(
        self, running: DaemonProcess, publishers: Callable[..., Publisher]
    ) -> None:
        before = running.stats()
        intruder = publishers("server-eu1", password="guessed")
        assert intruder.rc is not None and intruder.rc.is_failure, intruder.rc
        assert not intruder.client.is_connected()
        info = intruder.client.publish("arena/eu-1/kills", kill("forged-pw-a", "forged-pw-v"), qos=1)
        assert info.rc == paho.MQTT_ERR_NO_CONN  # not connected: nothing was sent
        self.assert_only_marker_arrives(running, publishers("server-eu1"), before)

    def test_unknown_user_and_anonymous_are_refused(self, publishers: Callable[..., Publisher]) -> None:
        for user in ("nobody", None):
            rc = publishers(user, password="x").rc
            assert rc is not None and rc.is_failure, (user, rc)

    def test_spectator_and_wrong_topic_publishes_are_dropped_by_the_acl(
        self, running: DaemonProcess, publishers: Callable[..., Publisher], secure_mosquitto: SecureMosquitto
    ) -> None:
        before = running.stats()
        spectator = publishers("spectator")
        assert spectator.accepted, spectator.rc
        spectator.publish("arena/eu-1/kills", kill("forged-spec-a", "forged-spec-v"))  # may only read
        eu1 = publishers("server-eu1")
        eu1.publish("arena/eu-2/kills", kill("forged-eu2-a", "forged-eu2-v"))  # not its server
        self.assert_only_marker_arrives(running, eu1, before)
        log = secure_mosquitto.log_text()
        assert log.count("Denied PUBLISH") >= 2, log[-2000:]


class TestRefusedDaemonStaysUp:
    """A daemon refused by the broker keeps running, reports it, logs why, and keeps retrying."""

    def assert_refused_and_retrying(self, d: DaemonProcess, why: Callable[[str], bool]) -> None:
        wait_until(
            lambda: len(log_records(d, "mqtt_connect_failed")) >= 3, "three failed connection attempts", WAIT
        )
        failures = log_records(d, "mqtt_connect_failed")
        assert all(why(str(r["error"])) for r in failures), failures
        assert all(r["retry_in"] > 0 for r in failures)
        assert d.alive()
        assert d.stats()["mqtt_connected"] is False
        assert d.metric("arenad_mqtt_connected") == 0
        assert not log_records(d, "mqtt_connected")

    def test_wrong_password(
        self, daemon: Callable[[Path], DaemonProcess], secure_mosquitto: SecureMosquitto, tmp_path: Path
    ) -> None:
        d = daemon(daemon_config(tmp_path, secure_mosquitto, password="not-it", ca=secure_mosquitto.ca))
        self.assert_refused_and_retrying(d, lambda e: "not authori" in e.lower())

    def test_untrusted_ca(
        self, daemon: Callable[[Path], DaemonProcess], secure_mosquitto: SecureMosquitto, tmp_path: Path
    ) -> None:
        d = daemon(
            daemon_config(tmp_path, secure_mosquitto, password="arenad-pw", ca=secure_mosquitto.other_ca)
        )
        self.assert_refused_and_retrying(d, lambda e: "certificate verify failed" in e.lower())
