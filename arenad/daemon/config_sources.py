"""Typed settings of the sources' sections and of the notifier: ``[udp]`` with ``[[udp.keys]]``,
``[mqtt]`` and ``[notify]`` (one ``BrokerSettings`` model for both connections),
``[source_udp]`` with ``[[source_udp.servers]]``, and ``[[tail]]``.

Built on ``arenad.daemon.config.Section`` (strict, unknown keys refused, frozen). Secrets never
live in the config file: a key, password or log secret comes from an environment variable or a
file named here. Like ``arenad.daemon.config``, this module imports neither the daemon nor the
feeds: what a feed plugin's options mean is the plugin's to say (``feed_option_problems`` in
``arenad.daemon.sources.hl_udp``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, ClassVar, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, model_validator

from arenad.auth import KEY_ID_PATTERN
from arenad.core.events import MAX_NAME_BYTES
from arenad.daemon.config import (
    Array,
    Listen,
    Network,
    NonEmpty,
    Section,
    _off,
    check,
    one_of,
    parse_hostport,
    refuse,
)
from arenad.errors import ConfigProblem

# ---------------------------------------------------------------------------- [udp]
#: ``[udp] auth`` modes: every datagram signed; signed or not (signed ones are verified); never.
UDP_AUTH_MODES = ("required", "optional", "off")


class UdpKey(Section):
    """``[[udp.keys]]``: one game server's signing key, read from ``secret_env`` or ``secret_file``
    (hex digits, at least 16 bytes); the secret itself never lives in the config."""

    id: Annotated[
        str,
        check(
            lambda v: "" if KEY_ID_PATTERN.fullmatch(v) else "must be 1-64 characters of A-Z a-z 0-9 . _ : -"
        ),
    ]
    secret_env: str = ""
    secret_file: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if bool(self.secret_env) == bool(self.secret_file):
            refuse(
                [
                    ConfigProblem(
                        "secret_file", self.secret_file, "name exactly one of secret_env or secret_file"
                    )
                ]
            )
        return self


class UdpSettings(Section):
    """``[udp]``: msgpack datagrams (one event or an array of events each), optionally signed
    (``arenad.auth``; ``auth``, ``keys``, ``max_skew``, ``allow_unsigned``)."""

    listen: Listen = "127.0.0.1:27500"  # "off" disables the source
    max_datagram: Annotated[int, Field(ge=16, le=65535)] = 65507
    allow: Array[Network] = ("127.0.0.0/8", "::1/128")  # source networks accepted
    receive_buffer: Annotated[int, Field(ge=0)] = 4 * 1024 * 1024  # SO_RCVBUF bytes, to ride out bursts
    auth: Annotated[str, one_of(UDP_AUTH_MODES, 'must be "required", "optional" or "off"')] = "off"
    #: Unsigned datagrams ("optional" or "off") on a listen address other than loopback.
    allow_unsigned: bool = False
    keys: Array[UdpKey] = ()  # [[udp.keys]] id, secret_env | secret_file
    max_skew: Annotated[float, Field(ge=0.001, le=86400)] = 30.0  # seconds a signature may be off

    @property
    def enabled(self) -> bool:
        return not _off(self.listen)

    @property
    def loopback(self) -> bool:
        """Whether ``listen`` is a loopback address (only local processes can send)."""
        try:
            host, _ = parse_hostport(self.listen)
        except ValueError:
            return False
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @model_validator(mode="after")
    def _auth(self) -> Self:
        found = [
            ConfigProblem(f"keys[{i}].id", key.id, "listed twice")
            for i, key in enumerate(self.keys)
            if key.id in [k.id for k in self.keys[:i]]
        ]
        if self.auth == "required" and not self.keys:
            found.append(ConfigProblem("auth", self.auth, "needs at least one [[udp.keys]] entry"))
        elif self.auth == "off" and self.keys:
            found.append(
                ConfigProblem(
                    "auth", self.auth, '[[udp.keys]] are listed but never used: set "required" or "optional"'
                )
            )
        if self.auth != "required" and not self.allow_unsigned and self.enabled and not self.loopback:
            found.append(
                ConfigProblem(
                    "auth",
                    self.auth,
                    f"accepts unsigned datagrams on {self.listen}, which is not loopback: anyone who can "
                    'reach it can forge kills. Set auth = "required" with [[udp.keys]], '
                    "or allow_unsigned = true to accept that",
                )
            )
        refuse(found)
        return self


# ---------------------------------------------------------------------------- brokers
_TLS_SCHEMES = ("mqtts", "ssl")


def _url_problem(url: str) -> str:
    if _off(url):
        return ""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as e:
        return f"not a broker URL ({e})"
    if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
        return 'must be "mqtt://HOST[:PORT]", "mqtts://HOST[:PORT]" or "off"'
    if not parts.hostname:
        return "no host"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must be just mqtt://HOST[:PORT] (no path or query)"
    return ""


def _client_id_problem(client_id: str) -> str:
    if not client_id:
        return "must not be empty"
    if len(client_id.encode("utf-8", "replace")) > 65535 or "\x00" in client_id:
        return "not a valid MQTT client id"
    return ""


BrokerUrl = Annotated[str, check(_url_problem)]
ClientId = Annotated[str, check(_client_id_problem)]
QoS = Annotated[int, one_of((0, 1), "must be 0 or 1")]


class BrokerSettings(Section):
    """One MQTT broker connection: ``[mqtt]`` (the source) and ``[notify]`` (the publisher) are
    both this model plus their own keys, so URL, credentials, TLS and backoff are checked, and
    used (``arenad.daemon.sources.mqtt``), the same way for both. ``key`` names a field as the
    config file spells it (``[notify]`` calls ``url`` ``mqtt`` and ``tls_ca`` ``ca_file``)."""

    SECTION: ClassVar[str] = "mqtt"

    url: BrokerUrl = "off"  # "mqtt://HOST[:PORT]" or "mqtts://HOST[:PORT]"; "off" disables
    client_id: ClientId = "arenad"  # stable, so the broker keeps our session across restarts
    username: str = ""
    password_env: str = ""  # name of an environment variable holding the password
    password_file: str = ""  # or a file whose first line is the password
    tls_ca: str = ""  # CA bundle path (mqtts:// uses the system store when empty)
    tls_cert: str = ""  # client certificate (mutual TLS)
    tls_key: str = ""
    tls_insecure: bool = False  # skip hostname verification (test brokers only)
    keepalive: Annotated[int, Field(ge=1, le=65535)] = 30
    reconnect_min: Annotated[float, Field(ge=0.01)] = 0.5  # seconds, first backoff
    reconnect_max: Annotated[float, Field(ge=0.01)] = 30.0  # seconds, ceiling (full jitter below it)

    @property
    def enabled(self) -> bool:
        return not _off(self.url)

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme in _TLS_SCHEMES

    @classmethod
    def key(cls, name: str) -> str:
        """``section.key`` of field ``name`` as the config file spells it."""
        return f"{cls.SECTION}.{cls.model_fields[name].alias or name}"

    @model_validator(mode="after")
    def _connection(self) -> Self:
        def name(field: str) -> str:
            return self.key(field).partition(".")[2]

        found: list[ConfigProblem] = []
        if self.password_env and self.password_file:
            found.append(
                ConfigProblem(
                    "password_file", self.password_file, "name one of password_env or password_file"
                )
            )
        elif (self.password_env or self.password_file) and not self.username:
            field = "password_env" if self.password_env else "password_file"
            found.append(
                ConfigProblem(field, getattr(self, field), f"a password needs {self.SECTION}.username")
            )
        if self.enabled and not self.tls:
            for field in ("tls_ca", "tls_cert", "tls_key"):
                if getattr(self, field):
                    found.append(
                        ConfigProblem(name(field), getattr(self, field), "is only used with an mqtts:// URL")
                    )
        elif self.tls_key and not self.tls_cert:
            found.append(ConfigProblem("tls_key", self.tls_key, f"needs {self.key('tls_cert')}"))
        if self.reconnect_max < self.reconnect_min:
            found.append(ConfigProblem("reconnect_max", self.reconnect_max, "must be >= reconnect_min"))
        refuse(found)
        return self


def _topic_filter_problem(topic: str) -> str:
    return "" if topic and "#" not in topic[:-1] else "not a valid MQTT topic filter"


TopicFilter = Annotated[str, check(_topic_filter_problem)]
PayloadMode = Annotated[str, one_of(("auto", "json", "msgpack"), 'must be "auto", "json" or "msgpack"')]


class MqttSettings(BrokerSettings):
    """``[mqtt]``: QoS 1 subscription with a persistent session (off by default)."""

    topics: Annotated[Array[TopicFilter], Field(min_length=1)] = ("arena/+/kills",)  # "+" = server id
    qos: Annotated[int, one_of((0, 1), "must be 1 (or 0: no delivery guarantee)")] = 1
    payload: PayloadMode = "auto"
    #: Per-topic payload format, first match wins, from the TOML table [mqtt.payload_by_topic];
    #: other topics use `payload`.
    payload_by_topic: Mapping[TopicFilter, PayloadMode] = Field(default_factory=dict)
    session_expiry: Annotated[int, Field(ge=0)] = 7 * 86400  # MQTT 5: seconds kept offline
    max_payload: Annotated[int, Field(ge=64)] = 1 << 20


# ---------------------------------------------------------------------------- [notify]
#: ``[notify] changes``: placements, promotions and demotions only, or every rating change too.
CHANGES_MODES = ("tiers", "all")
#: Largest ``queue``: a change is a few hundred bytes, so this bounds memory at a few hundred MB.
MAX_QUEUE = 1_000_000
_MAX_TOPIC_TEMPLATE = 1024  # bytes; player and server ids add at most 3 x 128 x 3 more
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
#: Scope kinds a ``scopes`` entry may name (the ``arenad.scopes`` kinds).
_SCOPE_KINDS = ("global", "server", "season", "event")


def _topic_problem(topic: str) -> str:
    if not topic:
        return "must not be empty"
    if len(topic.encode("utf-8", "replace")) > _MAX_TOPIC_TEMPLATE:
        return f"longer than {_MAX_TOPIC_TEMPLATE} bytes"
    if "{server}" not in topic:
        return "must contain {server} (the game server's id, or _ for events without one)"
    others = [p for p in _PLACEHOLDER.findall(topic) if p not in ("{server}", "{scope}")]
    if others:
        return f"unknown placeholder {others[0]} (only {{server}} and {{scope}})"
    rest = _PLACEHOLDER.sub("", topic)
    if "{" in rest or "}" in rest:
        return "unbalanced { or }"
    if "+" in topic or "#" in topic:
        return "a topic to publish to cannot contain the wildcards + or #"
    if "\x00" in topic:
        return "must not contain NUL"
    if topic.startswith("$"):
        return "topics starting with $ are reserved for the broker"
    return ""


def _scope_problem(entry: str) -> str:
    if entry == "*":
        return ""
    kind, sep, ident = entry.partition(":")
    if kind not in _SCOPE_KINDS:
        return (
            f'unknown scope kind {kind!r}: "global", "server:ID", "season:NAME", "event:NAME", '
            '"KIND:*" or "*"'
        )
    if kind == "global":
        return "" if not sep else "the global scope has no id"
    if not sep or not ident:
        return f'needs an id or *: "{kind}:ID" or "{kind}:*"'
    if len(ident.encode("utf-8", "replace")) > 256:
        return "id longer than 256 bytes"
    return ""


def _scopes_problems(scopes: tuple[str, ...]) -> tuple[str, ...]:
    found = []
    for n, s in enumerate(scopes):
        why = _scope_problem(s) or ("listed twice" if s in scopes[:n] else "")
        if why:
            found.append(ConfigProblem("", s, why))
    refuse(found)
    return scopes


class NotifySettings(BrokerSettings):
    """``[notify]``: publish rating/tier changes to an MQTT broker (off by default;
    ``arenad.daemon.notify``). Its own connection, with its own ``client_id``."""

    SECTION: ClassVar[str] = "notify"

    url: BrokerUrl = Field(default="off", alias="mqtt")  # the broker, as in [mqtt] url
    tls_ca: str = Field(default="", alias="ca_file")  # CA bundle for mqtts:// (the system store when empty)
    client_id: ClientId = "arenad-notify"  # must differ from [mqtt] client_id
    topic: Annotated[str, check(_topic_problem)] = "arena/{server}/ratings"  # {server}; {scope} optional
    changes: Annotated[
        str,
        one_of(
            CHANGES_MODES,
            'must be "tiers" (placements, promotions, demotions) or "all" (every rating change)',
        ),
    ] = "tiers"
    retain: bool = False  # true: retained, per player, on <topic>/<player> instead of <topic>
    qos: QoS = 0
    queue: Annotated[int, Field(ge=1, le=MAX_QUEUE)] = 10_000  # when full the oldest is dropped
    scopes: Annotated[Array[str], Field(min_length=1), AfterValidator(_scopes_problems)] = ("global",)

    @model_validator(mode="after")
    def _retained_per_scope(self) -> Self:
        many = len(self.scopes) > 1 or any(s.endswith("*") for s in self.scopes)
        if self.retain and many and "{scope}" not in self.topic:
            refuse(
                [
                    ConfigProblem(
                        "topic",
                        self.topic,
                        "with retain = true and more than one scope the topic needs {scope}, or the "
                        "retained message of one scope would overwrite another's",
                    )
                ]
            )
        return self

    def conflicts(self, mqtt: MqttSettings) -> list[ConfigProblem]:
        """Problems between ``[notify]`` and ``[mqtt]``: one client id for both connections."""
        if self.enabled and mqtt.enabled and self.client_id == mqtt.client_id:
            return [
                ConfigProblem(
                    "notify.client_id",
                    self.client_id,
                    "must differ from mqtt.client_id: a broker disconnects the older of two clients "
                    "with one id",
                )
            ]
        return []


# ---------------------------------------------------------------------------- [source_udp]
def normal_ip(host: str) -> str | None:
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
    bare = normal_ip(text.strip())
    if bare is not None:
        return bare, None
    host, port = parse_hostport(text)
    ip = normal_ip(host)
    if ip is None:
        raise ValueError(f"{host!r} is not an IP address")
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} out of 1..65535")
    return ip, port


def _address_problem(text: str) -> str:
    try:
        parse_server_address(text)
    except ValueError as e:
        return f'must be "IP" or "IP:PORT" ({e})'
    return ""


def _server_name_problem(name: str) -> str:
    if not name.strip():
        return "must be a non-empty string"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"longer than {MAX_NAME_BYTES} bytes"
    return ""


class HlServer(Section):
    """One ``[[source_udp.servers]]`` entry: a game server allowed to send its log here."""

    name: Annotated[str, check(_server_name_problem)]  # the server id put on its kill events
    address: Annotated[str, check(_address_problem)]  # "HOST" (any port) or "HOST:PORT"; IPs only
    secret_env: str = ""  # environment variable holding its sv_logsecret
    secret_file: str = ""  # or a file whose first line is the secret


def _no_server_option(options: Mapping[str, object]) -> Mapping[str, object]:
    if "server" in options:  # each server's id is its entry's name (or the sender's address)
        refuse([ConfigProblem("server", options["server"], "set by source_udp.servers[].name")])
    return options


class HlUdpSettings(Section):
    """``[source_udp]``: the Source-engine log receiver (off by default)."""

    listen: Listen = "off"  # e.g. "127.0.0.1:27501"; "off" disables the receiver
    servers: Array[HlServer] = ()
    #: Parse datagrams from unlisted senders too, as server "host:port" with no secret.
    accept_unknown: bool = False
    #: Options of the Source feed parser (``bots``, ``ignore_team_kills``, ``timezone_offset``,
    #: ``clock``, ``ids``) for every server, from the TOML table [source_udp.feed_options]; the
    #: feed checks them (``arenad.daemon.sources.hl_udp.feed_option_problems``).
    feed_options: Annotated[Mapping[str, object], AfterValidator(_no_server_option)] = Field(
        default_factory=dict
    )

    @property
    def enabled(self) -> bool:
        return not _off(self.listen)

    @model_validator(mode="after")
    def _servers(self) -> Self:
        found: list[ConfigProblem] = []
        names: dict[str, int] = {}
        addresses: dict[tuple[str, int | None], int] = {}
        for i, server in enumerate(self.servers):
            first = names.setdefault(server.name, i)
            if first != i:
                found.append(
                    ConfigProblem(f"servers[{i}].name", server.name, f"same name as servers[{first}]")
                )
            first = addresses.setdefault(parse_server_address(server.address), i)
            if first != i:
                found.append(
                    ConfigProblem(
                        f"servers[{i}].address", server.address, f"same address as servers[{first}]"
                    )
                )
        if not self.servers and not self.accept_unknown and self.enabled:
            found.append(
                ConfigProblem(
                    "servers",
                    [],
                    "no servers listed and accept_unknown is false: every datagram would be refused",
                )
            )
        refuse(found)
        return self

    def parser_options(self, server: str) -> dict[str, object]:
        """The Source feed options of one server's parser.

        Kills get stable ids by default: a line that arrives twice (a server resending, a
        duplicated datagram) is then refused as ``duplicate_id`` instead of rated twice.
        """
        return {"server": server, "ids": True, **self.feed_options}


# ---------------------------------------------------------------------------- [[tail]]
class TailSpec(Section):
    """One followed file: ``[[tail]]`` in the config or ``--tail FORMAT:PATH``."""

    format: NonEmpty  # a feed plugin's name (``arenad plugins``)
    path: NonEmpty
    server: str | None = None
    from_start: bool = False  # on the very first start: read the existing file, or only what comes
    options: Mapping[str, object] = Field(default_factory=dict)  # the feed's options

    @property
    def key(self) -> str:
        """The name of this source in metrics, positions and logs."""
        return f"tail:{self.path}"
