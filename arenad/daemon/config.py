"""Typed settings of the daemon's sections: ``[daemon] [udp] [mqtt] [query] [metrics] [log]
[models]``.

Each section is a frozen dataclass whose ``problems()`` names every bad key with its value.
Secrets never live in the config file: MQTT passwords come from an environment variable or a
file path named here.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from arenad.auth import KEY_ID_PATTERN
from arenad.core.params import PAPER
from arenad.errors import ConfigProblem
from arenad.models import discover_models, is_offline
from arenad.models.adr import VARIANTS
from arenad.scopes import (
    NAME_PATTERN,
    RESET_PRESETS,
    SCOPE_KINDS,
    SEASON_CALENDARS,
    EventWindow,
    Reset,
    ScopeConfig,
    SeasonStart,
)


def parse_hostport(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``"127.0.0.1:27500"``, ``"[::1]:27500"`` or ``"localhost:1"`` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ValueError(f"unclosed '[' in {text!r}")
        port_text = rest.removeprefix(":")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
    if not port_text:
        if default_port is None:
            raise ValueError(f"no port in {text!r}")
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"bad port {port_text!r} in {text!r}")
    if not host:
        raise ValueError(f"no host in {text!r}")
    return host, int(port_text)


def _off(text: str) -> bool:
    return text.strip().lower() in ("", "off", "none", "false", "no", "0")


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    """``[daemon]``: state, queue, durability and the time rules of validation."""

    state_dir: str = "var/arenad"
    queue_size: int = 1024  # batches waiting for the engine task
    checkpoint_interval: float = 60.0  # seconds between checkpoints (and at shutdown)
    commit_interval: float = 0.005  # group commit: an engine step starts at most this often
    checkpoints_kept: int = 2  # the newest and a fallback
    max_clock_skew: float = 300.0  # an event further in the future than this is future_time
    max_event_age: float = 7 * 86400.0  # an event older than this (wall clock) is too_old
    dedupe_window: float = 86400.0  # seconds an event id is remembered (duplicate_id)
    dedupe_max_ids: int = 1_000_000  # and at most this many ids
    clamp_future: bool = True  # an event stamped ahead of this host's clock is rated at arrival
    clock_step: float = 2.0  # a host wall-clock change larger than this is a step (not followed)
    clock_adopt_after: float = 600.0  # seconds a step must persist before it is adopted

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        _need_str(out, "daemon", self, "state_dir", allow_empty=False)
        _need_num(out, "daemon", self, "queue_size", lo=1, integer=True)
        _need_num(out, "daemon", self, "checkpoint_interval", lo=0.1)
        _need_num(out, "daemon", self, "commit_interval", lo=0, hi=1.0)
        _need_num(out, "daemon", self, "checkpoints_kept", lo=1, integer=True)
        _need_num(out, "daemon", self, "max_clock_skew", lo=0)
        _need_num(out, "daemon", self, "max_event_age", lo=1)
        _need_num(out, "daemon", self, "dedupe_window", lo=0)
        _need_num(out, "daemon", self, "dedupe_max_ids", lo=0, integer=True)
        if not isinstance(self.clamp_future, bool):
            out.append(ConfigProblem("daemon.clamp_future", self.clamp_future, "must be true or false"))
        _need_num(out, "daemon", self, "clock_step", lo=0.1)
        _need_num(out, "daemon", self, "clock_adopt_after", lo=0)
        return out


#: ``[udp] auth`` modes: every datagram signed; signed or not (signed ones are verified); never.
UDP_AUTH_MODES = ("required", "optional", "off")
_UDP_KEY_FIELDS = ("id", "secret_env", "secret_file")


@dataclass(frozen=True, slots=True)
class UdpKey:
    """``[[udp.keys]]``: one game server's signing key, read from ``secret_env`` or ``secret_file``
    (hex digits, at least 16 bytes); the secret itself never lives in the config."""

    id: str
    secret_env: str = ""
    secret_file: str = ""


@dataclass(frozen=True, slots=True)
class UdpSettings:
    """``[udp]``: msgpack datagrams (one event or an array of events each), optionally signed
    (``arenad.auth``; ``auth``, ``keys``, ``max_skew``, ``allow_unsigned``)."""

    listen: str = "127.0.0.1:27500"  # "off" disables the source
    max_datagram: int = 65507
    allow: tuple[str, ...] = ("127.0.0.0/8", "::1/128")  # source networks accepted
    receive_buffer: int = 4 * 1024 * 1024  # SO_RCVBUF bytes, to ride out bursts
    auth: str = "off"  # "required" | "optional" | "off" (UDP_AUTH_MODES)
    #: Unsigned datagrams ("optional" or "off") on a listen address other than loopback.
    allow_unsigned: bool = False
    keys: tuple[UdpKey, ...] = ()  # [[udp.keys]] id, secret_env | secret_file
    max_skew: float = 30.0  # seconds a signed datagram's timestamp may differ from our clock

    def __post_init__(self) -> None:
        # TOML gives [[udp.keys]] as tables; well-formed ones become UdpKey (problems() names
        # the rest).
        if isinstance(self.keys, tuple):
            keys = tuple(_udp_key(k) for k in self.keys)
            object.__setattr__(self, "keys", keys)

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

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if _need_str(out, "udp", self, "listen") and self.enabled:
            _need_hostport(out, "udp.listen", self.listen)
        _need_num(out, "udp", self, "max_datagram", lo=16, hi=65535, integer=True)
        _need_num(out, "udp", self, "receive_buffer", lo=0, integer=True)
        _need_networks(out, "udp.allow", self.allow)
        _need_num(out, "udp", self, "max_skew", lo=0.001, hi=86400)
        if not isinstance(self.allow_unsigned, bool):
            out.append(ConfigProblem("udp.allow_unsigned", self.allow_unsigned, "must be true or false"))
        out.extend(_udp_key_problems(self.keys))
        if self.auth not in UDP_AUTH_MODES:
            out.append(ConfigProblem("udp.auth", self.auth, 'must be "required", "optional" or "off"'))
        elif self.auth == "required" and not self.keys:
            out.append(ConfigProblem("udp.auth", self.auth, "needs at least one [[udp.keys]] entry"))
        elif self.auth == "off" and self.keys:
            out.append(
                ConfigProblem(
                    "udp.auth",
                    self.auth,
                    '[[udp.keys]] are listed but never used: set "required" or "optional"',
                )
            )
        if (
            self.auth in ("optional", "off")
            and self.allow_unsigned is False
            and isinstance(self.listen, str)
            and self.enabled
            and not self.loopback
        ):
            out.append(
                ConfigProblem(
                    "udp.auth",
                    self.auth,
                    f"accepts unsigned datagrams on {self.listen}, which is not loopback: anyone who can "
                    'reach it can forge kills. Set auth = "required" with [[udp.keys]], '
                    "or allow_unsigned = true to accept that",
                )
            )
        return out


def _udp_key(entry: object) -> object:
    if (
        isinstance(entry, Mapping)
        and set(entry) <= set(_UDP_KEY_FIELDS)
        and "id" in entry
        and all(isinstance(v, str) for v in entry.values())
    ):
        return UdpKey(**entry)
    return entry


def _udp_key_problems(keys: object) -> list[ConfigProblem]:
    if not isinstance(keys, tuple):
        return [ConfigProblem("udp.keys", keys, "must be an array of tables: [[udp.keys]]")]
    out: list[ConfigProblem] = []
    seen: set[str] = set()
    for i, key in enumerate(keys):
        where = f"udp.keys[{i}]"
        if not isinstance(key, UdpKey):
            if isinstance(key, Mapping):
                for name, value in key.items():
                    if name == "secret":
                        out.append(
                            ConfigProblem(
                                f"{where}.secret",
                                "***",
                                "secrets never live in the config: use secret_env or secret_file",
                            )
                        )
                    elif name not in _UDP_KEY_FIELDS:
                        out.append(ConfigProblem(f"{where}.{name}", value, "unknown key"))
                    elif not isinstance(value, str):
                        out.append(ConfigProblem(f"{where}.{name}", value, "must be a string"))
                if "id" not in key:
                    out.append(ConfigProblem(f"{where}.id", None, "missing"))
            else:
                out.append(ConfigProblem(where, key, "must be a table with id and secret_env or secret_file"))
            continue
        if not KEY_ID_PATTERN.fullmatch(key.id):
            out.append(ConfigProblem(f"{where}.id", key.id, "must be 1-64 characters of A-Z a-z 0-9 . _ : -"))
        elif key.id in seen:
            out.append(ConfigProblem(f"{where}.id", key.id, "listed twice"))
        seen.add(key.id)
        if bool(key.secret_env) == bool(key.secret_file):
            out.append(
                ConfigProblem(
                    f"{where}.secret_file", key.secret_file, "name exactly one of secret_env or secret_file"
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class MqttSettings:
    """``[mqtt]``: QoS 1 subscription with a persistent session (off by default)."""

    url: str = "off"  # e.g. "mqtt://127.0.0.1:1883" or "mqtts://broker:8883"; "off" disables
    topics: tuple[str, ...] = ("arena/+/kills",)  # the "+" segment is the server id
    client_id: str = "arenad"  # stable, so the broker keeps our session across restarts
    qos: int = 1
    payload: str = "auto"  # "auto" | "json" | "msgpack"
    #: Per-topic payload format: (topic filter, "auto" | "json" | "msgpack") pairs, first match
    #: wins, from the TOML table [mqtt.payload_by_topic]; other topics use `payload`.
    payload_by_topic: tuple[tuple[str, str], ...] = ()
    keepalive: int = 30
    session_expiry: int = 7 * 86400  # MQTT 5: seconds the broker keeps the session offline
    username: str = ""
    password_env: str = ""  # name of an environment variable holding the password
    password_file: str = ""  # or a file whose first line is the password
    tls_ca: str = ""  # CA bundle path (mqtts:// uses the system store when empty)
    tls_cert: str = ""  # client certificate (mutual TLS)
    tls_key: str = ""
    tls_insecure: bool = False  # skip hostname verification (test brokers only)
    reconnect_min: float = 0.5  # seconds, first backoff
    reconnect_max: float = 30.0  # seconds, backoff ceiling (full jitter in between)
    max_payload: int = 1 << 20

    @property
    def enabled(self) -> bool:
        return not _off(self.url)

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if _need_str(out, "mqtt", self, "url") and self.enabled:
            parts = urlsplit(self.url)
            if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
                out.append(ConfigProblem("mqtt.url", self.url, "scheme must be mqtt:// or mqtts://"))
            elif not parts.hostname:
                out.append(ConfigProblem("mqtt.url", self.url, "no host"))
        if not isinstance(self.topics, tuple) or not self.topics:
            out.append(ConfigProblem("mqtt.topics", self.topics, "must be a non-empty list of topic filters"))
        else:
            for t in self.topics:
                if not isinstance(t, str) or not t or "#" in t[:-1]:
                    out.append(ConfigProblem("mqtt.topics", t, "not a valid MQTT topic filter"))
        _need_str(out, "mqtt", self, "client_id", allow_empty=False)
        if self.qos not in (0, 1) or isinstance(self.qos, bool):
            out.append(ConfigProblem("mqtt.qos", self.qos, "must be 1 (or 0: no delivery guarantee)"))
        if self.payload not in ("auto", "json", "msgpack"):
            out.append(ConfigProblem("mqtt.payload", self.payload, 'must be "auto", "json" or "msgpack"'))
        if not isinstance(self.payload_by_topic, tuple):
            out.append(ConfigProblem("mqtt.payload_by_topic", self.payload_by_topic, "must be a table"))
        else:
            for pair in self.payload_by_topic:
                topic, mode = pair if isinstance(pair, tuple) and len(pair) == 2 else ("", "")
                if not isinstance(topic, str) or not topic or "#" in topic[:-1]:
                    out.append(ConfigProblem("mqtt.payload_by_topic", topic, "not a valid MQTT topic filter"))
                if mode not in ("auto", "json", "msgpack"):
                    out.append(
                        ConfigProblem(
                            f"mqtt.payload_by_topic.{topic}", mode, 'must be "auto", "json" or "msgpack"'
                        )
                    )
        _need_num(out, "mqtt", self, "keepalive", lo=1, hi=65535, integer=True)
        _need_num(out, "mqtt", self, "session_expiry", lo=0, integer=True)
        for key in ("username", "password_env", "password_file", "tls_ca", "tls_cert", "tls_key"):
            _need_str(out, "mqtt", self, key)
        if not isinstance(self.tls_insecure, bool):
            out.append(ConfigProblem("mqtt.tls_insecure", self.tls_insecure, "must be true or false"))
        _need_num(out, "mqtt", self, "reconnect_min", lo=0.01)
        _need_num(out, "mqtt", self, "reconnect_max", lo=0.01)
        if not out and self.reconnect_max < self.reconnect_min:
            out.append(ConfigProblem("mqtt.reconnect_max", self.reconnect_max, "must be >= reconnect_min"))
        _need_num(out, "mqtt", self, "max_payload", lo=64, integer=True)
        return out


@dataclass(frozen=True, slots=True)
class QuerySettings:
    """``[query]``: newline-delimited JSON lookups over TCP and optionally a Unix socket."""

    listen: str = "127.0.0.1:27510"  # "off" disables TCP
    unix: str = ""  # path of a Unix socket; empty = none
    max_line: int = 4096
    max_connections: int = 256
    idle_timeout: float = 300.0
    rate_limit: float = 200.0  # requests per second per connection (token refill); 0 = unlimited
    burst: int = 400  # requests a connection may send at once (token bucket size)
    max_top: int = 1000  # largest n for top / around
    display_k: float = 3.0  # conservative display rating = mu - display_k * sigma

    @property
    def tcp_enabled(self) -> bool:
        return not _off(self.listen)

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if _need_str(out, "query", self, "listen") and not _off(self.listen):
            _need_hostport(out, "query.listen", self.listen)
        _need_str(out, "query", self, "unix")
        _need_num(out, "query", self, "max_line", lo=64, integer=True)
        _need_num(out, "query", self, "max_connections", lo=1, integer=True)
        _need_num(out, "query", self, "idle_timeout", lo=0.1)
        _need_num(out, "query", self, "rate_limit", lo=0)
        _need_num(out, "query", self, "burst", lo=1, integer=True)
        _need_num(out, "query", self, "max_top", lo=1, integer=True)
        _need_num(out, "query", self, "display_k", lo=0)
        return out


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """``[metrics]``: Prometheus ``/metrics`` and ``/healthz``."""

    listen: str = "127.0.0.1:9108"  # "off" disables

    @property
    def enabled(self) -> bool:
        return not _off(self.listen)

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if _need_str(out, "metrics", self, "listen") and not _off(self.listen):
            _need_hostport(out, "metrics.listen", self.listen)
        return out


@dataclass(frozen=True, slots=True)
class LogSettings:
    """``[log]``: structlog output."""

    format: str = "auto"  # "auto" (JSON under systemd or without a TTY), "json", "console"
    level: str = "info"
    reject_warning_interval: float = 10.0  # at most one reject warning per reason this often

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if self.format not in ("auto", "json", "console"):
            out.append(ConfigProblem("log.format", self.format, 'must be "auto", "json" or "console"'))
        if not isinstance(self.level, str) or self.level.lower() not in ("debug", "info", "warning", "error"):
            out.append(ConfigProblem("log.level", self.level, "must be debug, info, warning or error"))
        _need_num(out, "log", self, "reject_warning_interval", lo=0)
        return out


def _implied(keys: Mapping[str, object]) -> dict[str, object]:
    """A variant's ``[adr]`` keys with its preset spelled out: each parameter the preset sets."""
    out: dict[str, object] = {}
    if keys.get("preset") == "paper":
        out.update({"preset": "paper", **PAPER})
    out.update(keys)
    return out


#: The ADR variants the primary model may be, with every ``[adr]`` key each one sets: the model
#: plugins' variants (``arenad.models.adr.VARIANTS``), a preset expanded into its parameters, so
#: ``adr-printed`` is the paper's §9 configuration (``PAPER``) plus ``loser_rule = "printed"``.
#: ``preset`` is listed too: ``[adr] preset = "default"`` contradicts a paper variant.
PRIMARY_MODELS: dict[str, dict[str, object]] = {name: _implied(keys) for name, keys in VARIANTS.items()}
#: Largest ``[models] window``: the scores are computed over the window at every scrape, in
#: O(window log window) per model on the event loop (about 1 ms per model at 10,000 predictions,
#: 20 ms at 100,000), and queries wait meanwhile.
MAX_WINDOW = 100_000


@dataclass(frozen=True, slots=True)
class ModelsSettings:
    """``[models]``: the primary (ADR) model and shadow models scored beside it."""

    primary: str = "adr"  # the ladder's model: an ADR variant (PRIMARY_MODELS)
    shadows: tuple[str, ...] = ()  # names of arenad.models plugins run beside it
    window: int = 10_000  # scored predictions per model in the rolling metric window

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if not isinstance(self.primary, str) or self.primary not in PRIMARY_MODELS:
            out.append(
                ConfigProblem(
                    "models.primary",
                    self.primary,
                    "the ladder, tiers and queries are ADR's, so the primary must be an ADR variant: "
                    f"{', '.join(PRIMARY_MODELS)} (run other models as shadows)",
                )
            )
        _need_num(out, "models", self, "window", lo=2, hi=MAX_WINDOW, integer=True)
        if not isinstance(self.shadows, tuple) or not all(isinstance(n, str) for n in self.shadows):
            out.append(ConfigProblem("models.shadows", self.shadows, "must be a list of model names"))
            return out
        known_primary = isinstance(self.primary, str) and self.primary in PRIMARY_MODELS
        primary = self.primary if known_primary else None
        out.extend(_shadow_problems(primary, self.shadows))
        return out


def _shadow_problems(primary: str | None, shadows: tuple[str, ...]) -> list[ConfigProblem]:
    """Unknown, offline, repeated or broken shadow models, each named with its value."""
    if not shadows:
        return []
    out: list[ConfigProblem] = []
    known, errors = discover_models()
    seen: set[str] = set()
    for name in shadows:
        if name in seen:
            out.append(ConfigProblem("models.shadows", name, "listed twice"))
            continue
        seen.add(name)
        if name == primary:  # (a primary that is no ADR variant is reported on its own)
            out.append(ConfigProblem("models.shadows", name, "is the primary model already"))
            continue
        factory = known.get(name)
        if factory is None:
            failed = [e for e in errors if e.startswith(f"{name}: ")]
            why = f"its plugin failed to load ({failed[0]})" if failed else f"known: {', '.join(known)}"
            out.append(ConfigProblem("models.shadows", name, f"no such rating model ({why})"))
            continue
        try:
            model = factory()
        except Exception as e:  # a third-party factory: report it, whatever it raised
            out.append(ConfigProblem("models.shadows", name, f"cannot be built: {type(e).__name__}: {e}"))
            continue
        if is_offline(model):
            out.append(
                ConfigProblem(
                    "models.shadows",
                    name,
                    "is an offline model (it refits over the whole history, so its cost grows without "
                    "bound); use it with `arenad evaluate`",
                )
            )
    return out


def _when(value: object) -> float | None:
    """A TOML offset date-time (``2026-01-01T00:00:00Z``) or unix seconds -> seconds; else None."""
    if isinstance(value, datetime):
        return value.timestamp() if value.tzinfo is not None else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass(frozen=True, slots=True)
class ScopesSettings:
    """``[scopes]``: which leaderboards exist besides the global one (``arenad.scopes``)."""

    kinds: tuple[str, ...] = ("global",)  # of "global", "server", "season", "event"
    servers: tuple[str, ...] = ()  # server ids with their own metric series (bounded cardinality)
    max_servers: int = 1000  # most server scopes (a flood of invented server ids stops here)
    season_calendar: str = "none"  # "monthly", "quarterly", "yearly" (UTC) or "none"
    season_reset: str = "softer"  # continuous | softer | soft | hard | custom
    season_alpha: float = 1.0  # with season_reset = "custom": sigma expansion (seed 001 §4.1)
    season_lambda: float = 0.0  # with season_reset = "custom": pull toward the tier band's centre
    season: tuple[Any, ...] = ()  # [[scopes.season]] name, start
    event: tuple[Any, ...] = ()  # [[scopes.event]] name, start, end, servers

    def reset(self) -> Reset:
        if self.season_reset == "custom":
            return Reset(float(self.season_alpha), float(self.season_lambda))
        return RESET_PRESETS.get(self.season_reset, RESET_PRESETS["softer"])

    def config(self) -> ScopeConfig:
        """The pure core's view (call on valid settings only)."""
        seasons = tuple(
            sorted(
                (SeasonStart(str(e["name"]), _when(e["start"]) or 0.0) for e in self.season),
                key=lambda s: s.start,
            )
        )
        events = tuple(
            EventWindow(
                str(e["name"]),
                _when(e["start"]) or 0.0,
                _when(e["end"]) or 0.0,
                frozenset(str(x) for x in e.get("servers", ())),
            )
            for e in self.event
        )
        return ScopeConfig(
            kinds=tuple(self.kinds),
            max_servers=self.max_servers,
            season_calendar=self.season_calendar,
            seasons=seasons,
            season_reset=self.reset(),
            events=events,
        )

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        kinds = self.kinds
        if not isinstance(kinds, tuple) or not all(isinstance(k, str) for k in kinds):
            out.append(ConfigProblem("scopes.kinds", kinds, f"must be a list of: {', '.join(SCOPE_KINDS)}"))
        else:
            for k in kinds:
                if k not in SCOPE_KINDS:
                    out.append(
                        ConfigProblem(
                            "scopes.kinds", k, f"unknown scope kind (known: {', '.join(SCOPE_KINDS)})"
                        )
                    )
            if len(set(kinds)) != len(kinds):
                out.append(ConfigProblem("scopes.kinds", list(kinds), "lists a kind twice"))
            if "global" not in kinds:
                out.append(
                    ConfigProblem(
                        "scopes.kinds",
                        list(kinds),
                        'must include "global" (the ladder every query falls back to)',
                    )
                )
        if not isinstance(self.servers, tuple) or not all(isinstance(x, str) and x for x in self.servers):
            out.append(ConfigProblem("scopes.servers", self.servers, "must be a list of server ids"))
        _need_num(out, "scopes", self, "max_servers", lo=0, integer=True)
        if self.season_calendar not in SEASON_CALENDARS:
            out.append(
                ConfigProblem(
                    "scopes.season_calendar",
                    self.season_calendar,
                    f"must be one of: {', '.join(SEASON_CALENDARS)}",
                )
            )
        presets = (*RESET_PRESETS, "custom")
        if self.season_reset not in presets:
            out.append(
                ConfigProblem(
                    "scopes.season_reset", self.season_reset, f"must be one of: {', '.join(presets)}"
                )
            )
        _need_num(out, "scopes", self, "season_alpha", lo=1.0, hi=3.0)
        _need_num(out, "scopes", self, "season_lambda", lo=0.0, hi=1.0)
        names: set[str] = set()
        if not isinstance(self.season, tuple):
            out.append(
                ConfigProblem("scopes.season", self.season, "must be an array of tables: [[scopes.season]]")
            )
        else:
            for n, e in enumerate(self.season):
                out.extend(_window_problems(f"scopes.season[{n}]", e, ("name", "start"), names))
            if self.season and self.season_calendar != "none":
                out.append(
                    ConfigProblem(
                        "scopes.season",
                        len(self.season),
                        "give either season_calendar or [[scopes.season]], not both",
                    )
                )
        event_names: set[str] = set()
        if not isinstance(self.event, tuple):
            out.append(
                ConfigProblem("scopes.event", self.event, "must be an array of tables: [[scopes.event]]")
            )
        else:
            for n, e in enumerate(self.event):
                out.extend(
                    _window_problems(
                        f"scopes.event[{n}]", e, ("name", "start", "end", "servers"), event_names
                    )
                )
        return out


def _window_problems(
    where: str, entry: object, keys: tuple[str, ...], names: set[str]
) -> list[ConfigProblem]:
    out: list[ConfigProblem] = []
    if not isinstance(entry, Mapping):
        return [ConfigProblem(where, entry, "must be a table")]
    for key in entry:
        if key not in keys:
            out.append(ConfigProblem(f"{where}.{key}", entry[key], f"unknown key (known: {', '.join(keys)})"))
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        out.append(ConfigProblem(f"{where}.name", name, "must be 1-64 letters, digits, '.', '_' or '-'"))
    elif name in names:
        out.append(ConfigProblem(f"{where}.name", name, "used twice"))
    else:
        names.add(name)
    for key in ("start", "end"):
        if key in keys and _when(entry.get(key)) is None:
            out.append(
                ConfigProblem(
                    f"{where}.{key}",
                    entry.get(key),
                    "must be a date-time with a zone (2026-01-01T00:00:00Z) or unix seconds",
                )
            )
    start, end = _when(entry.get("start")), _when(entry.get("end"))
    if "end" in keys and start is not None and end is not None and end <= start:
        out.append(ConfigProblem(f"{where}.end", entry.get("end"), "must be after start"))
    servers = entry.get("servers", [])
    if "servers" in keys and (
        not isinstance(servers, list) or not all(isinstance(x, str) and x for x in servers)
    ):
        out.append(ConfigProblem(f"{where}.servers", servers, "must be a list of server ids"))
    return out


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """``[admin]``: season start, exclude, recompute and reload. Never on the public query port:
    a Unix socket (filesystem permissions decide who may) and, optionally, TCP with a token."""

    unix: str = "admin.sock"  # relative paths are inside [daemon] state_dir; "off" disables
    listen: str = "off"  # TCP "HOST:PORT" for admin with a token; needs token_file
    token_file: str = ""  # file holding the token (at least 16 characters)

    @property
    def tcp_enabled(self) -> bool:
        return not _off(self.listen)

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        _need_str(out, "admin", self, "unix")
        _need_str(out, "admin", self, "token_file")
        if _need_str(out, "admin", self, "listen") and self.tcp_enabled:
            _need_hostport(out, "admin.listen", self.listen)
            if not self.token_file:
                out.append(
                    ConfigProblem("admin.listen", self.listen, "admin over TCP needs admin.token_file")
                )
        return out


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """``[history]``: the compressed event archive and snapshots kept for recompute."""

    archive: bool = True  # keep every journaled event (compressed) instead of deleting it
    archive_file_bytes: int = 64 << 20  # start a new archive file past this size
    snapshot_interval: float = 3600.0  # seconds between checkpoints kept as snapshots
    snapshots_kept: int = 48

    def problems(self) -> list[ConfigProblem]:
        out: list[ConfigProblem] = []
        if not isinstance(self.archive, bool):
            out.append(ConfigProblem("history.archive", self.archive, "must be true or false"))
        _need_num(out, "history", self, "archive_file_bytes", lo=4096, integer=True)
        _need_num(out, "history", self, "snapshot_interval", lo=0.1)
        _need_num(out, "history", self, "snapshots_kept", lo=1, integer=True)
        return out


SectionType = (
    ScopesSettings
    | AdminSettings
    | HistorySettings
    | DaemonSettings
    | UdpSettings
    | MqttSettings
    | QuerySettings
    | MetricsSettings
    | LogSettings
    | ModelsSettings
)


def section_from_mapping(
    cls: type[SectionType], name: str, data: Mapping[str, Any], problems: list[ConfigProblem]
) -> Any:
    """Build one section from its TOML table, appending every problem found."""
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, raw in data.items():
        f = known.get(key)
        if f is None:
            problems.append(ConfigProblem(f"{name}.{key}", raw, "unknown key"))
            continue
        if isinstance(raw, list):
            value: Any = tuple(raw)
        elif isinstance(raw, Mapping):
            value = tuple(raw.items())  # a sub-table: ordered (key, value) pairs
        else:
            value = raw
        if f.type == "float" and isinstance(raw, int) and not isinstance(raw, bool):
            try:
                value = float(raw)
            except OverflowError:
                problems.append(ConfigProblem(f"{name}.{key}", raw, "must be finite"))
                continue
        kwargs[key] = value
    try:
        section = cls(**kwargs)
    except TypeError as e:  # pragma: no cover - every key was checked above
        problems.append(ConfigProblem(name, data, str(e)))
        return cls()
    problems.extend(section.problems())
    return section


# ---------------------------------------------------------------------------- helpers
def _need_str(out: list[ConfigProblem], sec: str, obj: object, key: str, *, allow_empty: bool = True) -> bool:
    v = getattr(obj, key)
    if not isinstance(v, str):
        out.append(ConfigProblem(f"{sec}.{key}", v, "must be a string"))
        return False
    if not allow_empty and not v.strip():
        out.append(ConfigProblem(f"{sec}.{key}", v, "must not be empty"))
        return False
    return True


def _need_num(
    out: list[ConfigProblem],
    sec: str,
    obj: object,
    key: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    integer: bool = False,
) -> None:
    v = getattr(obj, key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        out.append(ConfigProblem(f"{sec}.{key}", v, "must be an integer" if integer else "must be a number"))
        return
    try:
        finite = math.isfinite(v)
    except OverflowError:
        finite = False
    if not finite:
        out.append(ConfigProblem(f"{sec}.{key}", v, "must be finite"))
    elif lo is not None and v < lo:
        out.append(ConfigProblem(f"{sec}.{key}", v, f"must be >= {lo}"))
    elif hi is not None and v > hi:
        out.append(ConfigProblem(f"{sec}.{key}", v, f"must be <= {hi}"))


def _need_hostport(out: list[ConfigProblem], key: str, value: str) -> None:
    try:
        parse_hostport(value)
    except ValueError as e:
        out.append(ConfigProblem(key, value, f'must be "HOST:PORT" or "off" ({e})'))


def _need_networks(out: list[ConfigProblem], key: str, value: object) -> None:
    if not isinstance(value, tuple):
        out.append(ConfigProblem(key, value, 'must be a list of networks such as "127.0.0.0/8"'))
        return
    for net in value:
        try:
            ipaddress.ip_network(net, strict=False)
        except (ValueError, TypeError):
            out.append(ConfigProblem(key, net, 'not an IP network (e.g. "10.0.0.0/8")'))
