"""Issue 15 item 3: pydantic against msgspec and attrs + cattrs for arenad's settings, measured.

Run it with a scratch venv outside the project (the project's own venv has neither msgspec nor
cattrs, and they are no dependency of arenad; numpy and openskill are there because importing
arenad's real settings models imports them):

    python3.11 -m venv /tmp/settings-cmp/venv
    /tmp/settings-cmp/venv/bin/pip install pydantic==2.14.4 msgspec attrs cattrs numpy openskill
    /tmp/settings-cmp/venv/bin/python bench/settings_libs.py            # from /work/main
    /tmp/settings-cmp/venv/bin/python bench/settings_libs.py --json     # the results as JSON too

Three sections of the real settings, modelled in each library: ``[daemon]`` (bounded numbers),
``[udp]`` with its nested ``[[udp.keys]]`` list (a rule per entry, rules between keys) and
``[mqtt]`` (the broker model's rules between keys). pydantic is arenad's own models
(``arenad.settings.Settings.from_mapping``, what ``arenad check-config`` runs); msgspec is Structs
with ``Meta`` constraints and ``__post_init__`` for the checks a constraint cannot say; attrs is
classes with field validators and ``__attrs_post_init__`` structured by cattrs, once with the
default converter and once with strict scalar hooks. The value checks themselves (host:port,
networks, broker URLs, topic filters, key ids) are arenad's functions in all of them, so only
what the library does around them differs.

Measured: (a) which of the known problems of eight bad documents (from tests/test_settings.py and
tests/daemon/test_notify.py) one pass reports, with each message; (b) the median time to parse a
valid document, the first parse in a fresh interpreter (schema or code generation) and the
import time of the library in a fresh interpreter; (c) lax scalars, inf/nan, frozen-ness.
"""

# The three libraries are untyped (Any) where the project's mypy runs, which has them not installed.
# mypy: disallow-subclassing-any=False, disallow-untyped-decorators=False

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import platform
import re
import statistics
import subprocess
import sys
import timeit
import tomllib
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # arenad's real models, from this tree

from pydantic import Field

from arenad.auth import KEY_ID_PATTERN
from arenad.daemon.config import (
    DaemonSettings,
    Section,
    _hostport_problem,
    _network_problem,
    _off,
    parse_hostport,
)
from arenad.daemon.config_sources import (
    MqttSettings,
    UdpSettings,
    _client_id_problem,
    _topic_filter_problem,
    _url_problem,
)
from arenad.errors import ConfigError
from arenad.settings import Settings

try:
    import attrs
    import cattrs
    import msgspec
except ImportError as missing:
    sys.exit(
        f"bench/settings_libs.py needs msgspec, attrs and cattrs ({missing.name} is not installed); they are "
        "no dependency of arenad: run it with a scratch venv, see the top of this file"
    )

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "config" / "arenad.toml"
LIBS = ("pydantic", "msgspec", "cattrs-strict", "cattrs-default")
Report = tuple[str, str]  # (key path, message)


# ---------------------------------------------------------------------------- shared checks
def _key_id_problem(value: str) -> str:
    return "" if KEY_ID_PATTERN.fullmatch(value) else "must be 1-64 characters of A-Z a-z 0-9 . _ : -"


def _loopback(listen: str) -> bool:
    try:
        host, _ = parse_hostport(listen)
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def key_rules(secret_env: str, secret_file: str) -> list[str]:
    """``[[udp.keys]]``: one secret source (UdpKey._one_source)."""
    if bool(secret_env) == bool(secret_file):
        return ["secret_file: name exactly one of secret_env or secret_file"]
    return []


def udp_rules(listen: str, auth: str, allow_unsigned: bool, key_ids: Sequence[str]) -> list[str]:
    """``[udp]``: the rules between keys of UdpSettings._auth."""
    found = [f"keys[{i}].id: listed twice" for i, k in enumerate(key_ids) if k in key_ids[:i]]
    if auth == "required" and not key_ids:
        found.append("auth: needs at least one [[udp.keys]] entry")
    elif auth == "off" and key_ids:
        found.append('auth: [[udp.keys]] are listed but never used: set "required" or "optional"')
    if auth != "required" and not allow_unsigned and not _off(listen) and not _loopback(listen):
        found.append(f"auth: accepts unsigned datagrams on {listen}, which is not loopback")
    return found


def broker_rules(
    url: str,
    *,
    username: str,
    password_env: str,
    password_file: str,
    tls: tuple[str, str, str],
    reconnect: tuple[float, float],
) -> list[str]:
    """``[mqtt]``: the rules between keys of BrokerSettings._connection."""
    found: list[str] = []
    if password_env and password_file:
        found.append("password_file: name one of password_env or password_file")
    elif (password_env or password_file) and not username:
        found.append(f"{'password_env' if password_env else 'password_file'}: a password needs mqtt.username")
    tls_ca, tls_cert, tls_key = tls
    if not _off(url) and not url.startswith(("mqtts:", "ssl:")):
        found += [
            f"{name}: is only used with an mqtts:// URL"
            for name, value in (("tls_ca", tls_ca), ("tls_cert", tls_cert), ("tls_key", tls_key))
            if value
        ]
    elif tls_key and not tls_cert:
        found.append("tls_key: needs mqtt.tls_cert")
    if reconnect[1] < reconnect[0]:
        found.append("reconnect_max: must be >= reconnect_min")
    return found


def field_problems(checks: Sequence[tuple[str, Callable[[Any], str], object]]) -> list[str]:
    """``name: message`` for each (name, test, value) whose test fails."""
    return [f"{name}: {why}" for name, test, value in checks if (why := test(value))]


SEP = " | "  # joins several problems of one model into the one error a hook may raise


def refuse(found: list[str]) -> None:
    if found:
        raise ValueError(SEP.join(found))


# ---------------------------------------------------------------------------- pydantic (arenad's own)
class Doc3(Section):
    """The three sections alone, arenad's models (for the timing: no other section's defaults)."""

    daemon: DaemonSettings = Field(default_factory=DaemonSettings)
    udp: UdpSettings = Field(default_factory=UdpSettings)
    mqtt: MqttSettings = Field(default_factory=MqttSettings)


def pydantic_reports(data: dict[str, Any]) -> list[Report]:
    try:
        Settings.from_mapping(data)
    except ConfigError as e:
        return [(p.key, f"{p.value!r}: {p.message}") for p in e.problems]
    return []


# ---------------------------------------------------------------------------- msgspec
M = msgspec.Meta
Auth = Literal["required", "optional", "off"]
Payload = Literal["auto", "json", "msgpack"]


# Subclasses inherit frozen and forbid_unknown_fields (the ignore: msgspec is Any where it is missing).
class Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):  # type: ignore[call-arg, unused-ignore]
    pass


class DaemonM(Strict):
    state_dir: Annotated[str, M(min_length=1)] = "var/arenad"
    queue_size: Annotated[int, M(ge=1)] = 1024
    checkpoint_interval: Annotated[float, M(ge=0.1)] = 60.0
    commit_interval: Annotated[float, M(ge=0, le=1.0)] = 0.005
    checkpoints_kept: Annotated[int, M(ge=1)] = 2
    max_clock_skew: Annotated[float, M(ge=0)] = 300.0
    max_event_age: Annotated[float, M(ge=1)] = 7 * 86400.0
    dedupe_window: Annotated[float, M(ge=0)] = 86400.0
    dedupe_max_ids: Annotated[int, M(ge=0)] = 1_000_000
    clamp_future: bool = True
    clock_step: Annotated[float, M(ge=0.1)] = 2.0
    clock_adopt_after: Annotated[float, M(ge=0)] = 600.0


class UdpKeyM(Strict):
    id: str
    secret_env: str = ""
    secret_file: str = ""

    def __post_init__(self) -> None:
        refuse(
            field_problems([("id", _key_id_problem, self.id)]) or key_rules(self.secret_env, self.secret_file)
        )


class UdpM(Strict):
    listen: str = "127.0.0.1:27500"
    max_datagram: Annotated[int, M(ge=16, le=65535)] = 65507
    allow: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    receive_buffer: Annotated[int, M(ge=0)] = 4 * 1024 * 1024
    auth: Auth = "off"
    allow_unsigned: bool = False
    keys: tuple[UdpKeyM, ...] = ()
    max_skew: Annotated[float, M(ge=0.001, le=86400)] = 30.0

    def __post_init__(self) -> None:
        checks = [("listen", _hostport_problem, self.listen)]
        checks += [("allow", _network_problem, a) for a in self.allow]
        refuse(
            field_problems(checks)
            or udp_rules(self.listen, self.auth, self.allow_unsigned, [k.id for k in self.keys])
        )


class MqttM(Strict):
    url: str = "off"
    client_id: str = "arenad"
    username: str = ""
    password_env: str = ""
    password_file: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_insecure: bool = False
    keepalive: Annotated[int, M(ge=1, le=65535)] = 30
    reconnect_min: Annotated[float, M(ge=0.01)] = 0.5
    reconnect_max: Annotated[float, M(ge=0.01)] = 30.0
    topics: Annotated[tuple[str, ...], M(min_length=1)] = ("arena/+/kills",)
    qos: Literal[0, 1] = 1
    payload: Payload = "auto"
    payload_by_topic: dict[str, Payload] = msgspec.field(default_factory=dict)
    session_expiry: Annotated[int, M(ge=0)] = 7 * 86400
    max_payload: Annotated[int, M(ge=64)] = 1 << 20

    def __post_init__(self) -> None:
        checks = [("url", _url_problem, self.url), ("client_id", _client_id_problem, self.client_id)]
        checks += [("topics", _topic_filter_problem, t) for t in (*self.topics, *self.payload_by_topic)]
        refuse(
            field_problems(checks)
            or broker_rules(
                self.url,
                username=self.username,
                password_env=self.password_env,
                password_file=self.password_file,
                tls=(self.tls_ca, self.tls_cert, self.tls_key),
                reconnect=(self.reconnect_min, self.reconnect_max),
            )
        )


class DocM(Strict):
    daemon: DaemonM = msgspec.field(default_factory=DaemonM)
    udp: UdpM = msgspec.field(default_factory=UdpM)
    mqtt: MqttM = msgspec.field(default_factory=MqttM)


_MSGSPEC_ERROR = re.compile(r"(?s)(.*) - at `\$(.*)`")


def msgspec_reports(data: dict[str, Any], strict: bool = True) -> list[Report]:
    try:
        msgspec.convert(data, DocM, strict=strict)
    except msgspec.ValidationError as e:
        text = str(e)
        match = _MSGSPEC_ERROR.fullmatch(text)
        message, path = (match.group(1), match.group(2).lstrip(".")) if match else (text, "")
        return [(path, m) for m in message.split(SEP)]
    return []


# ---------------------------------------------------------------------------- attrs + cattrs
av = attrs.validators


def test_of(test: Callable[[Any], str]) -> Callable[[Any, Any, Any], None]:
    """An attrs validator from arenad's ``test(value) -> message``."""

    def validate(_instance: Any, attribute: Any, value: Any) -> None:
        if why := test(value):
            raise ValueError(f"{attribute.name}: {why}")

    return validate


def each(test: Callable[[Any], str]) -> Callable[[Any, Any, Any], None]:
    def validate(_instance: Any, attribute: Any, value: Any) -> None:
        for item in value:
            if why := test(item):
                raise ValueError(f"{attribute.name}: {why}")

    return validate


def num(kind: type, **bounds: float) -> list[Callable[[Any, Any, Any], None]]:
    """instance_of plus attrs' ge / le validators."""
    out: list[Callable[[Any, Any, Any], None]] = [av.instance_of((int, float) if kind is float else kind)]
    out += [getattr(av, op)(bound) for op, bound in bounds.items()]
    return out


@attrs.frozen(kw_only=True)
class DaemonA:
    state_dir: str = attrs.field(default="var/arenad", validator=[av.instance_of(str), av.min_len(1)])
    queue_size: int = attrs.field(default=1024, validator=num(int, ge=1))
    checkpoint_interval: float = attrs.field(default=60.0, validator=num(float, ge=0.1))
    commit_interval: float = attrs.field(default=0.005, validator=num(float, ge=0, le=1.0))
    checkpoints_kept: int = attrs.field(default=2, validator=num(int, ge=1))
    max_clock_skew: float = attrs.field(default=300.0, validator=num(float, ge=0))
    max_event_age: float = attrs.field(default=7 * 86400.0, validator=num(float, ge=1))
    dedupe_window: float = attrs.field(default=86400.0, validator=num(float, ge=0))
    dedupe_max_ids: int = attrs.field(default=1_000_000, validator=num(int, ge=0))
    clamp_future: bool = attrs.field(default=True, validator=av.instance_of(bool))
    clock_step: float = attrs.field(default=2.0, validator=num(float, ge=0.1))
    clock_adopt_after: float = attrs.field(default=600.0, validator=num(float, ge=0))


@attrs.frozen(kw_only=True)
class UdpKeyA:
    id: str = attrs.field(validator=[av.instance_of(str), test_of(_key_id_problem)])
    secret_env: str = attrs.field(default="", validator=av.instance_of(str))
    secret_file: str = attrs.field(default="", validator=av.instance_of(str))

    def __attrs_post_init__(self) -> None:
        refuse(key_rules(self.secret_env, self.secret_file))


@attrs.frozen(kw_only=True)
class UdpA:
    listen: str = attrs.field(default="127.0.0.1:27500", validator=test_of(_hostport_problem))
    max_datagram: int = attrs.field(default=65507, validator=num(int, ge=16, le=65535))
    allow: tuple[str, ...] = attrs.field(default=("127.0.0.0/8", "::1/128"), validator=each(_network_problem))
    receive_buffer: int = attrs.field(default=4 * 1024 * 1024, validator=num(int, ge=0))
    auth: Auth = attrs.field(default="off", validator=av.in_(("required", "optional", "off")))
    allow_unsigned: bool = attrs.field(default=False, validator=av.instance_of(bool))
    keys: tuple[UdpKeyA, ...] = attrs.field(default=(), validator=av.deep_iterable(av.instance_of(UdpKeyA)))
    max_skew: float = attrs.field(default=30.0, validator=num(float, ge=0.001, le=86400))

    def __attrs_post_init__(self) -> None:
        refuse(udp_rules(self.listen, self.auth, self.allow_unsigned, [k.id for k in self.keys]))


@attrs.frozen(kw_only=True)
class MqttA:
    url: str = attrs.field(default="off", validator=test_of(_url_problem))
    client_id: str = attrs.field(default="arenad", validator=test_of(_client_id_problem))
    username: str = attrs.field(default="", validator=av.instance_of(str))
    password_env: str = attrs.field(default="", validator=av.instance_of(str))
    password_file: str = attrs.field(default="", validator=av.instance_of(str))
    tls_ca: str = attrs.field(default="", validator=av.instance_of(str))
    tls_cert: str = attrs.field(default="", validator=av.instance_of(str))
    tls_key: str = attrs.field(default="", validator=av.instance_of(str))
    tls_insecure: bool = attrs.field(default=False, validator=av.instance_of(bool))
    keepalive: int = attrs.field(default=30, validator=num(int, ge=1, le=65535))
    reconnect_min: float = attrs.field(default=0.5, validator=num(float, ge=0.01))
    reconnect_max: float = attrs.field(default=30.0, validator=num(float, ge=0.01))
    topics: tuple[str, ...] = attrs.field(
        default=("arena/+/kills",), validator=[av.min_len(1), each(_topic_filter_problem)]
    )
    qos: Literal[0, 1] = attrs.field(default=1, validator=av.in_((0, 1)))
    payload: Payload = attrs.field(default="auto", validator=av.in_(("auto", "json", "msgpack")))
    payload_by_topic: dict[str, Payload] = attrs.field(factory=dict, validator=each(_topic_filter_problem))
    session_expiry: int = attrs.field(default=7 * 86400, validator=num(int, ge=0))
    max_payload: int = attrs.field(default=1 << 20, validator=num(int, ge=64))

    def __attrs_post_init__(self) -> None:
        refuse(
            broker_rules(
                self.url,
                username=self.username,
                password_env=self.password_env,
                password_file=self.password_file,
                tls=(self.tls_ca, self.tls_cert, self.tls_key),
                reconnect=(self.reconnect_min, self.reconnect_max),
            )
        )


@attrs.frozen(kw_only=True)
class DocA:
    daemon: DaemonA = attrs.field(factory=DaemonA)
    udp: UdpA = attrs.field(factory=UdpA)
    mqtt: MqttA = attrs.field(factory=MqttA)


def strict_hook(kind: type[Any]) -> Callable[[Any, Any], Any]:
    """A cattrs structure hook that takes ``kind`` only (and an int for a float), as TOML gives it."""

    def hook(value: Any, _type: Any) -> Any:
        if type(value) is kind or (kind is float and type(value) is int):
            return kind(value)
        raise TypeError(f"must be {kind.__name__}, got {type(value).__name__} {value!r}")

    return hook


def converter(strict: bool) -> Any:
    conv = cattrs.Converter(forbid_extra_keys=True)  # detailed_validation is on by default
    if strict:
        for kind in (int, float, str, bool):
            conv.register_structure_hook(kind, strict_hook(kind))
    return conv


CONVERTERS = {"cattrs-strict": converter(True), "cattrs-default": converter(False)}
_CATTRS_ERROR = re.compile(r"(?s)(.*) @ \$(.*)")


def cattrs_reports(data: dict[str, Any], conv: Any) -> list[Report]:
    try:
        conv.structure(data, DocA)
    except Exception as e:  # cattrs raises ClassValidationError, or a validator's own error
        out: list[Report] = []
        for line in cattrs.transform_error(e, path="$", format_exception=_cattrs_message):
            match = _CATTRS_ERROR.fullmatch(line)
            message, path = (match.group(1), _cattrs_path(match.group(2))) if match else (line, "")
            if extra := _EXTRA.fullmatch(message):  # one line for all unknown keys of a table
                out.extend((f"{path}.{k}".lstrip("."), "extra field") for k in extra.group(1).split(", "))
            else:
                out.extend((path, m) for m in message.split(SEP))
        return out
    return []


_EXTRA = re.compile(r"extra fields found \((.*)\)")


def _cattrs_message(exc: BaseException, kind: Any) -> str:
    """cattrs' own wording, but a validator's or hook's message instead of its bare "invalid value"."""
    if type(exc) in (ValueError, TypeError):
        return str(exc)
    return str(cattrs.v.format_exception(exc, kind))


def _cattrs_path(path: str) -> str:
    return re.sub(r"\['([^']*)'\]", r".\1", path).lstrip(".")  # $.mqtt['extra'] -> mqtt.extra


# ---------------------------------------------------------------------------- the cases
#: (name, document, the problems it holds: their keys). From tests/test_settings.py
#: (test_problems_name_their_keys, the strict-section tests) and tests/daemon/test_notify.py.
KEYS_OK = [{"id": "eu-1", "secret_env": "K"}]
CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "ten bad keys in three sections and an unknown section",
        {
            "udp": {"listen": "nowhere", "allow": ["300.1.1.1/8"], "max_datagram": 5},
            "mqtt": {"url": "http://x", "qos": 2, "payload": "xml", "reconnect_min": -1},
            "daemon": {"queue_size": 0, "checkpoint_interval": "soon", "commit_interval": 2.5},
            "extra": {},
        },
        [
            "udp.listen",
            "udp.allow",
            "udp.max_datagram",
            "mqtt.url",
            "mqtt.qos",
            "mqtt.payload",
            "mqtt.reconnect_min",
            "daemon.queue_size",
            "daemon.checkpoint_interval",
            "daemon.commit_interval",
            "extra",
        ],
    ),
    (
        "two unknown keys (typos)",
        {"daemon": {"queue_sise": 64}, "mqtt": {"hostname": "broker"}},
        ["daemon.queue_sise", "mqtt.hostname"],
    ),
    (
        "wrong type in the nested list",
        {"udp": {"auth": "required", "keys": [*KEYS_OK, {"id": 7, "secret_env": "K2"}]}},
        ["udp.keys[1].id"],
    ),
    (
        "a list entry that is no table",
        {"udp": {"auth": "required", "keys": ["eu-1"]}},
        ["udp.keys[0]"],
    ),
    (
        "a secret written into a nested entry",
        {"udp": {"auth": "required", "keys": [*KEYS_OK, {"id": "eu-2", "secret_env": "K", "secret": "00"}]}},
        ["udp.keys[1].secret"],
    ),
    (
        "three rules between keys of [mqtt]",
        {
            "mqtt": {
                "url": "mqtt://127.0.0.1",
                "password_env": "PW",
                "tls_ca": "/etc/ssl/ca.pem",
                "reconnect_min": 5.0,
                "reconnect_max": 1.0,
            }
        },
        ["mqtt.password_env", "mqtt.tls_ca", "mqtt.reconnect_max"],
    ),
    (
        "two rules between keys of [udp] (one across entries)",
        {
            "udp": {
                "listen": "0.0.0.0:27500",
                "auth": "optional",
                "keys": [*KEYS_OK, {"id": "eu-1", "secret_file": "/etc/arenad/eu-1.key"}],
            }
        },
        ["udp.keys[1].id", "udp.auth"],
    ),
    (
        "a rule between keys beside a wrong type",
        {"mqtt": {"keepalive": "30", "reconnect_min": 5.0, "reconnect_max": 1.0}},
        ["mqtt.keepalive", "mqtt.reconnect_max"],
    ),
]


def reports(lib: str, data: dict[str, Any]) -> list[Report]:
    if lib == "pydantic":
        return pydantic_reports(data)
    if lib == "msgspec":
        return msgspec_reports(data)
    return cattrs_reports(data, CONVERTERS[lib])


def names(report: Report, key: str) -> bool:
    """Whether ``report`` names the problem at ``key``: its path is the key, or the path of the
    table holding it and the message names the key (`key`, 'key', ``key:`` or ``keys[1].id:``)."""
    path, message = report
    if path == key:
        return True
    rest = key[len(path) :].lstrip(".") if not path or key.startswith((path + ".", path + "[")) else None
    if not rest:
        return False
    leaf = re.split(r"[.\[]", rest)[-1].rstrip("]")
    return message.startswith(f"{rest}:") or f"`{rest}`" in message or f"'{leaf}'" in message


def found_of(got: list[Report], expected: list[str]) -> list[str]:
    left = list(got)
    found = []
    for key in expected:
        hit = next((r for r in left if names(r, key)), None)
        if hit is not None:
            left.remove(hit)
            found.append(key)
    return found


# ---------------------------------------------------------------------------- timing
def valid_document() -> dict[str, Any]:
    """The shipped config's three sections, with two signing keys and a TLS broker with a password."""
    shipped = tomllib.loads(SHIPPED.read_text())
    udp = {**shipped["udp"], "auth": "required"}
    udp["keys"] = [
        {"id": "eu-1", "secret_file": "/etc/arenad/eu-1.key"},
        {"id": "eu-2", "secret_env": "ARENAD_UDP_KEY_EU_2"},
    ]
    mqtt = {
        **shipped["mqtt"],
        "url": "mqtts://broker.example:8883",
        "username": "arenad",
        "password_file": "/etc/arenad/mqtt.pw",
        "tls_ca": "/etc/ssl/ca.pem",
        "payload_by_topic": {"arena/+/json": "json"},
    }
    return {"daemon": shipped["daemon"], "udp": udp, "mqtt": mqtt}


def parser(lib: str) -> Callable[[dict[str, Any]], object]:
    if lib == "pydantic":
        return Doc3.model_validate
    if lib == "pydantic-settings":  # the whole Settings (14 sections, defaults for the others)
        return Settings.from_mapping
    if lib == "msgspec":
        return lambda d: msgspec.convert(d, DocM)
    conv = CONVERTERS[lib]
    return lambda d: conv.structure(d, DocA)


def median_us(fn: Callable[[], object], repeat: int = 21) -> float:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()  # calls per repeat for at least 0.2 s
    number = max(1, number // 2)
    return statistics.median(timer.repeat(repeat=repeat, number=number)) / number * 1e6


IMPORTS = {
    "pydantic": "from pydantic import BaseModel, ConfigDict, Field, model_validator",
    "msgspec": "import msgspec",
    "attrs + cattrs": "import attrs, cattrs",
}


def fresh_ms(code: str, runs: int) -> float:
    """Median over ``runs`` fresh interpreters of the milliseconds ``code`` reports."""
    out = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        for _ in range(runs)
    ]
    return statistics.median(out)


def import_ms(statement: str, runs: int = 15) -> float:
    return fresh_ms(
        f"import time; t = time.perf_counter(); {statement}; print((time.perf_counter() - t) * 1e3)", runs
    )


def first_parse_ms(lib: str, runs: int = 5) -> float:
    """The first parse of the valid document in a fresh interpreter (schemas or code built then)."""
    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT / 'bench')!r}); import settings_libs as s; "
        f"f = s.parser({lib!r}); d = s.valid_document(); t = time.perf_counter(); f(d); "
        "print((time.perf_counter() - t) * 1e3)"
    )
    return fresh_ms(code, runs)


# ---------------------------------------------------------------------------- the side notes
def outcome(fn: Callable[[], object]) -> str:
    try:
        value = fn()
    except Exception as e:
        return f"refused ({type(e).__name__}: {str(e).splitlines()[0][:90]})"
    return f"accepted -> {value!r}"


def side_notes() -> dict[str, dict[str, str]]:
    def pyd(table: dict[str, Any], strict: bool | None = None) -> Callable[[], object]:
        return lambda: DaemonSettings.model_validate(table, strict=strict).model_dump(include=set(table))

    def msg(table: dict[str, Any], strict: bool = True) -> Callable[[], object]:
        return lambda: {k: getattr(msgspec.convert(table, DaemonM, strict=strict), k) for k in table}

    def cat(table: dict[str, Any], lib: str) -> Callable[[], object]:
        return lambda: {k: getattr(CONVERTERS[lib].structure(table, DaemonA), k) for k in table}

    probes: dict[str, dict[str, Any]] = {
        'queue_size = "64"': {"queue_size": "64"},
        "queue_size = 1.9": {"queue_size": 1.9},
        'clamp_future = "false"': {"clamp_future": "false"},
        "checkpoint_interval = inf": {"checkpoint_interval": math.inf},
        "max_clock_skew = nan": {"max_clock_skew": math.nan},
    }
    notes: dict[str, dict[str, str]] = {}
    for label, table in probes.items():
        notes[label] = {
            "pydantic strict (arenad)": outcome(pyd(table)),
            "pydantic lax": outcome(pyd(table, strict=False)),
            "msgspec (strict, default)": outcome(msg(table)),
            "msgspec strict=False": outcome(msg(table, strict=False)),
            "cattrs strict hooks": outcome(cat(table, "cattrs-strict")),
            "cattrs default": outcome(cat(table, "cattrs-default")),
        }
    doc = valid_document()
    made: dict[str, object] = {
        "pydantic": Doc3.model_validate(doc).daemon,
        "msgspec": msgspec.convert(doc, DocM).daemon,
        "attrs": CONVERTERS["cattrs-strict"].structure(doc, DocA).daemon,
    }

    def assign(obj: object) -> Callable[[], object]:
        def go() -> object:
            setattr(obj, "queue_size", 1)  # noqa: B010 (obj is of three unrelated types)
            return obj.queue_size  # type: ignore[attr-defined]

        return go

    notes["frozen: settings.daemon.queue_size = 1"] = {lib: outcome(assign(obj)) for lib, obj in made.items()}
    return notes


# ---------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object at the end")
    ap.add_argument("--runs", type=int, default=5, help="fresh interpreters per first-parse figure")
    args = ap.parse_args()

    results: dict[str, Any] = {
        "versions": {
            "python": platform.python_version(),
            **{p: version(p) for p in ("pydantic", "pydantic-core", "msgspec", "attrs", "cattrs")},
        },
        "cases": [],
    }
    print("versions:", ", ".join(f"{k} {v}" for k, v in results["versions"].items()))
    valid = valid_document()
    for lib in LIBS:
        assert not reports(lib, valid), (lib, reports(lib, valid))  # each model takes the valid document

    totals = {lib: [0, 0] for lib in LIBS}
    for name, data, expected in CASES:
        print(f"\n## {name}: {len(expected)} problem(s): {', '.join(expected)}")
        case: dict[str, Any] = {"name": name, "expected": expected, "libs": {}}
        for lib in LIBS:
            got = reports(lib, data)
            found = found_of(got, expected)
            totals[lib][0] += len(found)
            totals[lib][1] += len(expected)
            case["libs"][lib] = {"found": found, "reports": got}
            print(f"  {lib}: {len(found)} of {len(expected)} named ({len(got)} message(s))")
            for path, message in got:
                print(f"      {path or '$'}: {message}")
        results["cases"].append(case)

    print("\n## problems named in one pass, all cases")
    for lib, (found_n, total) in totals.items():
        print(f"  {lib}: {found_n} of {total}")
    results["totals"] = totals

    print("\n## parse of the valid document (median, in process)")
    results["parse_us"] = {}
    for lib in ("pydantic", "pydantic-settings", *LIBS[1:]):
        fn = parser(lib)
        fn(valid)  # schemas and generated code built outside the timing
        us = median_us(lambda fn=fn: fn(valid))  # type: ignore[misc]
        results["parse_us"][lib] = us
        print(f"  {lib}: {us:.1f} µs")

    print(f"\n## fresh interpreter: first parse (median of {args.runs}) and import (median of 15)")
    results["first_parse_ms"] = {}
    for lib in ("pydantic", "pydantic-settings", *LIBS[1:]):
        results["first_parse_ms"][lib] = first_parse_ms(lib, args.runs)
        print(f"  first parse, {lib}: {results['first_parse_ms'][lib]:.1f} ms")
    results["import_ms"] = {}
    for lib, statement in IMPORTS.items():
        results["import_ms"][lib] = import_ms(statement)
        print(f"  import, {lib}: {results['import_ms'][lib]:.1f} ms ({statement})")

    print("\n## side notes")
    results["notes"] = side_notes()
    for label, row in results["notes"].items():
        print(f"  {label}")
        for lib, text in row.items():
            print(f"      {lib}: {text}")
    if args.json:
        print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
