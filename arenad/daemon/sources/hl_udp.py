"""UDP log receiver for Source-engine servers (``logaddress_add``), on its own port.

Each datagram carries one HL log line behind ``FF FF FF FF`` and a type byte: ``R`` + line, or
``S`` + secret + line when the server sets ``sv_logsecret``. A datagram is matched to a server
of ``[[source_udp.servers]]`` by its source address (``HOST:PORT`` exactly, else ``HOST``), its
framing is checked with that server's secret (``unframe_udp``), and the line goes through that
server's own ``SourceParser``. Only kill events and rejects reach the engine queue; the other
deaths the log reports (suicides, world and team kills) are counted in ``nonkills``, and lines
that say nothing to rate (purchases, damage, chat: most of a Source log) are not queued at all,
so they cannot take queue slots from kills.

Refusals: a sender that is not listed (unless ``accept_unknown``), an ``R`` datagram where a
secret is configured, and an ``S`` datagram with another secret (or where none is configured)
are ``unauthorised``; a datagram that is not a log packet is ``malformed``.

One line is one datagram, so parsing in ``datagram_received`` costs one line (~10 µs) and never
a burst: unlike the msgpack UDP source, nothing is deferred to the engine task. UDP cannot be
paused, so when the engine queue is full the datagram's items are dropped and counted in
``dropped["source_udp"]``.

Secrets never live in the config file: each server names an environment variable
(``secret_env``) or a file whose first line is the secret (``secret_file``).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog
from arenad_feeds.source import SourceFeed, SourceOptions, SourceParser, unframe_udp

from arenad.core.events import KillEvent, PlacementEvent, Reject, RejectReason
from arenad.daemon.config import parse_hostport, validate
from arenad.daemon.config_sources import HlServer, HlUdpSettings, normal_ip, parse_server_address
from arenad.daemon.secrets import read_secret
from arenad.daemon.types import Batch
from arenad.errors import ConfigError, ConfigProblem
from arenad.feeds import ChatLine, NonKill

log = structlog.get_logger("arenad.source_udp")

#: The name of this source in batches, metrics and ``dropped``; also its config section.
SOURCE: Final = "source_udp"

#: SO_RCVBUF bytes: a round end makes a server send dozens of lines at once.
RECEIVE_BUFFER: Final = 1 << 20

#: With ``accept_unknown``, at most this many unlisted senders get a parser: each one holds
#: state, and source addresses of UDP are trivially forged, so a flood must not grow memory.
MAX_UNKNOWN_SENDERS: Final = 1024

#: Source addresses whose route is remembered (known, unknown or refused), bounded for the same
#: reason; past it a datagram's route is looked up afresh, which costs an ``ip_address`` parse.
_ROUTE_CACHE_SIZE: Final = 4096


def sender_id(host: str, port: int) -> str:
    """The server id of an unlisted sender: ``host:port`` (``[v6]:port`` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def feed_option_problems(options: Mapping[str, object]) -> list[ConfigProblem]:
    """What the Source feed says of ``[source_udp.feed_options]``, each problem named
    ``source_udp.feed_options.<option>``: the settings know only that it is a table, and refuse
    ``server`` themselves (each server's id is its entry's name)."""
    try:
        SourceOptions.from_mapping({k: v for k, v in options.items() if k != "server"})
    except ConfigError as e:
        return [ConfigProblem(f"{SOURCE}.feed_options.{p.key}", p.value, p.message) for p in e.problems]
    return []


def source_udp_feed_options(document: Mapping[str, Any]) -> list[ConfigProblem]:
    """``feed_option_problems`` of a whole TOML document (a check for ``load_settings``)."""
    table = document.get(SOURCE, {})
    options = table.get("feed_options", {}) if isinstance(table, Mapping) else {}
    return feed_option_problems(options) if isinstance(options, Mapping) else []


def hl_udp_from_mapping(data: Mapping[str, Any]) -> tuple[HlUdpSettings, list[ConfigProblem]]:
    """``[source_udp]`` with its ``[[source_udp.servers]]`` from TOML, and every problem, the
    feed's own of ``feed_options`` included (the defaults when there is any problem)."""
    settings, problems = validate(HlUdpSettings, data, SOURCE)
    options = data.get("feed_options", {})
    if isinstance(options, Mapping):
        problems.extend(feed_option_problems(options))
    return (settings if settings is not None and not problems else HlUdpSettings()), problems


def load_secret(server: HlServer, key: str = f"{SOURCE}.servers[]") -> str | None:
    """The server's ``sv_logsecret`` from ``secret_env`` (first) or ``secret_file``; None if neither.

    A named source that is missing or empty is a ``ConfigError`` naming ``<key>.secret_env`` or
    ``<key>.secret_file``: listening without the secret would only refuse every datagram later.
    """
    return read_secret(server.secret_env, server.secret_file, f"{key}.secret_env", f"{key}.secret_file")


def load_secrets(settings: HlUdpSettings) -> dict[str, str | None]:
    """Every listed server's secret by server name; one ``ConfigError`` naming every failure."""
    secrets: dict[str, str | None] = {}
    problems: list[ConfigProblem] = []
    for i, server in enumerate(settings.servers):
        try:
            secrets[server.name] = load_secret(server, f"{SOURCE}.servers[{i}]")
        except ConfigError as e:
            problems.extend(e.problems)
    if problems:
        raise ConfigError(problems)
    return secrets


@dataclass(slots=True)
class _Route:
    """Where a sender's datagrams go: its server id, secret and parser."""

    server: str
    secret: str | None
    parser: SourceParser


class HlUdpSource(asyncio.DatagramProtocol):
    """Unframes and parses each server's log datagrams; queues kills and rejects, counts the rest."""

    def __init__(
        self,
        settings: HlUdpSettings,
        queue: asyncio.Queue[Batch],
        dropped: Counter[str],
        secrets: Mapping[str, str | None] | None = None,
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.dropped = dropped
        if secrets is None:
            secrets = load_secrets(settings)
        self._feed = SourceFeed()
        #: Listed servers by (ip, port) and by ip alone ("HOST" entries accept any port).
        self._exact: dict[tuple[str, int], _Route] = {}
        self._by_host: dict[str, _Route] = {}
        #: Every parser by server id (listed and, with accept_unknown, unlisted senders).
        self.parsers: dict[str, SourceParser] = {}
        for server in settings.servers:
            route = _Route(server.name, secrets.get(server.name), self._parser(server.name))
            host, port = parse_server_address(server.address)
            if port is None:
                self._by_host[host] = route
            else:
                self._exact[(host, port)] = route
        self._unknown_parsers: dict[str, SourceParser] = {}
        self._routes: dict[tuple[str, int], _Route | Reject] = {}
        #: Deaths that are not pairwise kills, by kind (suicide, world_kill, ...): metrics only.
        self.nonkills: Counter[str] = Counter()
        #: Lines on which the feed parser raised (a bug in it; each becomes a malformed reject).
        self.parser_errors = 0
        self.transport: asyncio.DatagramTransport | None = None
        #: Where chat lines go (the in-game commands), set by the source; None: dropped.
        self.chat: Callable[[ChatLine], None] | None = None

    def _parser(self, server: str) -> SourceParser:
        parser = self._feed.parser(self.settings.parser_options(server))
        self.parsers[server] = parser
        return parser

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport is not a subclass of asyncio.DatagramTransport: no isinstance.
        self.transport = transport  # type: ignore[assignment]

    def _route(self, host: str, port: int) -> _Route | Reject:
        route = self._routes.get((host, port))
        if route is not None:
            return route
        route = self._lookup(host, port)
        if len(self._routes) < _ROUTE_CACHE_SIZE:
            self._routes[(host, port)] = route
        return route

    def _lookup(self, raw_host: str, port: int) -> _Route | Reject:
        host = normal_ip(raw_host) or raw_host
        route = self._exact.get((host, port)) or self._by_host.get(host)
        if route is not None:
            return route
        where = sender_id(host, port)
        if not self.settings.accept_unknown:
            return Reject(RejectReason.UNAUTHORISED, f"sender {where} is not in {SOURCE}.servers")
        # Kept apart from the listed servers' parsers, even should a listed name read "host:port".
        parser = self._unknown_parsers.get(where)
        if parser is None:
            if len(self._unknown_parsers) >= MAX_UNKNOWN_SENDERS:
                return Reject(
                    RejectReason.UNAUTHORISED, f"sender {where}: over {MAX_UNKNOWN_SENDERS} unlisted senders"
                )
            parser = self._unknown_parsers[where] = self._parser(where)
        return _Route(where, None, parser)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        route = self._route(str(addr[0]), int(addr[1]))
        if isinstance(route, Reject):
            self._put([route], None)
            return
        line = unframe_udp(data, route.secret)
        if isinstance(line, Reject):
            self._put([line], route.server)
            return
        try:
            parsed = route.parser.feed(line, time.time())
        except Exception as e:  # a parser bug must cost one line, not the receiver
            self.parser_errors += 1
            reject = Reject(RejectReason.MALFORMED, f"feed parser failed: {type(e).__name__}: {e}")
            self._put([reject], route.server)
            return
        items: list[KillEvent | PlacementEvent | Reject] = []
        for item in parsed:
            if isinstance(item, (KillEvent, Reject)):
                items.append(item)
            elif isinstance(item, NonKill):
                self.nonkills[item.kind] += 1
            elif isinstance(item, ChatLine) and self.chat is not None:
                try:
                    self.chat(item)  # the in-game commands: never journaled
                except Exception:  # the sink's bug must not stop the receiver
                    log.exception("chat_sink_failed", server=route.server)
            # Identity updates and match boundaries matter to the parser's own state only.
        if items:
            self._put(items, route.server)

    def _put(self, items: list[KillEvent | PlacementEvent | Reject], server: str | None) -> None:
        try:
            self.queue.put_nowait(Batch(SOURCE, items, server=server))
        except asyncio.QueueFull:
            self.dropped[SOURCE] += len(items)

    def error_received(self, exc: Exception) -> None:  # pragma: no cover - ICMP noise on loopback
        pass


async def open_hl_udp(
    settings: HlUdpSettings,
    queue: asyncio.Queue[Batch],
    dropped: Counter[str],
    secrets: Mapping[str, str | None] | None = None,
) -> tuple[asyncio.DatagramTransport, HlUdpSource]:
    """Bind the Source log receiver; returns the transport (close it to stop) and the protocol.

    ``secrets`` (by server name) defaults to ``load_secrets(settings)``, which raises a
    ``ConfigError`` before anything is bound; a caller may load them earlier to fail sooner.
    """
    protocol = HlUdpSource(settings, queue, dropped, secrets)
    host, port = parse_hostport(settings.listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: protocol, sock=sock)
    return transport, protocol
