"""Rating/tier change notifications over MQTT (``arenad.daemon.notify``): settings, topics and
payloads, filtering, the bounded queue — and, against a real mosquitto, delivery on the plain and
the retained per-player topics, reconnecting, flushing at stop, TLS and passwords.

pytest-asyncio is not used: each test runs its coroutine with ``asyncio.run`` under a 20 s bound,
and every wait inside is bounded too. That something was *not* published is shown with a marker:
the notifier publishes in offer order, so once the marker offered after it arrives, anything
offered before it that was going to be published has arrived too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

import aiomqtt
import pytest
from waiting import until

from arenad.daemon.config import validate
from arenad.daemon.config_sources import MqttSettings, NotifySettings
from arenad.daemon.notify import (
    Notifier,
    RatingChange,
    payload_of,
    topic_for,
    topic_level,
)
from arenad.errors import ConfigError

pytestmark = pytest.mark.timeout(60)

TEST_BOUND = 20.0  # seconds any one test may run
WAIT = 5.0  # seconds any one expected thing may take


class Broker(Protocol):
    """What the ``mosquitto`` fixture (tests/daemon/conftest.py) provides."""

    host: str
    port: int

    @property
    def url(self) -> str: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


class SecureBroker(Broker, Protocol):
    """What the ``secure_mosquitto`` fixture adds: TLS, a password file and ACLs."""

    ca: Path
    other_ca: Path
    users: dict[str, str]
    acl_file: Path


# ---------------------------------------------------------------------------- helpers
def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(body(), TEST_BOUND)

    asyncio.run(bounded())


def change(
    player: str = "alice",
    kind: str = "promoted",
    *,
    server: str | None = "eu-1",
    scope: str = "global",
    tier: str | None = "2H",
    old_tier: str | None = "3L",
    mu: float = 27.5,
    sigma: float = 2.25,
    rank: int | None = 41,
    t: float = 1_767_225_600.5,
) -> RatingChange:
    return RatingChange(server, scope, player, kind, tier, old_tier, mu, sigma, rank, t)


def expected(c: RatingChange) -> dict[str, object]:
    return {
        "player": c.player,
        "scope": c.scope,
        "kind": c.kind,
        "tier": c.tier,
        "old_tier": c.old_tier,
        "mu": c.mu,
        "sigma": c.sigma,
        "rank": c.rank,
        "t": c.t,
        "server": c.server,
    }


def strict_json(data: bytes) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(data.decode("utf-8"), parse_constant=refuse)


def settings_for(broker: Broker, **overrides: Any) -> NotifySettings:
    values: dict[str, Any] = {"mqtt": broker.url, "client_id": f"notify-test-{uuid.uuid4().hex[:8]}"}
    values.update(overrides)
    return NotifySettings(**values)  # raises for an invalid one


def notifier_for(settings: NotifySettings, **kwargs: Any) -> Notifier:
    options: dict[str, Any] = {"reconnect_min": 0.05, "reconnect_max": 0.3, "keepalive": 5}
    options.update(kwargs)
    return Notifier(settings, **options)


@dataclass
class Running:
    notifier: Notifier
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def finish(self, timeout: float = WAIT) -> float:
        """Set stop and wait for ``run`` to return; the seconds it took."""
        start = time.monotonic()
        self.stop.set()
        await asyncio.wait_for(self.task, timeout)
        return time.monotonic() - start


@contextlib.asynccontextmanager
async def running(notifier: Notifier) -> AsyncIterator[Running]:
    """``Notifier.run`` as a task for the body of the block; stopped (and awaited) on the way out."""
    stop = asyncio.Event()
    r = Running(notifier, stop, asyncio.create_task(notifier.run(stop)))
    try:
        yield r
    finally:
        if not r.task.done():
            await r.finish()
        r.task.result()  # surface a crash (run must never raise)


@dataclass(frozen=True)
class Received:
    topic: str
    payload: dict[str, Any]
    retain: bool


class Subscriber:
    def __init__(self, client: aiomqtt.Client) -> None:
        self.client = client

    async def next(self, timeout: float = WAIT) -> Received:
        message = await asyncio.wait_for(anext(self.client.messages), timeout)
        assert isinstance(message.payload, bytes)
        return Received(message.topic.value, strict_json(message.payload), message.retain)

    async def take(self, n: int) -> list[Received]:
        return [await self.next() for _ in range(n)]


@contextlib.asynccontextmanager
async def subscribed(
    broker: Broker, topic: str, *, user: str | None = None, tls: ssl.SSLContext | None = None
) -> AsyncIterator[Subscriber]:
    """A QoS 1 subscription to ``topic``, in place (SUBACK received) when the block starts."""
    password = None if user is None else broker_users(broker)[user]
    async with aiomqtt.Client(
        broker.host,
        broker.port,
        identifier=f"sub-{uuid.uuid4().hex[:8]}",
        username=user,
        password=password,
        tls_context=tls,
        timeout=WAIT,
    ) as client:
        await client.subscribe(topic, qos=1)
        yield Subscriber(client)


def broker_users(broker: Broker) -> dict[str, str]:
    users: dict[str, str] = getattr(broker, "users", {})
    return users


# ---------------------------------------------------------------------------- settings
class TestSettings:
    def test_defaults_are_valid_and_off(self) -> None:
        s = NotifySettings()
        assert validate(NotifySettings, {}) == (s, [])
        assert not s.enabled
        assert (s.topic, s.changes, s.retain, s.qos, s.queue, s.scopes) == (
            "arena/{server}/ratings",
            "tiers",
            False,
            0,
            10_000,
            ("global",),
        )

    @pytest.mark.parametrize(
        "overrides",
        [
            {"mqtt": "mqtts://broker.example:8883", "ca_file": "/etc/ssl/ca.pem"},
            {"mqtt": "mqtt://127.0.0.1", "username": "u", "password_env": "PW"},
            {"mqtt": "mqtt://127.0.0.1:1", "username": "u", "password_file": "/run/pw"},
            {"mqtt": "off", "ca_file": "/ignored/when/off"},
            {"topic": "games/{scope}/{server}/tiers", "retain": True, "scopes": ("global", "server:*")},
            {"scopes": ("*",), "changes": "all", "qos": 1, "queue": 1},
            {"scopes": ("global", "server:eu-1", "season:*", "event:cup")},
        ],
    )
    def test_valid(self, overrides: dict[str, Any]) -> None:
        settings, problems = validate(NotifySettings, overrides, "notify")
        assert problems == [] and settings is not None

    @pytest.mark.parametrize(
        ("overrides", "key"),
        [
            ({"mqtt": 1883}, "notify.mqtt"),
            ({"mqtt": "http://127.0.0.1:1883"}, "notify.mqtt"),
            ({"mqtt": "mqtt://"}, "notify.mqtt"),
            ({"mqtt": "mqtt://127.0.0.1:99999"}, "notify.mqtt"),
            ({"mqtt": "mqtt://127.0.0.1:1883/arena"}, "notify.mqtt"),
            ({"username": 7}, "notify.username"),
            ({"password_env": "PW"}, "notify.password_env"),
            ({"password_file": "/run/pw"}, "notify.password_file"),
            ({"username": "u", "password_env": "PW", "password_file": "/run/pw"}, "notify.password_file"),
            ({"mqtt": "mqtt://127.0.0.1", "ca_file": "/etc/ssl/ca.pem"}, "notify.ca_file"),
            ({"ca_file": None}, "notify.ca_file"),
            ({"client_id": ""}, "notify.client_id"),
            ({"client_id": "a\x00b"}, "notify.client_id"),
            ({"topic": ""}, "notify.topic"),
            ({"topic": "arena/ratings"}, "notify.topic"),
            ({"topic": "arena/{server}/+"}, "notify.topic"),
            ({"topic": "arena/{server}/#"}, "notify.topic"),
            ({"topic": "arena/{server}/{player}"}, "notify.topic"),
            ({"topic": "arena/{server}/{"}, "notify.topic"),
            ({"topic": "$SYS/{server}"}, "notify.topic"),
            ({"retain": True, "scopes": ("global", "server:*")}, "notify.topic"),
            ({"retain": True, "scopes": ("*",)}, "notify.topic"),
            ({"changes": "promotions"}, "notify.changes"),
            ({"retain": "yes"}, "notify.retain"),
            ({"qos": 2}, "notify.qos"),
            ({"qos": True}, "notify.qos"),
            ({"queue": 0}, "notify.queue"),
            ({"queue": 1.5}, "notify.queue"),
            ({"queue": 10**9}, "notify.queue"),
            ({"scopes": ()}, "notify.scopes"),
            ({"scopes": "global"}, "notify.scopes"),
            ({"scopes": ("planet",)}, "notify.scopes"),
            ({"scopes": ("server",)}, "notify.scopes"),
            ({"scopes": ("global:x",)}, "notify.scopes"),
            ({"scopes": ("global", "global")}, "notify.scopes"),
            ({"scopes": (1,)}, "notify.scopes"),
        ],
    )
    def test_each_bad_value_names_its_key(self, overrides: dict[str, Any], key: str) -> None:
        _, problems = validate(NotifySettings, {"mqtt": "mqtts://127.0.0.1", **overrides}, "notify")
        assert [p.key for p in problems] == [key], problems
        assert problems[0].message

    def test_client_id_must_differ_from_the_mqtt_sources(self) -> None:
        notify = NotifySettings(mqtt="mqtt://127.0.0.1", client_id="arenad")
        clash = notify.conflicts(MqttSettings(url="mqtt://127.0.0.1"))
        assert [p.key for p in clash] == ["notify.client_id"]
        assert NotifySettings(mqtt="mqtt://127.0.0.1").conflicts(MqttSettings(url="mqtt://127.0.0.1")) == []
        assert notify.conflicts(MqttSettings()) == []  # [mqtt] off

    def test_unreadable_secrets_are_config_errors_naming_notify_keys(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("ARENAD_TEST_NOTIFY_PW", raising=False)
        cases: list[tuple[dict[str, Any], str]] = [
            ({"username": "u", "password_env": "ARENAD_TEST_NOTIFY_PW"}, "notify.password_env"),
            ({"username": "u", "password_file": str(tmp_path / "missing")}, "notify.password_file"),
            ({"mqtt": "mqtts://127.0.0.1", "ca_file": str(tmp_path / "missing.pem")}, "notify.ca_file"),
        ]
        for overrides, key in cases:
            settings = NotifySettings(**{"mqtt": "mqtt://127.0.0.1", **overrides})
            with pytest.raises(ConfigError) as e:
                Notifier(settings)
            assert [p.key for p in e.value.problems] == [key]
        Notifier(NotifySettings(username="u", password_env="ARENAD_TEST_NOTIFY_PW"))  # off: not read


# ---------------------------------------------------------------------------- topics and payloads
class TestTopicsAndPayloads:
    def test_payload_is_the_change_as_json(self) -> None:
        c = change()
        assert strict_json(payload_of(c)) == expected(c)
        none = change(server=None, tier=None, old_tier=None, rank=None, kind="rating")
        assert strict_json(payload_of(none)) == expected(none)

    def test_non_finite_numbers_become_null(self) -> None:
        c = change(mu=math.nan, sigma=math.inf, t=-math.inf)
        doc = strict_json(payload_of(c))
        assert (doc["mu"], doc["sigma"], doc["t"]) == (None, None, None)

    def test_non_ascii_names_are_utf8(self) -> None:
        c = change(player="Zoë ⚔")
        assert "Zoë ⚔".encode() in payload_of(c)
        assert strict_json(payload_of(c))["player"] == "Zoë ⚔"

    def test_plain_topic(self) -> None:
        s = NotifySettings()
        assert topic_for(s, change(server="eu-1")) == "arena/eu-1/ratings"
        assert topic_for(s, change(server=None)) == "arena/_/ratings"
        assert topic_for(s, change(server="")) == "arena/_/ratings"
        assert topic_for(s, change(server="_")) == "arena/%5F/ratings"  # "_" always means "no server"

    def test_retained_topic_is_per_player_and_escaped(self) -> None:
        s = NotifySettings(retain=True)
        assert topic_for(s, change(player="alice")) == "arena/eu-1/ratings/alice"
        weird = "a/b+c#d%e\x01"
        topic = topic_for(s, change(player=weird, server="$eu/1"))
        assert "+" not in topic and "#" not in topic
        levels = topic.split("/")
        assert len(levels) == 4
        assert [unquote(levels[1]), unquote(levels[3])] == ["$eu/1", weird]
        assert not levels[1].startswith("$")

    def test_scope_placeholder(self) -> None:
        s = NotifySettings(topic="arena/{scope}/{server}/tiers", retain=True, scopes=("*",))
        assert topic_for(s, change(scope="server:eu-1")) == "arena/server:eu-1/eu-1/tiers/alice"

    def test_topic_level_leaves_ordinary_names_alone(self) -> None:
        for name in ("eu-1", "Alice_99", "Zoë", "a.b:c", "x$y"):
            assert topic_level(name) == name


# ---------------------------------------------------------------------------- offer
class TestOffer:
    def test_tiers_mode_keeps_placements_promotions_demotions(self) -> None:
        n = Notifier(NotifySettings(mqtt="mqtt://127.0.0.1"))
        for kind in ("placed", "promoted", "demoted", "rating", "bogus"):
            n.offer(change(kind=kind))
        assert n.queued == 3
        assert n.dropped == 0

    def test_all_mode_keeps_rating_changes_too(self) -> None:
        n = Notifier(NotifySettings(mqtt="mqtt://127.0.0.1", changes="all"))
        for kind in ("placed", "promoted", "demoted", "rating", "bogus"):
            n.offer(change(kind=kind))
        assert n.queued == 4

    @pytest.mark.parametrize(
        ("scopes", "kept"),
        [
            (("global",), ["global"]),
            (("server:eu-1",), ["server:eu-1"]),
            (("server:*", "event:cup"), ["server:eu-1", "server:us-2", "event:cup"]),
            (("*",), ["global", "server:eu-1", "server:us-2", "season:2026-Q1", "event:cup", "event:other"]),
        ],
    )
    def test_scopes(self, scopes: tuple[str, ...], kept: list[str]) -> None:
        n = Notifier(NotifySettings(mqtt="mqtt://127.0.0.1", scopes=scopes))
        for scope in ("global", "server:eu-1", "server:us-2", "season:2026-Q1", "event:cup", "event:other"):
            n.offer(change(scope=scope))
        assert [c.scope for c in n._queue] == kept

    def test_full_queue_drops_the_oldest_and_counts(self) -> None:
        n = Notifier(NotifySettings(mqtt="mqtt://127.0.0.1", queue=3))
        for i in range(5):
            n.offer(change(f"p{i}"))
        assert n.queued == 3
        assert n.dropped == 2
        assert [c.player for c in n._queue] == ["p2", "p3", "p4"]

    def test_disabled_takes_nothing_and_run_returns_at_once(self) -> None:
        n = Notifier(NotifySettings())
        assert not n.enabled
        n.offer(change())
        assert (n.queued, n.dropped) == (0, 0)

        async def body() -> None:
            await asyncio.wait_for(n.run(asyncio.Event()), 1.0)

        run(body)

    def test_offer_is_cheap(self) -> None:
        n = Notifier(NotifySettings(mqtt="mqtt://127.0.0.1", queue=1000, changes="all"))
        c = change()
        start = time.perf_counter()
        for _ in range(100_000):
            n.offer(c)
        elapsed = time.perf_counter() - start
        assert n.queued == 1000 and n.dropped == 99_000
        assert elapsed < 1.0  # ~0.3 µs each; generous for slow CI


# ---------------------------------------------------------------------------- against mosquitto
class TestDelivery:
    @pytest.mark.parametrize("qos", [0, 1])
    def test_plain_topic_payloads_in_order(self, mosquitto: Broker, qos: int) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, qos=qos))
            sent = [
                change("alice", "placed", old_tier=None, rank=None),
                change("bob", "promoted", server=None),
                change("carol", "demoted", tier="4L", old_tier="3H", mu=-1.5),
            ]
            async with subscribed(mosquitto, "arena/#") as sub, running(n) as r:
                for c in sent:
                    n.offer(c)
                got = await sub.take(3)
                assert [g.topic for g in got] == [
                    "arena/eu-1/ratings",
                    "arena/_/ratings",
                    "arena/eu-1/ratings",
                ]
                assert [g.payload for g in got] == [expected(c) for c in sent]
                assert not any(g.retain for g in got)
                await until(lambda: n.published == 3)
                assert n.connected and n.connects == 1
                await r.finish()
                assert not n.connected
                assert (n.dropped, n.failures) == (0, 0)

        run(body)

    def test_tiers_mode_filters_out_rating_changes(self, mosquitto: Broker) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, changes="tiers"))
            async with subscribed(mosquitto, "arena/#") as sub, running(n):
                n.offer(change("quiet", "rating"))
                n.offer(change("marker", "promoted"))
                assert (await sub.next()).payload["player"] == "marker"

        run(body)

    def test_all_mode_sends_rating_changes(self, mosquitto: Broker) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, changes="all"))
            async with subscribed(mosquitto, "arena/#") as sub, running(n):
                n.offer(change("moved", "rating", tier="2H", old_tier="2H"))
                n.offer(change("marker", "promoted"))
                got = await sub.take(2)
                assert [(g.payload["player"], g.payload["kind"]) for g in got] == [
                    ("moved", "rating"),
                    ("marker", "promoted"),
                ]

        run(body)

    def test_scope_filter(self, mosquitto: Broker) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, scopes=("server:*",)))
            async with subscribed(mosquitto, "arena/#") as sub, running(n):
                n.offer(change("g", scope="global"))
                n.offer(change("s", scope="season:2026-Q1"))
                n.offer(change("marker", scope="server:eu-1"))
                got = await sub.next()
                assert (got.payload["player"], got.payload["scope"]) == ("marker", "server:eu-1")

        run(body)

    def test_retained_per_player_reaches_a_late_subscriber(self, mosquitto: Broker) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, retain=True, qos=1))
            async with running(n) as r:
                n.offer(change("alice", "placed", tier="3L", old_tier=None))
                n.offer(change("alice", "promoted", tier="3H", old_tier="3L"))
                n.offer(change("b/o+b#", "placed", tier="4H", old_tier=None))
                n.offer(change("carol", "placed", server="us-2"))
                await until(lambda: n.published == 4)
                await r.finish()
            # Published and disconnected before this subscriber exists: only retained ones arrive.
            async with subscribed(mosquitto, "arena/eu-1/ratings/+") as sub:
                got = sorted(await sub.take(2), key=lambda g: g.topic)
                assert all(g.retain for g in got)
                assert [g.topic for g in got] == [
                    "arena/eu-1/ratings/alice",
                    "arena/eu-1/ratings/b%2Fo%2Bb%23",
                ]
                assert [(g.payload["player"], g.payload["tier"]) for g in got] == [
                    ("alice", "3H"),
                    ("b/o+b#", "4H"),
                ]
                with pytest.raises(TimeoutError):  # alice's older state is not retained; carol is us-2's
                    await sub.next(timeout=0.3)

        run(body)

    def test_queue_overflow_drops_the_oldest_and_the_rest_is_delivered(self, mosquitto: Broker) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, queue=3, qos=1))
            for i in range(5):  # before run: queued, the two oldest dropped
                n.offer(change(f"p{i}"))
            assert (n.queued, n.dropped) == (3, 2)
            async with subscribed(mosquitto, "arena/#") as sub, running(n):
                got = await sub.take(3)
                assert [g.payload["player"] for g in got] == ["p2", "p3", "p4"]
                await until(lambda: n.published == 3)
                assert n.dropped == 2

        run(body)

    def test_many_changes_are_published_in_order(self, mosquitto: Broker) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, qos=1))
            async with subscribed(mosquitto, "arena/#") as sub, running(n):
                for i in range(500):
                    n.offer(change(f"p{i}"))
                got = await sub.take(500)
                assert [g.payload["player"] for g in got] == [f"p{i}" for i in range(500)]
                await until(lambda: n.published == 500)

        run(body)


class TestConnection:
    def test_broker_down_at_start_then_up(self, mosquitto: Broker) -> None:
        mosquitto.stop()

        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, retain=True, qos=1))
            async with running(n) as r:
                n.offer(change("alice"))
                await until(lambda: n.failures >= 2)
                assert not n.connected and n.published == 0 and n.last_error
                assert n.queued == 1  # kept while the broker is down
                await asyncio.to_thread(mosquitto.start)
                started = time.monotonic()
                await until(lambda: n.published == 1)  # the backoff is at most 0.3 s here
                assert time.monotonic() - started < WAIT
                assert n.connected and n.connects == 1
                await r.finish()
            async with subscribed(mosquitto, "arena/+/ratings/+") as sub:
                got = await sub.next()
                assert (got.topic, got.payload, got.retain) == (
                    "arena/eu-1/ratings/alice",
                    expected(change("alice")),
                    True,
                )

        run(body)

    def test_broker_restart_mid_stream(self, mosquitto: Broker) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, qos=1))
            async with running(n):
                async with subscribed(mosquitto, "arena/#") as sub:
                    n.offer(change("before"))
                    assert (await sub.next()).payload["player"] == "before"
                await asyncio.to_thread(mosquitto.stop)
                await until(lambda: not n.connected)
                n.offer(change("during"))
                await asyncio.to_thread(mosquitto.start)
                await until(lambda: n.published == 2)
                assert n.connects == 2 and n.failures >= 1
                async with subscribed(mosquitto, "arena/#") as sub:
                    n.offer(change("after"))
                    assert (await sub.next()).payload["player"] == "after"

        run(body)

    def test_stop_flushes_what_is_queued(self, mosquitto: Broker) -> None:
        async def body() -> None:
            n = notifier_for(settings_for(mosquitto, qos=1))
            async with subscribed(mosquitto, "arena/#") as sub, running(n) as r:
                await until(lambda: n.connected)
                for i in range(300):
                    n.offer(change(f"p{i}"))
                took = await r.finish()  # stop at once: the queue is flushed first
                assert took < 2.5
                assert (n.published, n.dropped, n.queued) == (300, 0, 0)
                got = await sub.take(300)
                assert [g.payload["player"] for g in got] == [f"p{i}" for i in range(300)]

        run(body)

    def test_stop_while_the_broker_is_down_is_prompt(self, mosquitto: Broker) -> None:
        mosquitto.stop()

        async def body() -> None:
            n = notifier_for(settings_for(mosquitto), reconnect_min=5.0, reconnect_max=5.0)
            async with running(n) as r:
                n.offer(change("a"))
                n.offer(change("b"))
                await until(lambda: n.failures >= 1)
                took = await r.finish()
                assert took < 1.0
            assert (n.published, n.dropped, n.queued, n.connected) == (0, 2, 0, False)

        run(body)

    def test_tls_and_password(self, secure_mosquitto: SecureBroker, tmp_path: Path) -> None:
        broker = secure_mosquitto
        # The broker's ACL lets arenad read kills only; it also needs to publish ratings.
        acl = broker.acl_file.read_text(encoding="utf-8")
        broker.acl_file.write_text(
            acl.replace("user arenad\n", "user arenad\ntopic write arena/+/ratings\n"), encoding="utf-8"
        )
        broker.stop()
        broker.start()
        password_file = tmp_path / "notify-password"
        password_file.write_text(broker.users["arenad"] + "\n", encoding="utf-8")
        good = settings_for(
            broker, username="arenad", password_file=str(password_file), ca_file=str(broker.ca), qos=1
        )
        untrusted = settings_for(
            broker, username="arenad", password_file=str(password_file), ca_file=str(broker.other_ca)
        )
        spectator_tls = ssl.create_default_context(cafile=str(broker.ca))

        async def body() -> None:
            n = notifier_for(untrusted)
            async with running(n):
                await until(lambda: n.failures >= 1)  # an untrusted server certificate
                assert n.connects == 0 and not n.connected
            n = notifier_for(good)
            async with subscribed(broker, "arena/#", user="spectator", tls=spectator_tls) as sub, running(n):
                n.offer(change("alice"))
                got = await sub.next()
                assert (got.topic, got.payload) == ("arena/eu-1/ratings", expected(change("alice")))
                assert n.connects == 1

        run(body)
