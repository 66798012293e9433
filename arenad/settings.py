"""The one typed settings object, loaded from TOML (``tomllib``).

Unknown sections and keys are errors. Every problem is reported at once as key, value and message
(``arenad check-config FILE`` prints them); nothing starts with a half-valid configuration.
Sections: ``[adr]`` (the rating core), ``[models]`` (the primary ADR variant and the shadow models)
and the daemon's ``[daemon] [udp] [mqtt] [query] [metrics] [log]`` (``arenad.daemon.config``).

``[models] primary`` names an ADR variant; the parameters that variant sets are folded into
``Settings.adr``, so everything that rates with ``settings.adr`` (the daemon, ``arenad replay``)
rates with the primary model.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from arenad.core.params import ADRParams
from arenad.daemon.config import (
    PRIMARY_MODELS,
    AdminSettings,
    DaemonSettings,
    HistorySettings,
    LogSettings,
    MetricsSettings,
    ModelsSettings,
    MqttSettings,
    QuerySettings,
    ScopesSettings,
    UdpSettings,
    section_from_mapping,
)
from arenad.daemon.notify import NotifySettings
from arenad.daemon.sources.hl_udp import HlUdpSettings, hl_udp_from_mapping
from arenad.daemon.sources.tail import TailSpec
from arenad.errors import ConfigError, ConfigProblem

_DAEMON_SECTIONS: dict[str, type[Any]] = {
    "daemon": DaemonSettings,
    "udp": UdpSettings,
    "mqtt": MqttSettings,
    "query": QuerySettings,
    "metrics": MetricsSettings,
    "log": LogSettings,
    "models": ModelsSettings,
    "scopes": ScopesSettings,
    "admin": AdminSettings,
    "history": HistorySettings,
    "notify": NotifySettings,
}
SECTIONS = ("adr", *_DAEMON_SECTIONS, "source_udp", "tail")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything arenad can be configured with."""

    adr: ADRParams = field(default_factory=ADRParams)
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    udp: UdpSettings = field(default_factory=UdpSettings)
    mqtt: MqttSettings = field(default_factory=MqttSettings)
    query: QuerySettings = field(default_factory=QuerySettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    log: LogSettings = field(default_factory=LogSettings)
    models: ModelsSettings = field(default_factory=ModelsSettings)
    scopes: ScopesSettings = field(default_factory=ScopesSettings)
    admin: AdminSettings = field(default_factory=AdminSettings)
    history: HistorySettings = field(default_factory=HistorySettings)
    notify: NotifySettings = field(default_factory=NotifySettings)  # rating changes to MQTT
    source_udp: HlUdpSettings = field(default_factory=HlUdpSettings)  # Source-engine UDP logs
    tail: tuple[TailSpec, ...] = ()  # [[tail]]: game-server log files to follow

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "") -> Settings:
        problems: list[ConfigProblem] = []
        for key, value in data.items():
            if key not in SECTIONS:
                problems.append(ConfigProblem(key, value, f"unknown section (known: {', '.join(SECTIONS)})"))
        adr_table = data.get("adr", {})
        adr = ADRParams()
        if not isinstance(adr_table, Mapping):
            problems.append(ConfigProblem("adr", adr_table, "must be a table"))
        else:
            try:
                adr = ADRParams.from_mapping(adr_table)
            except ConfigError as e:
                problems.extend(e.problems)
        sections: dict[str, Any] = {}
        for name, section_cls in _DAEMON_SECTIONS.items():
            table = data.get(name, {})
            if not isinstance(table, Mapping):
                problems.append(ConfigProblem(name, table, "must be a table"))
                continue
            sections[name] = section_from_mapping(section_cls, name, table, problems)
        tails = tail_specs_from_toml(data.get("tail", []), problems)
        hl_table = data.get("source_udp", {})
        hl_udp = HlUdpSettings()
        if not isinstance(hl_table, Mapping):
            problems.append(ConfigProblem("source_udp", hl_table, "must be a table"))
        else:
            hl_udp, more = hl_udp_from_mapping(hl_table)
            problems.extend(more)
        models = sections.get("models")
        if isinstance(models, ModelsSettings) and isinstance(adr_table, Mapping):
            adr = _primary_params(adr, adr_table, models.primary, problems)
        notify, mqtt = sections.get("notify"), sections.get("mqtt")
        if isinstance(notify, NotifySettings) and isinstance(mqtt, MqttSettings):
            problems.extend(notify.conflicts(mqtt))
        if problems:
            raise ConfigError(problems, source)
        return cls(adr=adr, tail=tails, source_udp=hl_udp, **sections)


def _primary_params(
    adr: ADRParams, adr_table: Mapping[str, Any], primary: str, problems: list[ConfigProblem]
) -> ADRParams:
    """``[adr]`` with the parameters of the primary ADR variant; a contradiction is a problem."""
    overrides = PRIMARY_MODELS.get(primary) if isinstance(primary, str) else None
    if not overrides:
        return adr  # plain "adr", or an unknown primary (ModelsSettings reports that)
    # A paper variant fixes every parameter of its preset: [adr] may repeat them, not change them.
    hint = (
        ' (or primary = "adr" with [adr] preset = "paper" and your changes)' if "preset" in overrides else ""
    )
    for key, value in overrides.items():
        if key in adr_table and adr_table[key] != value:
            problems.append(
                ConfigProblem(
                    "models.primary",
                    primary,
                    f"sets adr.{key} = {value!r}, but [adr] sets {key} = {adr_table[key]!r}: remove one"
                    + hint,
                )
            )
    params = {k: v for k, v in overrides.items() if k != "preset"}
    return replace(adr, **params)  # type: ignore[arg-type]


def load_settings(path: Path | str | None) -> Settings:
    """Read and validate a TOML settings file; ``None`` gives the defaults."""
    if path is None:
        return Settings()
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError([ConfigProblem("<file>", str(p), f"cannot read: {e.strerror or e}")], str(p)) from e
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError([ConfigProblem("<file>", str(p), f"not UTF-8: {e}")], str(p)) from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([ConfigProblem("<file>", str(p), f"not valid TOML: {e}")], str(p)) from e
    return Settings.from_mapping(data, str(p))


_TAIL_KEYS = {"format", "path", "server", "from_start", "options"}


def tail_specs_from_toml(raw: object, problems: list[ConfigProblem]) -> tuple[TailSpec, ...]:
    """``[[tail]]`` entries: format (a feed plugin), path, optional server, from_start, options."""
    if not isinstance(raw, list):
        problems.append(ConfigProblem("tail", raw, "must be an array of tables: [[tail]]"))
        return ()
    out: list[TailSpec] = []
    for k, entry in enumerate(raw):
        where = f"tail[{k}]"
        if not isinstance(entry, Mapping):
            problems.append(ConfigProblem(where, entry, "must be a table"))
            continue
        for key in entry:
            if key not in _TAIL_KEYS:
                problems.append(ConfigProblem(f"{where}.{key}", entry[key], "unknown key"))
        fmt, path, server = entry.get("format"), entry.get("path"), entry.get("server")
        from_start, options = entry.get("from_start", False), entry.get("options", {})
        ok = True
        for key, value in (("format", fmt), ("path", path)):
            if not isinstance(value, str) or not value:
                problems.append(ConfigProblem(f"{where}.{key}", value, "must be a non-empty string"))
                ok = False
        if server is not None and not isinstance(server, str):
            problems.append(ConfigProblem(f"{where}.server", server, "must be a string"))
            ok = False
        if not isinstance(from_start, bool):
            problems.append(ConfigProblem(f"{where}.from_start", from_start, "must be true or false"))
            ok = False
        if not isinstance(options, Mapping):
            problems.append(ConfigProblem(f"{where}.options", options, "must be a table"))
            ok = False
        if ok:
            out.append(TailSpec(str(fmt), str(path), server, bool(from_start), tuple(dict(options).items())))
    return tuple(out)
