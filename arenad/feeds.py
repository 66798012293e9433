"""Feed plugins: game-server log formats turned into kill events.

A *feed plugin* is a small object with a ``name``, a ``description`` and ``parser(options)``,
which returns a fresh, stateful *feed parser* for one stream (one log file, one server's UDP
log lines). The parser takes raw lines and returns ``FeedItem`` values: kill events for the
rating core, and everything else a log says that an operator wants counted (world kills,
suicides, identity changes, match boundaries) or refused with a reason.

Built-in plugins are listed explicitly in ``BUILTIN_FEEDS``; third-party ones are found through
the ``arenad.feeds`` entry-point group. Parsers are pure: no I/O, no clock (the time a line was
received is passed in), so they are fuzzed and replayed like any decoder.

``feed_plugin(name)`` is the one lookup of a format by name (``arenad replay --format``, the
daemon's ``[[tail]]``); it and ``loaded_feeds`` share one discovery per process, so a broken
third-party plugin is found, and reported, once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from arenad.core.events import KillEvent, PlacementEvent, Reject
from arenad.errors import ConfigError, ConfigProblem


@dataclass(frozen=True, slots=True)
class IdentityUpdate:
    """A client slot now belongs to ``player`` (the identity used for rating)."""

    slot: str
    player: str
    name: str
    bot: bool


@dataclass(frozen=True, slots=True)
class MatchBoundary:
    """A match (map) started or ended at ``t``; ``detail`` carries what the log said."""

    kind: str  # "start" | "end"
    t: float
    detail: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class NonKill:
    """A death that is not a pairwise kill (§11 item 2): counted, never rated."""

    kind: str  # "world_kill" | "suicide" | "team_kill" | "bot_excluded"
    t: float
    victim: str


@dataclass(frozen=True, slots=True)
class Alias:
    """``player`` (an identity the feed rated before) is ``into`` from now on: a name later seen
    with a guid (issue 17). The daemon journals it as a merge (``scopes.Rule`` with ``into``)."""

    player: str
    into: str
    t: float


@dataclass(frozen=True, slots=True)
class ChatLine:
    """A player said ``text`` on ``server`` (``say`` / ``say_team``), for the in-game commands.

    Never rated and never journaled: a follower hands it to its chat sink, not to the engine.
    ``slot`` is what a reply is addressed to (the OpenArena client number, the Source userid) and
    ``player`` the rated identity, both ``None`` when the log's name matched no single player
    (``unresolved`` says why: ``"unknown_name"`` or ``"ambiguous_name"``).
    """

    server: str
    t: float
    slot: str | None
    player: str | None
    name: str
    text: str
    team: bool
    unresolved: str = ""


@dataclass(frozen=True, slots=True)
class ClockNote:
    """The feed had to correct the log's clock; what the follower logs and counts.

    ``kind`` is ``"reanchored"`` (a new map's start lay before the last line read: the map was
    moved ``moved`` seconds later so time stays monotonic) or ``"fast_clock"`` (game time ran
    ``ratio`` times faster than the wall clock: ``hint`` names the option that fixes it).
    """

    kind: str
    t: float
    moved: float = 0.0
    ratio: float = 0.0
    hint: str = ""


FeedItem = (
    KillEvent
    | PlacementEvent
    | Reject
    | IdentityUpdate
    | MatchBoundary
    | NonKill
    | Alias
    | ChatLine
    | ClockNote
)


@runtime_checkable
class FeedParser(Protocol):
    """One stream's parser; keeps whatever state the format needs (slots, map start time)."""

    def feed(self, line: bytes, received_at: float) -> list[FeedItem]:
        """Parse one line (without its newline); ``received_at`` is the wall clock at reading."""
        ...

    def state(self) -> dict[str, Any]:
        """Plain values to checkpoint, so a restart continues mid-stream."""
        ...

    def restore(self, state: Mapping[str, Any]) -> None: ...


class FeedPlugin(Protocol):
    """What the ``arenad.feeds`` entry points (and the built-ins) provide."""

    name: str
    description: str

    def parser(self, options: Mapping[str, Any]) -> FeedParser: ...


def builtin_feeds() -> dict[str, FeedPlugin]:
    """The plugins shipped with arenad (imported lazily: ``plugins/`` may grow large)."""
    from arenad_feeds import BUILTIN_FEEDS  # noqa: PLC0415 - the plugins package imports arenad

    return {p.name: p for p in BUILTIN_FEEDS}


def discover_feeds() -> tuple[dict[str, FeedPlugin], list[str]]:
    """Built-ins plus entry points; returns the plugins and the errors of broken ones.

    A third-party plugin that fails to load is reported (and logged by the caller), never fatal.
    """
    feeds = builtin_feeds()
    errors: list[str] = []
    for ep in entry_points(group="arenad.feeds"):
        if ep.name in feeds:
            continue  # built-ins win; they are also registered as entry points
        try:
            plugin = ep.load()
            feeds[ep.name] = plugin() if isinstance(plugin, type) else plugin
        except Exception as e:  # a broken plugin must not stop arenad
            errors.append(f"{ep.name}: {type(e).__name__}: {e}")
    return feeds, errors


@functools.cache
def loaded_feeds() -> tuple[Mapping[str, FeedPlugin], tuple[str, ...]]:
    """``discover_feeds`` run once per process: the plugins by name, and the errors of broken ones."""
    feeds, errors = discover_feeds()
    return MappingProxyType(feeds), tuple(errors)


def feed_plugin(name: str, *, key: str, source: str = "") -> FeedPlugin:
    """The feed plugin for format ``name``; ``key`` and ``source`` say where the name was given.

    Raises ``ConfigError`` naming the key, the value and the known formats, or, for a third-party
    plugin that failed to load, why it failed.
    """
    feeds, errors = loaded_feeds()
    plugin = feeds.get(name)
    if plugin is not None:
        return plugin
    broken = [e for e in errors if e.partition(":")[0] == name]
    if broken:
        message = f"the feed plugin failed to load ({broken[0].partition(': ')[2]})"
    else:
        message = f"unknown format (known: {', '.join(sorted(feeds))})"
    raise ConfigError([ConfigProblem(key, name, message)], source)
