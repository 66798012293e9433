"""MQTT source: decoding, topics, and — against a real mosquitto — delivery, manual acknowledgement,
persistent sessions, broker restarts, backpressure, TLS, passwords and stopping.

pytest-asyncio is not used: each test runs its coroutine with ``asyncio.run`` under a 20 s bound,
and every wait inside is bounded too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiomqtt
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from waiting import until

from arenad.core.events import KillEvent, Reject, RejectReason
from arenad.daemon.config_sources import MqttSettings
from arenad.daemon.sources.mqtt import (
    MqttStatus,
    decode_payload,
    load_password,
    run_mqtt,
    server_id_from_topic,
    tls_context,
)
from arenad.daemon.types import Batch
from arenad.errors import ConfigError

TEST_BOUND = 20.0  # seconds any one test may run
WAIT = 5.0  # seconds any one expected thing may take


class Broker(Protocol):
    """What the ``mosquitto`` fixture (tests/daemon/conftest.py) provides."""

    host: str
    port: int
    workdir: Path
    extra_config: list[str]

    @property
    def url(self) -> str: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def add_listener(self, *lines: str) -> int: ...


# ---------------------------------------------------------------------------- helpers
def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(body(), TEST_BOUND)

    asyncio.run(bounded())


def event(i: int, **extra: object) -> dict[str, object]:
    return {"t": 1_700_000_000.0 + i, "attacker": f"a{i}", "victim": f"v{i}", "id": str(i), **extra}


def as_json(obj: object) -> bytes:
    return json.dumps(obj).encode()


def as_msgpack(obj: object) -> bytes:
    return msgpack.packb(obj)


def settings_for(broker: Broker, **overrides: Any) -> MqttSettings:
    values: dict[str, Any] = {
        "url": broker.url,
        "client_id": f"arenad-test-{uuid.uuid4().hex[:8]}",
        "keepalive": 5,
        "reconnect_min": 0.05,
        "reconnect_max": 0.3,
    }
    values.update(overrides)
    return MqttSettings(**values)


async def publish(broker: Broker, topic: str, *payloads: bytes, retain: bool = False) -> None:
    """QoS 1 publishes; each returns once the broker has the message (its PUBACK)."""
    async with aiomqtt.Client(broker.host, broker.port, identifier=f"pub-{uuid.uuid4().hex[:8]}") as client:
        for payload in payloads:
            await client.publish(topic, payload, qos=1, retain=retain)


@dataclass
class Run:
    settings: MqttSettings
    queue: asyncio.Queue[Batch]
    status: MqttStatus
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def batch(self, timeout: float = WAIT) -> Batch:
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def connected(self, connects: int = 1) -> None:
        await until(lambda: self.status.connected and self.status.connects >= connects)

    async def finish(self, timeout: float = WAIT) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, timeout)


@contextlib.asynccontextmanager
async def running(
    settings: MqttSettings,
    queue: asyncio.Queue[Batch] | None = None,
    password: str | None = None,
    ack_grace: float = 0.5,
) -> AsyncIterator[Run]:
    """``run_mqtt`` as a task for the body of the block; stopped (and awaited) on the way out."""
    q: asyncio.Queue[Batch] = queue if queue is not None else asyncio.Queue(maxsize=1000)
    status, stop = MqttStatus(), asyncio.Event()
    task = asyncio.create_task(run_mqtt(settings, q, status, stop, password, ack_grace=ack_grace))
    r = Run(settings, q, status, stop, task)
    try:
        yield r
    finally:
        if not task.done():
            await r.finish()
        else:
            task.result()  # surface a crash


def ids(batch: Batch) -> list[str | None]:
    return [it.id for it in batch.decoded() if isinstance(it, KillEvent)]


# ---------------------------------------------------------------------------- pure parts
class TestDecodePayload:
    """A payload is one event or a list, JSON or msgpack (detected or forced); never raises."""

    @pytest.mark.parametrize("encode", [as_json, as_msgpack])
    def test_single_event_and_list(self, encode: Callable[[object], bytes]) -> None:
        one = decode_payload(encode(event(1)), "auto")
        assert one == [KillEvent(1_700_000_001.0, "a1", "v1", None, "1", None)]
        many = decode_payload(encode([event(2), event(3, server="x")]), "auto")
        assert [(e.id, e.server) for e in many if isinstance(e, KillEvent)] == [("2", None), ("3", "x")]

    def test_json_with_leading_whitespace_is_detected(self) -> None:
        assert isinstance(decode_payload(b"\n  " + as_json(event(1)), "auto")[0], KillEvent)

    def test_forced_mode_refuses_the_other_encoding(self) -> None:
        (refused,) = decode_payload(as_msgpack(event(1)), "json")
        assert isinstance(refused, Reject)
        assert refused.reason is RejectReason.MALFORMED
        assert isinstance(decode_payload(as_msgpack(event(1)), "msgpack")[0], KillEvent)
        forced = decode_payload(as_json(event(1)), "msgpack")
        assert all(isinstance(r, Reject) and r.reason is RejectReason.MALFORMED for r in forced)

    @pytest.mark.parametrize("payload", [b"", b"   ", b"\xc1", b"{not json", b"[]"])
    def test_garbage_and_empty_are_one_reject_at_least(self, payload: bytes) -> None:
        out = decode_payload(payload, "auto")
        assert out
        assert all(isinstance(r, Reject) and r.reason is RejectReason.MALFORMED for r in out)

    def test_oversize(self) -> None:
        (reject,) = decode_payload(as_json(event(1)), "auto", max_payload=16)
        assert isinstance(reject, Reject)
        assert reject.reason is RejectReason.OVERSIZE

    def test_bad_mode_names_the_value(self) -> None:
        with pytest.raises(ValueError, match="'xml'"):
            decode_payload(b"{}", "xml")

    @given(st.binary(max_size=256), st.sampled_from(["auto", "json", "msgpack"]))
    def test_never_raises_and_never_empty(self, payload: bytes, mode: str) -> None:
        assert decode_payload(payload, mode)


class TestServerIdFromTopic:
    """The server id is the level the first "+" of the first matching filter matched."""

    @pytest.mark.parametrize(
        ("topic", "filters", "expected"),
        [
            ("arena/eu-1/kills", ("arena/+/kills",), "eu-1"),
            ("league/na/x/3/kills", ("arena/+/kills", "league/+/x/+/kills"), "na"),
            ("arena/eu-1/kills", ("arena/eu-1/kills", "arena/+/kills"), None),  # first match has no "+"
            ("arena/eu-1/kills", ("arena/#",), None),
            ("arena/eu-1/kills", ("+/+/kills",), "arena"),
            ("arena/eu-1/kills", ("other/+/kills",), None),
            ("arena/eu-1", ("arena/+/kills",), None),
            ("arena/eu-1/kills/x", ("arena/+/kills",), None),
            ("arena/eu-1/kills/x", ("arena/+/#",), "eu-1"),
            ("arena//kills", ("arena/+/kills",), None),  # an empty level is no server id
            ("$SYS/eu-1/kills", ("+/+/kills",), None),  # wildcards do not match "$" topics
            ("arena/eu-1/kills", ("$share/g/arena/+/kills",), "eu-1"),
        ],
    )
    def test_cases(self, topic: str, filters: tuple[str, ...], expected: str | None) -> None:
        assert server_id_from_topic(topic, filters) == expected


class TestSecretsAndTls:
    """Passwords come from the environment or a file; TLS files are checked before connecting."""

    def test_password_from_env_then_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        pw = tmp_path / "pw"
        pw.write_text("from-file\nsecond line\n", encoding="utf-8")
        monkeypatch.setenv("ARENAD_TEST_PW", "from-env")
        assert load_password(MqttSettings(username="u", password_env="ARENAD_TEST_PW")) == "from-env"
        assert load_password(MqttSettings(username="u", password_file=str(pw))) == "from-file"
        assert load_password(MqttSettings()) is None

    def test_missing_sources_name_their_key(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("ARENAD_TEST_PW_MISSING", raising=False)
        with pytest.raises(ConfigError) as env_err:
            load_password(MqttSettings(username="u", password_env="ARENAD_TEST_PW_MISSING"))
        assert env_err.value.problems[0].key == "mqtt.password_env"
        with pytest.raises(ConfigError) as file_err:
            load_password(MqttSettings(username="u", password_file=str(tmp_path / "nope")))
        assert file_err.value.problems[0].key == "mqtt.password_file"

    def test_tls_context(self, tmp_path: Path) -> None:
        assert tls_context(MqttSettings(url="mqtt://h")) is None
        ca = tmp_path / "ca.pem"
        ca.write_text(CA_PEM, encoding="ascii")
        ctx = tls_context(MqttSettings(url="mqtts://h", tls_ca=str(ca), tls_insecure=True))
        assert ctx is not None
        assert ctx.check_hostname is False
        with pytest.raises(ConfigError) as err:
            tls_context(MqttSettings(url="mqtts://h", tls_ca=str(tmp_path / "missing.pem")))
        assert err.value.problems[0].key == "mqtt.tls_ca"


# ---------------------------------------------------------------------------- with a broker
class TestDelivery:
    """Messages become Batches with the topic's server id; bad payloads become Rejects."""

    def test_json_and_msgpack_events_and_lists(self, mosquitto: Broker) -> None:
        async def body() -> None:
            async with running(settings_for(mosquitto)) as r:
                await r.connected()
                await publish(
                    mosquitto,
                    "arena/eu-1/kills",
                    as_json(event(1)),
                    as_json([event(2), event(3)]),
                    as_msgpack(event(4)),
                    as_msgpack([event(5), event(6, server="own")]),
                )
                got = [await r.batch() for _ in range(4)]
                assert [b.source for b in got] == ["mqtt"] * 4
                assert [b.server for b in got] == ["eu-1"] * 4
                assert [ids(b) for b in got] == [["1"], ["2", "3"], ["4"], ["5", "6"]]
                # The engine applies batch.server to events without one; an event's own wins.
                assert [e.server for e in got[3].decoded() if isinstance(e, KillEvent)] == [None, "own"]
                for b in got:
                    assert b.done is not None
                    b.done()
                assert r.status.received == 4

        run(body)

    def test_garbage_payload_becomes_rejects(self, mosquitto: Broker) -> None:
        async def body() -> None:
            async with running(settings_for(mosquitto)) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", b"\xc1\xc1", b"{oops", as_json({"t": 1}))
                reasons = []
                for _ in range(3):
                    b = await r.batch()
                    assert all(isinstance(it, Reject) for it in b.decoded())
                    reasons.append([it.reason for it in b.decoded() if isinstance(it, Reject)])
                    assert b.done is not None
                    b.done()  # counted by the engine, then acknowledged like any message
                assert reasons == [
                    [RejectReason.MALFORMED],
                    [RejectReason.MALFORMED],
                    [RejectReason.MISSING_FIELD],
                ]

        run(body)

    def test_forced_payload_mode(self, mosquitto: Broker) -> None:
        async def body() -> None:
            async with running(settings_for(mosquitto, payload="msgpack")) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", as_json(event(1)), as_msgpack(event(2)))
                first, second = await r.batch(), await r.batch()
                assert all(isinstance(it, Reject) for it in first.decoded())
                assert ids(second) == ["2"]

        run(body)

    def test_only_configured_topic_filters(self, mosquitto: Broker) -> None:
        async def body() -> None:
            s = settings_for(mosquitto, topics=("arena/+/kills", "league/+/frags"))
            async with running(s) as r:
                await r.connected()
                # The broker forwards in publish order, so the first batch proves the others
                # (not matching any filter) were never delivered.
                for topic, i in [("other/eu-1/kills", 1), ("arena/eu-1/chat", 2), ("league/na-2/frags", 3)]:
                    await publish(mosquitto, topic, as_json(event(i)))
                await publish(mosquitto, "arena/eu-3/kills", as_json(event(4)))
                first, second = await r.batch(), await r.batch()
                assert (first.server, ids(first)) == ("na-2", ["3"])
                assert (second.server, ids(second)) == ("eu-3", ["4"])
                assert r.queue.empty()

        run(body)

    def test_retained_messages_are_skipped(self, mosquitto: Broker) -> None:
        async def body() -> None:
            # A retained message is re-sent on every (re)subscription: not a new kill.
            await publish(mosquitto, "arena/eu-1/kills", as_json(event(1)), retain=True)
            async with running(settings_for(mosquitto)) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", as_json(event(2)))
                b = await r.batch()
                assert ids(b) == ["2"]
                assert r.status.retained_skipped == 1

        run(body)


class TestAcknowledgement:
    """PUBACK goes out only from Batch.done; the persistent session keeps the rest."""

    def test_unacked_message_is_redelivered_and_acked_one_is_not(self, mosquitto: Broker) -> None:
        async def body() -> None:
            s = settings_for(mosquitto)
            async with running(s, ack_grace=0) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", as_json(event(1)))
                unacked = await r.batch()
                assert ids(unacked) == ["1"]
                # Never call done: as if arenad died before the journal write.
            async with running(s) as r:  # same client id: the broker redelivers
                again = await r.batch()
                assert ids(again) == ["1"]
                assert again.done is not None
                again.done()  # journaled now: PUBACK
            # Queued behind any redelivery, so it would come second if "1" were redelivered.
            await publish(mosquitto, "arena/eu-1/kills", as_json(event(2)))
            async with running(s) as r:
                nxt = await r.batch()
                assert ids(nxt) == ["2"]

        run(body)

    def test_done_after_the_connection_ended_is_harmless(self, mosquitto: Broker) -> None:
        async def body() -> None:
            s = settings_for(mosquitto)
            async with running(s, ack_grace=0) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", as_json(event(1)))
                late = await r.batch()
            assert late.done is not None
            late.done()  # its connection is gone: dropped, the broker still redelivers
            async with running(s) as r:
                again = await r.batch()
                assert ids(again) == ["1"]

        run(body)

    def test_messages_published_while_stopped_arrive_afterwards(self, mosquitto: Broker) -> None:
        async def body() -> None:
            s = settings_for(mosquitto)
            async with running(s) as r:
                await r.connected()  # subscribed: the broker now holds a session for us
            await publish(mosquitto, "arena/eu-1/kills", *(as_json(event(i)) for i in range(5)))
            async with running(s) as r:
                got = [await r.batch() for _ in range(5)]
                assert [ids(b)[0] for b in got] == [str(i) for i in range(5)]
                for b in got:
                    assert b.done is not None
                    b.done()

        run(body)

    def test_session_survives_a_broker_restart_while_stopped(self, mosquitto: Broker) -> None:
        async def body() -> None:
            s = settings_for(mosquitto)
            async with running(s) as r:
                await r.connected()
            await publish(mosquitto, "arena/eu-1/kills", as_json(event(1)))
            mosquitto.stop()  # the persistence file keeps the session and the queued message
            mosquitto.start()
            async with running(s) as r:
                assert ids(await r.batch()) == ["1"]

        run(body)


class TestResilience:
    """Broker restarts mid-stream: reconnect with backoff, and no QoS 1 message is lost."""

    def test_broker_restart_mid_stream_loses_nothing(self, mosquitto: Broker) -> None:
        n = 60

        async def body() -> None:
            seen: set[str] = set()

            async def consume(r: Run, until_seen: int) -> None:
                while len(seen) < until_seen:
                    b = await r.batch()
                    seen.update(i for i in ids(b) if i is not None)
                    assert b.done is not None
                    b.done()

            # A short queue, so that at the restart most unacknowledged messages are still at
            # the broker (queued or in flight), and only its persistence can bring them back.
            queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=4)
            async with running(settings_for(mosquitto), queue=queue) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", *(as_json(event(i)) for i in range(n // 2)))
                await consume(r, n // 4)
                mosquitto.stop()
                await until(lambda: not r.status.connected)
                mosquitto.start()
                await r.connected(connects=2)
                await publish(mosquitto, "arena/eu-1/kills", *(as_json(event(i)) for i in range(n // 2, n)))
                await consume(r, n)
                assert seen == {str(i) for i in range(n)}
                assert r.status.disconnects >= 1

        run(body)

    def test_reconnects_until_the_broker_is_up(self, mosquitto: Broker) -> None:
        async def body() -> None:
            mosquitto.stop()
            async with running(settings_for(mosquitto)) as r:
                await until(lambda: bool(r.status.last_error))
                assert not r.status.connected
                mosquitto.start()
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", as_json(event(1)))
                assert ids(await r.batch()) == ["1"]

        run(body)


class TestBackpressure:
    """A full queue pauses intake (the broker holds the rest); nothing is dropped."""

    def test_full_queue_pauses_then_resumes_in_order(self, mosquitto: Broker) -> None:
        n = 40  # twice mosquitto's default inflight window of 20

        async def body() -> None:
            queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)
            async with running(settings_for(mosquitto), queue=queue) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", *(as_json(event(i)) for i in range(n)))
                # One batch on the queue, one waiting for space: the source takes no more.
                await until(lambda: queue.full() and r.status.received == 2)
                await asyncio.sleep(0.3)  # an observation window, not synchronisation
                assert r.status.received == 2
                assert queue.qsize() == 1
                got: list[str | None] = []
                while len(got) < n:
                    b = await r.batch()
                    got += ids(b)
                    assert b.done is not None
                    b.done()
                assert got == [str(i) for i in range(n)]

        run(body)


class TestStop:
    """Setting stop ends run_mqtt promptly, whatever it is waiting for."""

    @staticmethod
    async def stopped_within(r: Run, seconds: float) -> None:
        started = time.monotonic()
        await r.finish(timeout=seconds + 2)
        assert time.monotonic() - started < seconds
        assert not r.status.connected

    def test_while_waiting_for_messages(self, mosquitto: Broker) -> None:
        async def body() -> None:
            async with running(settings_for(mosquitto)) as r:
                await r.connected()
                await self.stopped_within(r, 1.0)
                assert r.status.disconnects == 1

        run(body)

    def test_while_backing_off(self, mosquitto: Broker) -> None:
        async def body() -> None:
            mosquitto.stop()
            s = settings_for(mosquitto, reconnect_min=30.0, reconnect_max=30.0)
            async with running(s) as r:
                await until(lambda: bool(r.status.last_error))
                await self.stopped_within(r, 1.0)

        run(body)

    def test_while_the_queue_is_full(self, mosquitto: Broker) -> None:
        async def body() -> None:
            queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)
            async with running(settings_for(mosquitto), queue=queue, ack_grace=0.2) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-1/kills", *(as_json(event(i)) for i in range(3)))
                await until(lambda: r.status.received == 2)
                await self.stopped_within(r, 0.2 + 1.0)

        run(body)


# ---------------------------------------------------------------------------- security options
def _password_line(user: str, password: str) -> str:
    """A mosquitto 2.x password-file line ($7$: PBKDF2-SHA512, 101 rounds), no mosquitto_passwd."""
    salt = os.urandom(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 101)
    return f"{user}:$7$101${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


class TestSecurity:
    """Username/password and TLS reach the broker."""

    def test_username_and_password(self, mosquitto: Broker) -> None:
        passwords = mosquitto.workdir / "passwd"
        passwords.write_text(_password_line("arenad", "s3cret") + "\n", encoding="utf-8")
        mosquitto.stop()
        mosquitto.extra_config.append(f"password_file {passwords}")  # global: per_listener_settings false
        mosquitto.start()

        async def body() -> None:
            async with running(settings_for(mosquitto, username="arenad"), password="wrong") as r:
                await until(lambda: bool(r.status.last_error))
                assert r.status.connects == 0
            async with running(settings_for(mosquitto, username="arenad"), password="s3cret") as r:
                await r.connected()

        run(body)

    def test_tls(self, mosquitto: Broker, tmp_path: Path) -> None:
        files = {}
        for name, pem in [
            ("ca", CA_PEM),
            ("cert", SERVER_CERT_PEM),
            ("key", SERVER_KEY_PEM),
            ("other", OTHER_CA_PEM),
        ]:
            files[name] = tmp_path / f"{name}.pem"
            files[name].write_text(pem, encoding="ascii")
        mosquitto.stop()
        tls_port = mosquitto.add_listener(
            f"cafile {files['ca']}", f"certfile {files['cert']}", f"keyfile {files['key']}"
        )
        mosquitto.start()
        url = f"mqtts://{mosquitto.host}:{tls_port}"

        async def body() -> None:
            async with running(settings_for(mosquitto, url=url, tls_ca=str(files["other"]))) as r:
                await until(lambda: bool(r.status.last_error))  # an untrusted server certificate
                assert r.status.connects == 0
            async with running(settings_for(mosquitto, url=url, tls_ca=str(files["ca"]))) as r:
                await r.connected()
                await publish(mosquitto, "arena/eu-9/kills", as_json(event(1)))  # plain listener
                b = await r.batch()
                assert (b.server, ids(b)) == ("eu-9", ["1"])

        run(body)


# A throw-away test PKI (EC P-256, valid until 2126), generated once with openssl:
#   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 36500 \
#     -subj "/CN=arenad test CA" -addext basicConstraints=critical,CA:TRUE ...
# The server certificate is for DNS:localhost and IP:127.0.0.1. Kept inline so the tests need no
# openssl binary; these keys protect nothing.
CA_PEM = """\
-----BEGIN CERTIFICATE-----
MIIBmjCCAT+gAwIBAgIUeMnH4FYwizWdVVDqlAT07SeOu9cwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOYXJlbmFkIHRlc3QgQ0EwIBcNMjYxMTMwMjA0MzI5WhgPMjEy
NjExMDYyMDQzMjlaMBkxFzAVBgNVBAMMDmFyZW5hZCB0ZXN0IENBMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEEnV8eUeZD+W/sXJAa6Pd06hj2mOAcLeesT079qwP
11t9/9vmfHz5FCIhMr3Bx4gSx+qDh8eqX5K6FVYoa7hTnaNjMGEwHQYDVR0OBBYE
FCRKTAJqYA8oupTCB7nrusxN67s0MB8GA1UdIwQYMBaAFCRKTAJqYA8oupTCB7nr
usxN67s0MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49
BAMCA0kAMEYCIQCL8kFZT1c4xGYXMOTN/11+HG6jUfj+MnByXt57EUrsIgIhAJyQ
hYSZivs0Y+7rWVHXmk742D168CAnV0gbJcr4b8h1
-----END CERTIFICATE-----
"""

SERVER_CERT_PEM = """\
-----BEGIN CERTIFICATE-----
MIIBrzCCAVWgAwIBAgIUSaIEHQEUzqy4jG5NBWz/fnVv8qwwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOYXJlbmFkIHRlc3QgQ0EwIBcNMjYxMTMwMjA0MzI5WhgPMjEy
NjExMDYyMDQzMjlaMBQxEjAQBgNVBAMMCWxvY2FsaG9zdDBZMBMGByqGSM49AgEG
CCqGSM49AwEHA0IABEetC1Y7xa3F56Bng2sDr2Ajk8It02eWPymQQI1WjQr6e+Ls
6npZ4f2PvspDc9Ft3DfxqOr7137gHz41rVfnDd6jfjB8MBoGA1UdEQQTMBGCCWxv
Y2FsaG9zdIcEfwAAATAJBgNVHRMEAjAAMBMGA1UdJQQMMAoGCCsGAQUFBwMBMB0G
A1UdDgQWBBSnaoW3dZcg+MlDX0RD3mMfxKGVvTAfBgNVHSMEGDAWgBQkSkwCamAP
KLqUwge567rMTeu7NDAKBggqhkjOPQQDAgNIADBFAiAQZ/AE1M20dT+eWEXPPIbg
sjD6zlZqrRFHFe3ohBVzlwIhANMcWzHXrRVBiCgAQpPNoTxdOX8XMDA1Xj0u9uTG
TUXi
-----END CERTIFICATE-----
"""

SERVER_KEY_PEM = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgVxBUOwM8O3BncDUL
9AtogX4rVSoVpKIhhZmXdiyKrX6hRANCAARHrQtWO8WtxeegZ4NrA69gI5PCLdNn
lj8pkECNVo0K+nvi7Op6WeH9j77KQ3PRbdw38ajq+9d+4B8+Na1X5w3e
-----END PRIVATE KEY-----
"""

OTHER_CA_PEM = """\
-----BEGIN CERTIFICATE-----
MIIBfTCCASOgAwIBAgIURh1zY7PoOhxz5B2xjf4aB2RvHJMwCgYIKoZIzj0EAwIw
EzERMA8GA1UEAwwIb3RoZXIgQ0EwIBcNMjYxMTMwMjA0MzI5WhgPMjEyNjExMDYy
MDQzMjlaMBMxETAPBgNVBAMMCG90aGVyIENBMFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEkdgZpUN8jrN8Np8mdnT042D7y9CLNh4vQuES9Nu9mHLhui6f7d8+66Q2
kGHbA7m1QR0Vg8adtuYjwaTk2igbNaNTMFEwHQYDVR0OBBYEFDO/bAB2repGk4qi
S2cUhU8FJw/1MB8GA1UdIwQYMBaAFDO/bAB2repGk4qiS2cUhU8FJw/1MA8GA1Ud
EwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgc8zp2sWWV1ad244XXWnN91Mx
CHOuasiHlNVIQ/ysN1UCIQDqWOHuchRVTzGfqEmmW4Dmyv1YFgdR46gYXBHEl1yU
sA==
-----END CERTIFICATE-----
"""


class TestPayloadByTopic:
    """A per-topic payload format overrides the default; the first matching filter wins."""

    def test_first_matching_filter_wins(self) -> None:
        from arenad.daemon.sources.mqtt import payload_mode
        from arenad.settings import Settings

        s = Settings.from_mapping(
            {"mqtt": {"payload": "auto", "payload_by_topic": {"arena/+/json": "json", "arena/#": "msgpack"}}}
        ).mqtt
        assert payload_mode("arena/eu-1/json", s) == "json"
        assert payload_mode("arena/eu-1/kills", s) == "msgpack"
        assert payload_mode("other/x", s) == "auto"

    def test_bad_mode_is_a_config_error(self) -> None:
        from arenad.errors import ConfigError
        from arenad.settings import Settings

        with pytest.raises(ConfigError) as info:
            Settings.from_mapping({"mqtt": {"payload_by_topic": {"arena/+/kills": "xml"}}})
        assert [p.key for p in info.value.problems] == ["mqtt.payload_by_topic.arena/+/kills"]
