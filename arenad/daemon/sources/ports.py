"""The sources' port: one ``Source`` protocol, and the list the daemon runs (``default_sources``).

A source turns a transport into ``Batch``es on the engine queue; it is handed a
``SourceContext`` (the queue and the stop signals), never the daemon, in the manner of h11's
protocol code handed a ``send`` callable. Each source owns its counters (``dropped``,
``nonkills``, ``stats``); the daemon's metrics add them up. The lifecycle is the same for all:

1. ``check()`` before the state is loaded: secrets and TLS files, so a typo fails at start with
   its key named instead of surfacing later inside a task;
2. ``open(ctx)`` after recovery and before the daemon is ready: sockets are bound, the bound
   addresses returned (for logs and tests);
3. ``run(ctx)`` as one task until the source is done: sockets close when ``ctx.stop`` is set (no
   new datagrams; what is queued is still applied); a source that acknowledges (MQTT) keeps its
   connection until ``ctx.drained`` — everything it handed over was applied — so no ack is lost.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from arenad.daemon.config_sources import HlUdpSettings, MqttSettings, TailSpec, UdpSettings
from arenad.daemon.sources.hl_udp import HlUdpSource, load_secrets, open_hl_udp
from arenad.daemon.sources.mqtt import MqttStatus, load_password, run_mqtt, tls_context
from arenad.daemon.sources.tail import LogFollower
from arenad.daemon.sources.udp import AuthRejectCollector, UdpSource, load_udp_keys, open_udp
from arenad.daemon.types import Batch
from arenad.feeds import ChatLine, feed_plugin, loaded_feeds
from arenad.settings import Settings

log = structlog.get_logger("arenad")


@dataclass(slots=True)
class SourceContext:
    """What a source may use: the engine queue and the daemon's stop signals."""

    queue: asyncio.Queue[Batch]
    stop: asyncio.Event  # SIGTERM / SIGINT: take nothing new
    drained: asyncio.Event  # everything queued was applied (set after stop)
    state_dir: Path
    clock_ms: Callable[[], int]  # the daemon's step-proof wall clock, in ms
    #: Checkpointed resume positions by key (log followers).
    positions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Where players' chat lines go (the in-game commands, ``arenad.ingame``); never journaled.
    #: ``None``: no one listens, and sources drop chat.
    chat: Callable[[ChatLine], None] | None = None


class Source(Protocol):
    """One transport feeding the engine queue (see the module docstring)."""

    name: str
    #: Events that could not be delivered (a full queue), by source name.
    dropped: Counter[str]

    def check(self) -> None: ...

    async def open(self, ctx: SourceContext) -> dict[str, Any]: ...

    async def run(self, ctx: SourceContext) -> None: ...

    def close(self) -> None: ...

    def nonkills(self) -> Counter[str]: ...

    def collectors(self) -> list[Any]: ...


class _Quiet:
    """Defaults for a source with nothing to close, no non-kills and no metrics of its own."""

    def close(self) -> None:
        return None

    def nonkills(self) -> Counter[str]:
        return Counter()

    def collectors(self) -> list[Any]:
        return []


class _Datagrams(_Quiet):
    """Shared by the two UDP sources: a bound transport closed at stop."""

    name = "?"

    def __init__(self) -> None:
        self.dropped: Counter[str] = Counter()
        self.transport: asyncio.DatagramTransport | None = None

    async def run(self, ctx: SourceContext) -> None:
        await ctx.stop.wait()
        self.close()  # no new datagrams; what is queued is still applied

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def bound(self) -> dict[str, Any]:
        assert self.transport is not None
        return {self.name: self.transport.get_extra_info("sockname")[:2]}


class UdpIngest(_Datagrams):
    """``[udp]``: msgpack datagrams, optionally signed (``arenad/auth.py``)."""

    name = "udp"

    def __init__(self, settings: UdpSettings) -> None:
        super().__init__()
        self.settings = settings
        self.auth_rejected: Counter[str] = Counter()  # by arenad.auth.AuthReason
        self._keys: dict[str, bytes] | None = None
        self.protocol: UdpSource | None = None

    def check(self) -> None:
        if self.settings.auth != "off":
            self._keys = load_udp_keys(self.settings)

    def collectors(self) -> list[Any]:
        return [AuthRejectCollector(self.auth_rejected)] if self.settings.auth != "off" else []

    async def open(self, ctx: SourceContext) -> dict[str, Any]:
        self.transport, self.protocol = await open_udp(
            self.settings,
            ctx.queue,
            self.dropped,
            keys=self._keys,
            auth_rejected=self.auth_rejected,
            state_dir=ctx.state_dir,
            clock_ms=ctx.clock_ms,
        )
        return self.bound()


class SourceLogIngest(_Datagrams):
    """``[source_udp]``: Source engine ``logaddress`` datagrams (HLstatsX-style)."""

    name = "source_udp"

    def __init__(self, settings: HlUdpSettings) -> None:
        super().__init__()
        self.settings = settings
        self._secrets: dict[str, str | None] | None = None
        self.protocol: HlUdpSource | None = None

    def check(self) -> None:
        self._secrets = load_secrets(self.settings)

    def nonkills(self) -> Counter[str]:
        return Counter(self.protocol.nonkills) if self.protocol is not None else Counter()

    async def open(self, ctx: SourceContext) -> dict[str, Any]:
        self.transport, self.protocol = await open_hl_udp(
            self.settings, ctx.queue, self.dropped, self._secrets
        )
        self.protocol.chat = ctx.chat
        return self.bound()


class MqttIngest(_Quiet):
    """``[mqtt]``: QoS 1 messages, acknowledged once journaled, fsynced and applied."""

    name = "mqtt"

    def __init__(self, settings: MqttSettings) -> None:
        self.settings = settings
        self.dropped: Counter[str] = Counter()  # never: MQTT waits for queue space
        self.status = MqttStatus()
        self._password: str | None = None

    def check(self) -> None:
        self._password = load_password(self.settings)
        tls_context(self.settings)

    async def open(self, ctx: SourceContext) -> dict[str, Any]:
        return {}

    async def run(self, ctx: SourceContext) -> None:
        await run_mqtt(self.settings, ctx.queue, self.status, ctx.drained, self._password)


class TailIngest(_Quiet):
    """``[[tail]]`` / ``--tail``: one followed game-server log file through a feed plugin."""

    def __init__(self, spec: TailSpec) -> None:
        self.spec = spec
        self.name = spec.key
        self.dropped: Counter[str] = Counter()  # never: a follower waits for queue space
        self.follower: LogFollower | None = None

    def check(self) -> None:
        feed_plugin(self.spec.format, key="tail.format")  # an unknown format fails at start

    async def open(self, ctx: SourceContext) -> dict[str, Any]:
        spec = self.spec
        plugin = feed_plugin(spec.format, key="tail.format")
        options = dict(spec.options)
        if spec.server is not None:
            options.setdefault("server", spec.server)
        self.follower = LogFollower(
            spec, plugin.parser(options), ctx.queue, ctx.positions.get(spec.key), chat=ctx.chat
        )
        return {}

    async def run(self, ctx: SourceContext) -> None:
        assert self.follower is not None
        await self.follower.run(ctx.stop)

    def nonkills(self) -> Counter[str]:
        return Counter(self.follower.status.nonkills) if self.follower is not None else Counter()

    def stats(self) -> dict[str, int | float]:
        st = self.follower.status if self.follower is not None else None
        return {
            "lines": st.lines if st else 0,
            "rotations": st.rotations if st else 0,
            "clock_reanchored": st.clock["reanchored"] if st else 0,
            "clock_moved_seconds": round(st.moved_seconds, 3) if st else 0.0,
            "clock_fast": st.clock["fast_clock"] if st else 0,
            "chat": st.chat if st else 0,
        }


def default_sources(settings: Settings) -> list[Source]:
    """The sources the settings enable, in the order they start: UDP, Source logs, MQTT, tails."""
    out: list[Source] = []
    if settings.udp.enabled:
        out.append(UdpIngest(settings.udp))
    if settings.source_udp.enabled:
        out.append(SourceLogIngest(settings.source_udp))
    if settings.mqtt.enabled:
        out.append(MqttIngest(settings.mqtt))
    if settings.tail:
        for error in loaded_feeds()[1]:
            log.warning("feed_plugin_failed", error=error)
        out.extend(TailIngest(spec) for spec in settings.tail)
    return out


def merged(counters: Iterable[Counter[str]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for c in counters:
        out.update(c)
    return out
