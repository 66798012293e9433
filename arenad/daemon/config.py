"""Typed settings of the daemon's own sections: ``[daemon] [query] [metrics] [log] [models]
[scopes] [admin] [history]``, and the base every section model is built on.

Each section is a frozen pydantic model (``Section``): strict types (an integer where a number is
wanted is fine, ``"10"`` or ``true`` is not), unknown keys refused, one model per section, rules
between keys as one model validator per model. A settings object therefore only exists once it is
valid, and its annotations are true. ``problems_from`` turns pydantic's errors into
``ConfigProblem``s (key path, value, a message in this project's words), so ``arenad check-config``
lists every problem at once. The sources' sections are in ``arenad.daemon.config_sources``; the
whole file is ``arenad.settings``.

This module sits below the daemon and the feeds: it imports neither (a test checks it).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from arenad.core.params import PAPER
from arenad.errors import ConfigProblem
from arenad.gates import BOT_POLICIES, GateConfig
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

T = TypeVar("T")


# ---------------------------------------------------------------------------- the base
class Section(BaseModel):
    """A settings table: strict, unknown keys refused, frozen, non-finite numbers refused."""

    # Schemas are built at the first validation, not at import (~0.3 s on this VM): `arenad query`,
    # `emit` and the other commands that read no config never pay for them.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


_RULES = "arenad_rules"


def refuse(problems: Iterable[ConfigProblem]) -> None:
    """Raise the problems a rule between keys found, if any (keys relative to the model).

    A model validator can raise one error only; this one carries every problem, and
    ``problems_from`` lists each with its own key.
    """
    found = tuple(problems)
    if found:
        raise PydanticCustomError(_RULES, "{count} problems", {"count": len(found), "problems": found})


def _tuple_of_array(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


#: A TOML array, held as a tuple (strict mode takes only tuples; TOML gives lists).
Array = Annotated[tuple[T, ...], BeforeValidator(_tuple_of_array)]


def check(test: Callable[[Any], str]) -> AfterValidator:
    """A validator from ``test(value) -> message`` ("" when the value is good)."""

    def validate(value: T) -> T:
        message = test(value)
        if message:
            raise ValueError(message)
        return value

    return AfterValidator(validate)


def one_of(choices: Sequence[object], message: str = "") -> AfterValidator:
    """The value must be one of ``choices`` (by ``==`` and type, so ``true`` is not ``1``)."""
    text = message or "must be one of: " + ", ".join(map(str, choices))
    return check(lambda v: "" if any(type(v) is type(c) and v == c for c in choices) else text)


def _off(text: str) -> bool:
    return text.strip().lower() in ("", "off", "none", "false", "no", "0")


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


def _hostport_problem(text: str) -> str:
    if _off(text):
        return ""
    try:
        parse_hostport(text)
    except ValueError as e:
        return f'must be "HOST:PORT" or "off" ({e})'
    return ""


def _network_problem(text: str) -> str:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return 'not an IP network (e.g. "10.0.0.0/8")'
    return ""


#: A listen address, ``"HOST:PORT"``, or ``"off"`` (also ``""``, ``"none"``, ``"false"``).
Listen = Annotated[str, check(_hostport_problem)]
Network = Annotated[str, check(_network_problem)]
NonEmpty = Annotated[str, check(lambda v: "" if v.strip() else "must not be empty")]
Name = Annotated[
    str, check(lambda v: "" if NAME_PATTERN.match(v) else "must be 1-64 letters, digits, '.', '_' or '-'")
]
ServerId = Annotated[str, check(lambda v: "" if v else "must be a non-empty server id")]


def _instant(value: object) -> float:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise ValueError("must be a date-time with a zone (2026-01-01T00:00:00Z) or unix seconds")


#: A TOML offset date-time (``2026-01-01T00:00:00Z``) or unix seconds, held as unix seconds.
Instant = Annotated[float, PlainValidator(_instant)]


# ---------------------------------------------------------------------------- problems
_MESSAGES = {
    "missing": "required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "finite_number": "must be finite",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "list_type": "must be a list",
    "string_too_short": "must not be empty",
}
#: Keys that would hold a secret: refused without echoing the value.
SECRET_KEYS = frozenset(("secret", "logsecret", "sv_logsecret", "password", "token"))


def problems_from(error: ValidationError, root: type[BaseModel], prefix: str = "") -> list[ConfigProblem]:
    """Every error of ``error`` as a ``ConfigProblem``: the key path (``udp.keys[0].id``), the
    value and a message. ``root`` is the model that was validated, ``prefix`` its key."""
    out: list[ConfigProblem] = []
    for e in error.errors(include_url=False):
        kind, loc, value = e["type"], e["loc"], e["input"]
        key = _key(prefix, loc, table=kind in ("model_type", "dict_type", _RULES))
        if kind == _RULES:
            found: tuple[ConfigProblem, ...] = e.get("ctx", {})["problems"]
            out.extend(ConfigProblem(_join(key, p.key) if p.key else key, p.value, p.message) for p in found)
            continue
        if kind == "missing":
            value = None
        elif kind == "extra_forbidden" and loc[-1] in SECRET_KEYS:
            value = "<hidden>"
        out.append(ConfigProblem(key, value, _message(e, root, key)))
    return out


def _key(prefix: str, loc: tuple[int | str, ...], *, table: bool) -> str:
    parts = [p for p in loc if p != "[key]"]  # a bad table key is named by the key itself
    # A scalar in a list is named by the list (its value says which); a table keeps its index.
    if parts and isinstance(parts[-1], int) and not table:
        parts.pop()
    key = prefix
    for p in parts:
        key = f"{key}[{p}]" if isinstance(p, int) else _join(key, p)
    return key


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _message(e: ErrorDetails, root: type[BaseModel], key: str) -> str:
    kind, loc, value, ctx = e["type"], e["loc"], e["input"], e.get("ctx", {})
    if kind == "extra_forbidden":
        known = _known_keys(root, loc[:-1])
        if loc[-1] in SECRET_KEYS:
            sources = [k for k in known if k.endswith(("_env", "_file"))]
            return "secrets never live in the config: use " + " or ".join(sources or ("a file",))
        what = "unknown section" if len(loc) == 1 else "unknown key"
        return f"{what} (known: {', '.join(known)})" if known else what
    if kind == "value_error":
        return str(ctx.get("error", e["msg"]))
    if kind in _BOUNDS:
        sign, name = _BOUNDS[kind]
        return f"must be {sign} {ctx[name]}"
    if kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
        return "must be finite"  # an integer too large for a float
    if kind == "too_short":
        return "must not be empty"
    if kind == "tuple_type":
        inner = _model_in(_annotation_at(root, loc))
        return f"must be an array of tables: [[{key}]]" if inner is not None else "must be a list"
    if kind == "literal_error":
        return "must be " + str(ctx.get("expected", "")).replace("'", '"')
    return _MESSAGES.get(kind, e["msg"])


_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def _annotation_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> object:
    """The annotation of the field at ``loc`` below ``root`` (``None`` if there is none)."""
    model: type[BaseModel] | None = root
    annotation: object = None
    for part in loc:
        if isinstance(part, int):
            continue  # an element of an array: the model inside it was found below
        if model is None:
            return None
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        annotation = field.annotation
        model = _model_in(annotation)
    return annotation


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _known_keys(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    model = _model_in(_annotation_at(root, loc)) if loc else root
    if model is None:
        return []
    return [f.alias or n for n, f in model.model_fields.items()]


def validate(cls: type[S], data: object, prefix: str = "") -> tuple[S | None, list[ConfigProblem]]:
    """``cls`` from its TOML table, or ``None`` and every problem (keys under ``prefix``)."""
    try:
        return cls.model_validate(data), []
    except ValidationError as e:
        return None, problems_from(e, cls, prefix)


S = TypeVar("S", bound=BaseModel)


# ---------------------------------------------------------------------------- [daemon]
class DaemonSettings(Section):
    """``[daemon]``: state, queue, durability and the time rules of validation."""

    state_dir: NonEmpty = "var/arenad"
    queue_size: Annotated[int, Field(ge=1)] = 1024  # batches waiting for the engine task
    checkpoint_interval: Annotated[float, Field(ge=0.1)] = 60.0  # seconds between checkpoints
    commit_interval: Annotated[float, Field(ge=0, le=1.0)] = 0.005  # an engine step at most this often
    checkpoints_kept: Annotated[int, Field(ge=1)] = 2  # the newest and a fallback
    max_clock_skew: Annotated[float, Field(ge=0)] = 300.0  # further in the future is future_time
    max_event_age: Annotated[float, Field(ge=1)] = 7 * 86400.0  # older (wall clock) is too_old
    dedupe_window: Annotated[float, Field(ge=0)] = 86400.0  # seconds an event id is remembered
    dedupe_max_ids: Annotated[int, Field(ge=0)] = 1_000_000  # and at most this many ids
    clamp_future: bool = True  # an event stamped ahead of this host's clock is rated at arrival
    clock_step: Annotated[float, Field(ge=0.1)] = 2.0  # a larger wall-clock change is a step
    clock_adopt_after: Annotated[float, Field(ge=0)] = 600.0  # seconds a step persists to be adopted


# ---------------------------------------------------------------------------- [query] [metrics] [log]
class QuerySettings(Section):
    """``[query]``: newline-delimited JSON lookups over TCP and optionally a Unix socket."""

    listen: Listen = "127.0.0.1:27510"  # "off" disables TCP
    unix: str = ""  # path of a Unix socket; empty = none
    max_line: Annotated[int, Field(ge=64)] = 4096
    max_connections: Annotated[int, Field(ge=1)] = 256
    idle_timeout: Annotated[float, Field(ge=0.1)] = 300.0
    rate_limit: Annotated[float, Field(ge=0)] = 200.0  # requests/s per connection; 0 = unlimited
    burst: Annotated[int, Field(ge=1)] = 400  # requests a connection may send at once
    max_top: Annotated[int, Field(ge=1)] = 1000  # largest n for top / around
    display_k: Annotated[float, Field(ge=0)] = 3.0  # display rating = mu - display_k * sigma

    @property
    def tcp_enabled(self) -> bool:
        return not _off(self.listen)


class MetricsSettings(Section):
    """``[metrics]``: Prometheus ``/metrics`` and ``/healthz``."""

    listen: Listen = "127.0.0.1:9108"  # "off" disables

    @property
    def enabled(self) -> bool:
        return not _off(self.listen)


LOG_LEVELS = ("debug", "info", "warning", "error")


class LogSettings(Section):
    """``[log]``: structlog output."""

    format: Annotated[str, one_of(("auto", "json", "console"), 'must be "auto", "json" or "console"')] = (
        "auto"
    )
    level: Annotated[
        str, check(lambda v: "" if v.lower() in LOG_LEVELS else "must be debug, info, warning or error")
    ] = "info"
    reject_warning_interval: Annotated[float, Field(ge=0)] = 10.0  # one reject warning per reason


# ---------------------------------------------------------------------------- [models]
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


def _primary_problem(name: str) -> str:
    if name in PRIMARY_MODELS:
        return ""
    return (
        "the ladder, tiers and queries are ADR's, so the primary must be an ADR variant: "
        f"{', '.join(PRIMARY_MODELS)} (run other models as shadows)"
    )


def _shadow_problem(name: str) -> str:
    """Why ``name`` cannot run as a shadow model ("" if it can)."""
    known, errors = discover_models()
    factory = known.get(name)
    if factory is None:
        failed = [e for e in errors if e.startswith(f"{name}: ")]
        why = f"its plugin failed to load ({failed[0]})" if failed else f"known: {', '.join(known)}"
        return f"no such rating model ({why})"
    try:
        model = factory()
    except Exception as e:  # a third-party factory: report it, whatever it raised
        return f"cannot be built: {type(e).__name__}: {e}"
    if is_offline(model):
        return (
            "is an offline model (it refits over the whole history, so its cost grows without "
            "bound); use it with `arenad evaluate`"
        )
    return ""


class ModelsSettings(Section):
    """``[models]``: the primary (ADR) model and shadow models scored beside it."""

    primary: Annotated[str, check(_primary_problem)] = "adr"  # an ADR variant (PRIMARY_MODELS)
    shadows: Array[str] = ()  # names of arenad.models plugins run beside it
    window: Annotated[int, Field(ge=2, le=MAX_WINDOW)] = 10_000  # scored predictions per model

    @field_validator("shadows")
    @classmethod
    def _runnable(cls, shadows: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        # Reads primary (validated first) here rather than in a model validator, so that these
        # problems are listed even when window is wrong too.
        primary = info.data.get("primary")
        found: list[ConfigProblem] = []
        for n, name in enumerate(shadows):
            if name in shadows[:n]:
                found.append(ConfigProblem("", name, "listed twice"))
            elif name == primary:
                found.append(ConfigProblem("", name, "is the primary model already"))
            elif why := _shadow_problem(name):
                found.append(ConfigProblem("", name, why))
        refuse(found)
        return shadows


# ---------------------------------------------------------------------------- [scopes]
class SeasonEntry(Section):
    """``[[scopes.season]]``: a season of its own name from ``start`` on."""

    name: Name
    start: Instant


class EventEntry(Section):
    """``[[scopes.event]]``: a tournament ladder from ``start`` to ``end``, of ``servers`` (all if empty)."""

    name: Name
    start: Instant
    end: Instant
    servers: Array[ServerId] = ()

    @model_validator(mode="after")
    def _ends_after_start(self) -> Self:
        refuse([ConfigProblem("end", self.end, "must be after start")] if self.end <= self.start else [])
        return self


def _kinds_problems(kinds: tuple[str, ...]) -> tuple[str, ...]:
    found = [
        ConfigProblem("", k, f"unknown scope kind (known: {', '.join(SCOPE_KINDS)})")
        for k in kinds
        if k not in SCOPE_KINDS
    ]
    if len(set(kinds)) != len(kinds):
        found.append(ConfigProblem("", list(kinds), "lists a kind twice"))
    if "global" not in kinds:
        found.append(
            ConfigProblem("", list(kinds), 'must include "global" (the ladder every query falls back to)')
        )
    refuse(found)
    return kinds


_RESETS = (*RESET_PRESETS, "custom")


class ScopesSettings(Section):
    """``[scopes]``: which leaderboards exist besides the global one (``arenad.scopes``)."""

    kinds: Annotated[Array[str], AfterValidator(_kinds_problems)] = ("global",)  # of SCOPE_KINDS
    servers: Array[ServerId] = ()  # server ids with their own metric series (bounded cardinality)
    max_servers: Annotated[int, Field(ge=0)] = 1000  # most server scopes (a flood stops here)
    season_calendar: Annotated[str, one_of(SEASON_CALENDARS)] = "none"  # monthly, quarterly, yearly
    season_reset: Annotated[str, one_of(_RESETS)] = "softer"  # continuous | softer | soft | hard | custom
    season_alpha: Annotated[float, Field(ge=1.0, le=3.0)] = 1.0  # "custom": sigma expansion (§4.1)
    season_lambda: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0  # "custom": pull to the band's centre
    season: Array[SeasonEntry] = ()  # [[scopes.season]] name, start
    event: Array[EventEntry] = ()  # [[scopes.event]] name, start, end, servers

    @model_validator(mode="after")
    def _windows(self) -> Self:
        found = [
            ConfigProblem(f"{table}[{n}].name", name, "used twice")
            for table, entries in (("season", self.season), ("event", self.event))
            for n, name in enumerate(e.name for e in entries)
            if name in [e.name for e in entries[:n]]
        ]
        if self.season and self.season_calendar != "none":
            found.append(
                ConfigProblem(
                    "season", len(self.season), "give either season_calendar or [[scopes.season]], not both"
                )
            )
        refuse(found)
        return self

    def reset(self) -> Reset:
        if self.season_reset == "custom":
            return Reset(self.season_alpha, self.season_lambda)
        return RESET_PRESETS[self.season_reset]

    def config(self) -> ScopeConfig:
        """The pure core's view."""
        return ScopeConfig(
            kinds=self.kinds,
            max_servers=self.max_servers,
            season_calendar=self.season_calendar,
            seasons=tuple(sorted((SeasonStart(e.name, e.start) for e in self.season), key=lambda s: s.start)),
            season_reset=self.reset(),
            events=tuple(EventWindow(e.name, e.start, e.end, frozenset(e.servers)) for e in self.event),
        )


class GatesSettings(Section):
    """``[gates]``: anti-boosting gates before rating, and the boosting report (``arenad.gates``)."""

    min_players: Annotated[int, Field(ge=0, le=64)] = 0  # distinct players seen on the server; 0: off
    window: Annotated[float, Field(ge=10.0, le=86400.0)] = 600.0  # seconds of event time "seen" lasts
    bots: Annotated[str, one_of(BOT_POLICIES)] = "rated"  # rated | excluded | hidden
    suspects: bool = False  # keep the boosting report (admin op suspects, a metric)
    suspect_window: Annotated[float, Field(ge=60.0, le=30 * 86400.0)] = 86400.0
    suspect_min_kills: Annotated[int, Field(ge=2)] = 10
    suspect_p: Annotated[float, Field(gt=0.0, lt=1.0)] = 1e-6

    def config(self) -> GateConfig:
        return GateConfig(
            min_players=self.min_players,
            window=self.window,
            bots=self.bots,
            suspects=self.suspects,
            suspect_window=self.suspect_window,
            suspect_min_kills=self.suspect_min_kills,
            suspect_p=self.suspect_p,
        )


# ---------------------------------------------------------------------------- [admin] [history]
class AdminSettings(Section):
    """``[admin]``: season start, exclude, recompute and reload. Never on the public query port:
    a Unix socket (filesystem permissions decide who may) and, optionally, TCP with a token."""

    unix: str = "admin.sock"  # relative paths are inside [daemon] state_dir; "off" disables
    listen: Listen = "off"  # TCP "HOST:PORT" for admin with a token; needs token_file
    token_file: str = ""  # file holding the token (at least 16 characters)

    @property
    def tcp_enabled(self) -> bool:
        return not _off(self.listen)

    @model_validator(mode="after")
    def _tcp_needs_a_token(self) -> Self:
        if self.tcp_enabled and not self.token_file:
            refuse([ConfigProblem("listen", self.listen, "admin over TCP needs admin.token_file")])
        return self


class HistorySettings(Section):
    """``[history]``: the compressed event archive and snapshots kept for recompute, and the
    players' rating history (their play sessions)."""

    archive: bool = True  # keep every journaled event (compressed) instead of deleting it
    archive_file_bytes: Annotated[int, Field(ge=4096)] = 64 << 20  # a new archive file past this size
    snapshot_interval: Annotated[float, Field(ge=0.1)] = 3600.0  # seconds between kept snapshots
    snapshots_kept: Annotated[int, Field(ge=1)] = 48
    # The rating history (docs/web.md): players' play sessions, kept in <state_dir>/ratings.sqlite.
    ratings: bool = True
    session_gap: Annotated[float, Field(ge=60.0, le=86400.0)] = 1800.0  # idle seconds that end one
    ratings_days: Annotated[float, Field(ge=0.0)] = 730.0  # sessions kept this long; 0: for ever
