"""What the web layer reads, as narrow ports the daemon supplies (STYLE.md §14).

The web layer never holds the daemon: ``start_web`` is handed a ``WebPorts`` of plain callables
and small Protocols. Everything here is read on the event loop thread between engine slices, so
each call must answer in bounded time (an indexed lookup, not a scan).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from arenad.scopes import ScopeSet

#: The live scopes: called per request, so a recompute that swaps the ScopeSet is seen at once.
LiveScopes = Callable[[], ScopeSet]

#: The daemon's status: ``feeds`` (name -> {"state", "last_event_age"}), ``events_per_second``,
#: ``players``, ``version`` and whatever else it knows (queue depth, uptime); JSON values only.
Status = Callable[[], Mapping[str, Any]]


class HistoryPoint(NamedTuple):
    """One sample of a player's rating over time (event time, seconds)."""

    t: float
    rating: float  # mu, visible scale
    display: float
    tier: str | None


class Session(NamedTuple):
    """A player's continuous play on one server, and what it did to their rating."""

    server: str
    t_start: float
    t_end: float
    kills: int
    deaths: int
    delta: float  # rating change over the session
    rating_after: float


class HistoryReader(Protocol):
    """The rating-history store (SQLite in the daemon; in memory in the tests)."""

    def points(self, scope: str, player: str, since: float, until: float) -> Sequence[HistoryPoint]:
        """Samples with ``since <= t < until``, oldest first."""
        ...

    def sessions(self, scope: str, player: str, limit: int) -> Sequence[Session]:
        """The newest ``limit`` sessions, newest first."""
        ...


class HiddenPlayers(Protocol):
    """Players hidden by the admin ``hide`` op (journaled): absent from every public view.

    ``scope`` is a resolved scope key (``"global"``, ``"server:eu-1"``); a store that hides
    players everywhere may ignore it.
    """

    def is_hidden(self, scope: str, player: str) -> bool: ...

    def hidden(self, scope: str) -> Collection[str]:
        """Every hidden name in ``scope`` (a few, in practice: privacy requests); the web layer
        needs them to skip them in ranks and pages without walking the ladder."""
        ...


class NobodyHidden:
    """``HiddenPlayers`` before the daemon has hide/unhide."""

    def is_hidden(self, scope: str, player: str) -> bool:
        return False

    def hidden(self, scope: str) -> Collection[str]:
        return ()


#: Whether the engine has more waiting than it takes in one step: while it has, the web keeps
#: to ``[web] loop_share`` of the loop; while it has not, the rest of the loop would go unused.
EngineBehind = Callable[[], bool]


def _never_behind() -> bool:
    return False


def _always_new() -> object:
    return object()


def _no_guard() -> AbstractContextManager[bool]:
    return nullcontext(True)


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class WebPorts:
    """Everything ``start_web`` reads; ``history`` None = no history configured; without
    ``engine_behind`` the loop share never holds: a program whose engine shares the loop with
    the web passes it (the daemon does: its engine task's queue depth). Holding it without one
    stalled every answer past ``loop_share`` of a 20 ms window for the rest of the window, on a
    loop with nothing else to do (docs/web.md, "The same benchmark on llhttp")."""

    scopes: LiveScopes
    status: Status
    history: HistoryReader | None = None
    hidden: HiddenPlayers = field(default_factory=NobodyHidden)
    engine_behind: EngineBehind = _never_behind
    # For forked readers (arenad/web/readers.py): ``version`` changes whenever what the web
    # shows may have (a new fork is due only then); ``urgent`` with what must show at once (who
    # is hidden, a recompute's swap: forked at the next look); ``fork_guard`` is held around
    # the fork and yields True when a fork is safe (no worker thread inside SQLite);
    # ``after_fork`` reopens in the fork what must not be shared (the rating history's
    # connection); ``shared_files``: paths whose fds a reader keeps open (the history's files).
    version: Callable[[], object] = _always_new
    urgent: Callable[[], object] = _nothing
    fork_guard: Callable[[], AbstractContextManager[bool]] = _no_guard
    after_fork: Callable[[], None] = _nothing
    shared_files: Callable[[], Sequence[str]] = tuple
