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
import ipaddress
import socket
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from arenad_feeds.source import SourceFeed, SourceOptions, SourceParser, unframe_udp

from arenad.core.events import MAX_NAME_BYTES, KillEvent, PlacementEvent, Reject, RejectReason
from arenad.daemon.config import parse_hostport
from arenad.daemon.secrets import read_secret
from arenad.daemon.types import Batch
from arenad.errors import ConfigError, ConfigProblem
from arenad.feeds import NonKill

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

_SERVER_KEYS: Final = ("name", "address", "secret_env", "secret_file")
_SECTION_KEYS: Final = ("listen", "servers", "accept_unknown", "feed_options")


def _off(text: str) -> bool:
    return text.strip().lower() in ("", "off", "none", "false", "no", "0")


def _normal_ip(host: str) -> str | None:
    """The canonical text of an IP address (IPv4-mapped IPv6 as IPv4), or None if not an IP."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    # A dual-stack socket reports IPv4 senders as ::ffff:a.b.c.d; the config names them as IPv4.
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.compressed


def parse_server_address(text: str) -> tuple[str, int | None]:
    """``"10.0.0.5"``, ``"10.0.0.5:27015"``, ``"::1"`` or ``"[::1]:27015"`` -> (ip, port or None).

    Only IP addresses: a datagram is matched by the address it comes from, and a host name
    would have to be resolved (and could change) for that.
    """
    bare = _normal_ip(text.strip())
    if bare is not None:
        return bare, None
    host, port = parse_hostport(text)
    ip = _normal_ip(host)
    if ip is None:
        raise ValueError(f"{host!r} is not an IP address")
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} out of 1..65535")
    return ip, port


def sender_id(host: str, port: int) -> str:
    """The server id of an unlisted sender: ``host:port`` (``[v6]:port`` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class HlServer:
    """One ``[[source_udp.servers]]`` entry: a game server allowed to send its log here."""

    name: str  # the server id put on its kill events
    address: str  # "HOST" (any source port) or "HOST:PORT" of the game server; IPs only
    secret_env: str = ""  # environment variable holding its sv_logsecret
    secret_file: str = ""  # or a file whose first line is the secret

    def problems(self, key: str = f"{SOURCE}.servers[]") -> list[ConfigProblem]:
        """Every bad field, named ``<key>.<field>`` (the section passes ``source_udp.servers[i]``)."""
        out: list[ConfigProblem] = []
        if not isinstance(self.name, str) or not self.name.strip():
            out.append(ConfigProblem(f"{key}.name", self.name, "must be a non-empty string"))
        elif len(self.name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            out.append(ConfigProblem(f"{key}.name", self.name, f"longer than {MAX_NAME_BYTES} bytes"))
        if not isinstance(self.address, str):
            out.append(ConfigProblem(f"{key}.address", self.address, "must be a string"))
        else:
            try:
                parse_server_address(self.address)
            except ValueError as e:
                out.append(ConfigProblem(f"{key}.address", self.address, f'must be "IP" or "IP:PORT" ({e})'))
        for field_name in ("secret_env", "secret_file"):
            value = getattr(self, field_name)
            if not isinstance(value, str):
                out.append(ConfigProblem(f"{key}.{field_name}", value, "must be a string"))
        return out


@dataclass(frozen=True, slots=True)
class HlUdpSettings:
    """``[source_udp]``: the Source-engine log receiver (off by default)."""

    listen: str = "off"  # e.g. "127.0.0.1:27501"; "off" disables the receiver
    servers: tuple[HlServer, ...] = ()
    #: Parse datagrams from unlisted senders too, as server "host:port" with no secret.
    accept_unknown: bool = False
    #: Options of the Source feed parser (``bots``, ``ignore_team_kills``, ``timezone_offset``,
    #: ``clock``, ``ids``) for every server, from the TOML table [source_udp.feed_options].
    feed_options: tuple[tuple[str, object], ...] = ()

    @property
    def enabled(self) -> bool:
        return isinstance(self.listen, str) and not _off(self.listen)

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if not isinstance(self.listen, str):
            out.append(ConfigProblem(f"{SOURCE}.listen", self.listen, "must be a string"))
        elif self.enabled:
            try:
                parse_hostport(self.listen)
            except ValueError as e:
                out.append(
                    ConfigProblem(f"{SOURCE}.listen", self.listen, f'must be "HOST:PORT" or "off" ({e})')
                )
        if not isinstance(self.accept_unknown, bool):
            out.append(
                ConfigProblem(f"{SOURCE}.accept_unknown", self.accept_unknown, "must be true or false")
            )
        out.extend(self._server_problems())
        out.extend(self._feed_option_problems())
        return out

    def _server_problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if not isinstance(self.servers, tuple):
            return [ConfigProblem(f"{SOURCE}.servers", self.servers, "must be an array of tables")]
        names: dict[str, int] = {}
        addresses: dict[tuple[str, int | None], int] = {}
        for i, server in enumerate(self.servers):
            key = f"{SOURCE}.servers[{i}]"
            if not isinstance(server, HlServer):
                out.append(ConfigProblem(key, server, "must be a table"))
                continue
            mine = server.problems(key)
            out.extend(mine)
            if mine:
                continue  # duplicates are only meaningful between valid entries
            first = names.setdefault(server.name, i)
            if first != i:
                out.append(ConfigProblem(f"{key}.name", server.name, f"same name as servers[{first}]"))
            where = parse_server_address(server.address)
            first = addresses.setdefault(where, i)
            if first != i:
                out.append(
                    ConfigProblem(f"{key}.address", server.address, f"same address as servers[{first}]")
                )
        if not self.servers and self.accept_unknown is False and self.enabled:
            out.append(
                ConfigProblem(
                    f"{SOURCE}.servers",
                    [],
                    "no servers listed and accept_unknown is false: every datagram would be refused",
                )
            )
        return out

    def _feed_option_problems(self) -> list[ConfigProblem]:
        key = f"{SOURCE}.feed_options"
        if not isinstance(self.feed_options, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in self.feed_options
        ):
            return [ConfigProblem(key, self.feed_options, "must be a table of feed options")]
        options = dict(self.feed_options)
        out: list[ConfigProblem] = []
        if "server" in options:
            # The server id comes from each entry's name (or the sender's address).
            out.append(
                ConfigProblem(f"{key}.server", options.pop("server"), "set by source_udp.servers[].name")
            )
        try:
            SourceOptions.from_mapping(options)
        except ConfigError as e:
            out.extend(ConfigProblem(f"{key}.{p.key}", p.value, p.message) for p in e.problems)
        return out

    def parser_options(self, server: str) -> dict[str, Any]:
        """The Source feed options of one server's parser.

        Kills get stable ids by default: a line that arrives twice (a server resending, a
        duplicated datagram) is then refused as ``duplicate_id`` instead of rated twice.
        """
        return {"server": server, "ids": True, **dict(self.feed_options)}


def hl_udp_from_mapping(data: Mapping[str, Any]) -> tuple[HlUdpSettings, list[ConfigProblem]]:
    """``[source_udp]`` with its ``[[source_udp.servers]]`` from TOML; every problem is returned."""
    problems: list[ConfigProblem] = []
    kwargs: dict[str, Any] = {}
    for key, raw in data.items():
        if key not in _SECTION_KEYS:
            problems.append(
                ConfigProblem(f"{SOURCE}.{key}", raw, f"unknown key (known: {', '.join(_SECTION_KEYS)})")
            )
        elif key == "servers":
            kwargs["servers"] = _servers_from(raw, problems)
        elif key == "feed_options":
            if isinstance(raw, Mapping):
                kwargs["feed_options"] = tuple(raw.items())
            else:
                problems.append(ConfigProblem(f"{SOURCE}.feed_options", raw, "must be a table"))
        else:
            kwargs[key] = raw
    settings = HlUdpSettings(**kwargs)
    problems.extend(settings.problems())
    return settings, problems


def _servers_from(raw: object, problems: list[ConfigProblem]) -> tuple[HlServer, ...]:
    if not isinstance(raw, list):
        problems.append(
            ConfigProblem(f"{SOURCE}.servers", raw, "must be an array of tables ([[source_udp.servers]])")
        )
        return ()
    servers: list[HlServer] = []
    for i, entry in enumerate(raw):
        key = f"{SOURCE}.servers[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(ConfigProblem(key, entry, "must be a table"))
            continue
        known: dict[str, Any] = {}
        for k, v in entry.items():
            if k in _SERVER_KEYS:
                known[k] = v
            elif k in ("secret", "logsecret", "sv_logsecret"):
                problems.append(
                    ConfigProblem(
                        f"{key}.{k}",
                        "<hidden>",
                        "secrets never live in the config: use secret_env or secret_file",
                    )
                )
            else:
                problems.append(
                    ConfigProblem(f"{key}.{k}", v, f"unknown key (known: {', '.join(_SERVER_KEYS)})")
                )
        missing = [k for k in ("name", "address") if k not in known]
        for k in missing:
            problems.append(ConfigProblem(f"{key}.{k}", None, "required"))
        if not missing:
            servers.append(HlServer(**known))
    return tuple(servers)


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
        host = _normal_ip(raw_host) or raw_host
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
