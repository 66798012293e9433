"""The one exception hierarchy of arenad.

::

    ArenadError
    ├── ConfigError        a settings file or parameter set is invalid (lists every problem)
    ├── InputError         an input file cannot be read at all (a bad *line* is a reject, not an error)
    ├── StateError         the state directory cannot be used (arenad.daemon.state)
    ├── QueryClientError   ``arenad query`` got no usable answer (arenad.daemon.query_client)
    └── RconError          a game server's rcon did not take a command (arenad.ingame.rcon:
                           RconTimeoutError, RconAuthError, RconUnreachableError, RconProtocolError)
"""

from __future__ import annotations

from dataclasses import dataclass


class ArenadError(Exception):
    """Base class of every error arenad raises on purpose."""


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One invalid setting: where it is, what it holds, and what is wrong with it."""

    key: str
    value: object
    message: str

    def __str__(self) -> str:
        return f"{self.key} = {self.value!r}: {self.message}"


class ConfigError(ArenadError):
    """Settings are invalid. ``problems`` names every key at fault, not just the first."""

    def __init__(self, problems: list[ConfigProblem], source: str = "") -> None:
        self.problems = problems
        self.source = source
        head = f"invalid configuration{' in ' + source if source else ''}"
        super().__init__(head + ":\n" + "\n".join(f"  {p}" for p in problems))


class InputError(ArenadError):
    """An input (event file, state file) cannot be opened or read."""
