"""The one typed settings object, loaded from TOML (``tomllib``).

Unknown sections and keys are errors. Every problem is reported at once as key, value and message
(``arenad check-config FILE`` prints them); nothing starts with a half-valid configuration.
The daemon's own sections are added by the daemon; today the file holds ``[adr]``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arenad.core.params import ADRParams
from arenad.errors import ConfigError, ConfigProblem

SECTIONS = ("adr",)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything arenad can be configured with."""

    adr: ADRParams = field(default_factory=ADRParams)

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
        if problems:
            raise ConfigError(problems, source)
        return cls(adr=adr)


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
