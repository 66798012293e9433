"""The one typed settings object, loaded from TOML (``tomllib``) and validated by pydantic.

Unknown sections and keys are errors. Every problem is reported at once as key, value and message
(``arenad check-config FILE`` prints them); nothing starts with a half-valid configuration, and no
invalid settings object ever exists. Sections: ``[adr]`` (the rating core, a standard-library
dataclass parsed by ``ADRParams.from_mapping`` so the core keeps no dependencies), ``[models]``
(the primary ADR variant and the shadow models), the daemon's (``arenad.daemon.config``), the
sources' (``arenad.daemon.config_sources``) and the web layer's ``[web]`` (``arenad.web.config``).

``[models] primary`` names an ADR variant; the parameters that variant sets are folded into
``Settings.adr``, so everything that rates with ``settings.adr`` (the daemon, ``arenad replay``)
rates with the primary model.

Like the section modules, this one sits below the daemon and the feeds (a test checks it).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Self

from pydantic import Field, InstanceOf, ValidationError, model_validator

from arenad.core.params import ADRParams
from arenad.daemon.config import (
    PRIMARY_MODELS,
    AdminSettings,
    Array,
    DaemonSettings,
    GatesSettings,
    HistorySettings,
    LogSettings,
    MetricsSettings,
    ModelsSettings,
    QuerySettings,
    ScopesSettings,
    Section,
    problems_from,
    refuse,
)
from arenad.daemon.config_cluster import ClusterSettings
from arenad.daemon.config_ingame import InGameSettings
from arenad.daemon.config_sources import HlUdpSettings, MqttSettings, NotifySettings, TailSpec, UdpSettings
from arenad.errors import ConfigError, ConfigProblem
from arenad.scopes import ScopeConfig
from arenad.web.config import WebSettings

#: A check of a part of the document that a layer above the settings owns (a feed's options):
#: it takes the parsed TOML document and returns its problems.
Check = Callable[[Mapping[str, Any]], list[ConfigProblem]]


class Settings(Section):
    """Everything arenad can be configured with."""

    adr: InstanceOf[ADRParams] = Field(default_factory=ADRParams)
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)
    udp: UdpSettings = Field(default_factory=UdpSettings)
    mqtt: MqttSettings = Field(default_factory=MqttSettings)
    query: QuerySettings = Field(default_factory=QuerySettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    models: ModelsSettings = Field(default_factory=ModelsSettings)
    scopes: ScopesSettings = Field(default_factory=ScopesSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    gates: GatesSettings = Field(default_factory=GatesSettings)  # anti-boosting (issue 17)
    web: WebSettings = Field(default_factory=WebSettings)  # HTTP API and pages (arenad.web)
    notify: NotifySettings = Field(default_factory=NotifySettings)  # rating changes to MQTT
    source_udp: HlUdpSettings = Field(default_factory=HlUdpSettings)  # Source-engine UDP logs
    tail: Array[TailSpec] = ()  # [[tail]]: game-server log files to follow
    ingame: InGameSettings = Field(default_factory=InGameSettings)  # chat commands over rcon
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)  # NATS JetStream (issue 18)

    def scope_config(self) -> ScopeConfig:
        """The scopes the daemon keeps: ``[scopes]``, the play sessions of the rating history
        when ``[history] ratings`` is on, and the ``[gates]``."""
        gap = self.history.session_gap if self.history.ratings else 0.0
        return replace(self.scopes.config(), session_gap=gap, gates=self.gates.config())

    @model_validator(mode="after")
    def _two_connections(self) -> Self:
        refuse(self.notify.conflicts(self.mqtt))
        return self

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], source: str = "", checks: Iterable[Check] = ()
    ) -> Settings:
        """Settings from a parsed TOML document; ``ConfigError`` lists every problem, those the
        ``checks`` find in the document too (a layer above, such as a feed, checks its part)."""
        problems: list[ConfigProblem] = [p for check in checks for p in check(data)]
        adr_table = data.get("adr", {})
        adr = ADRParams()
        if not isinstance(adr_table, Mapping):
            problems.append(ConfigProblem("adr", adr_table, "must be a table"))
        else:
            try:
                adr = ADRParams.from_mapping(adr_table)
            except ConfigError as e:
                problems.extend(e.problems)
        try:
            settings = cls.model_validate({**data, "adr": adr})
        except ValidationError as e:
            problems.extend(problems_from(e, cls))
        else:
            if isinstance(adr_table, Mapping):
                adr = _primary_params(adr, adr_table, settings.models.primary, problems)
        if problems:
            raise ConfigError(problems, source)
        return settings.model_copy(update={"adr": adr})

    def overridden(
        self, changes: Mapping[str, Mapping[str, object]], tail: tuple[TailSpec, ...] = ()
    ) -> Settings:
        """These settings with ``changes`` (section -> key -> value) and ``tail`` entries added,
        validated like the file: ``ConfigError`` (source "command line") lists every problem."""
        data: dict[str, object] = {name: getattr(self, name) for name in type(self).model_fields}
        problems: list[ConfigProblem] = []
        for name, keys in changes.items():
            section = getattr(self, name)
            table = {**section.model_dump(by_alias=True), **keys}
            try:
                data[name] = type(section).model_validate(table)
            except ValidationError as e:
                problems.extend(problems_from(e, type(section), name))
        data["tail"] = (*self.tail, *tail)
        if not problems:
            try:
                return type(self).model_validate(data)
            except ValidationError as e:
                problems.extend(problems_from(e, type(self)))
        raise ConfigError(problems, "command line")


def _primary_params(
    adr: ADRParams, adr_table: Mapping[str, Any], primary: str, problems: list[ConfigProblem]
) -> ADRParams:
    """``[adr]`` with the parameters of the primary ADR variant; a contradiction is a problem."""
    overrides = PRIMARY_MODELS[primary]
    if not overrides:
        return adr  # plain "adr"
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


def load_settings(path: Path | str | None, checks: Iterable[Check] = ()) -> Settings:
    """Read and validate a TOML settings file (and run ``checks`` on it); ``None`` gives the
    defaults."""
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
    return Settings.from_mapping(data, str(p), checks)
