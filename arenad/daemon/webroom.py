"""The web room: the HTTP API and pages (``arenad/web``) over the daemon's live state.

``arenad.web`` reads the daemon only through the ports of ``arenad/web/port.py``; this module
builds them from the rooms (the live ``ScopeSet``, the rating history, the sources' figures)
and hands the requests to ``metrics.WebMetrics``. Everything here runs on the event loop thread, between
engine slices: each call is an indexed lookup or a small sum, never a walk of the ladder.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from arenad import __version__
from arenad.core.params import TIER_NAMES
from arenad.daemon.live import LiveState
from arenad.daemon.ratinghistory import FORK_GATE, RatingHistory
from arenad.daemon.ratinghistory import HistoryReader as RatingReader
from arenad.gates import is_bot
from arenad.scopes import ScopeSet
from arenad.web.port import HistoryPoint, Session, WebPorts


class HiddenPlayers:
    """``port.HiddenPlayers`` over ``ScopeSet.hidden`` (hidden everywhere) and, with
    ``[gates] bots = "hidden"``, the bots of the scope's ladder (found once per new name)."""

    def __init__(self, scopes: Callable[[], ScopeSet]) -> None:
        self._scopes = scopes
        self._bots: dict[str, tuple[int, int, set[str]]] = {}  # scope -> (engine id, names seen, bots)

    def is_hidden(self, scope: str, player: str) -> bool:
        return self._scopes().is_hidden(player)

    def hidden(self, scope: str) -> Collection[str]:
        sc = self._scopes()
        if not sc.hides_bots:
            return sc.hidden
        eng = sc.engines.get(scope)
        if eng is None:
            return sc.hidden
        key, seen, bots = self._bots.get(scope, (0, 0, set()))
        if key != id(eng):  # a recompute swapped the engine in: start over
            seen, bots = 0, set()
        names = eng.names
        bots.update(n for n in names[seen:] if is_bot(n))
        self._bots[scope] = (id(eng), len(names), bots)
        return sc.hidden | bots


class History:
    """``port.HistoryReader`` over the rating history: the global ladder's play sessions."""

    def __init__(self, reader: RatingReader) -> None:
        self._reader = reader

    def points(self, scope: str, player: str, since: float, until: float) -> Sequence[HistoryPoint]:
        if scope != "global":  # sessions are kept for the global ladder (docs/web.md)
            return []
        return [
            HistoryPoint(p.t, p.rating, p.display, TIER_NAMES[p.tier - 1] if p.tier else None)
            for p in self._reader.points(player, since=since, until=math.nextafter(until, -math.inf))
        ]

    def sessions(self, scope: str, player: str, limit: int) -> Sequence[Session]:
        if scope != "global":
            return []
        return [
            Session(s.server or "", s.t_start, s.t_end, s.kills, s.deaths, s.delta, s.rating_after)
            for s in self._reader.sessions(player, limit=limit)
        ]


class Status:
    """What ``/api/v1/status`` and the status page show: the feeds with the age of their last
    event, the events per second over the last few seconds, the players, the version."""

    def __init__(
        self,
        state: LiveState,
        sources: Sequence[str],
        last_event: Mapping[str, float],
        now: Callable[[], float],
        extra: Callable[[], dict[str, Any]],
    ) -> None:
        self._state = state
        self._sources = list(sources)
        self._last = last_event
        self._now = now
        self._extra = extra
        self._started = time.monotonic()
        self._samples: list[tuple[float, int]] = []  # (monotonic, events received), a few seconds

    def __call__(self) -> dict[str, Any]:
        st = self._state
        now = self._now()
        feeds = {}
        for name in sorted({*self._sources, *self._last}):
            last = self._last.get(name)
            feeds[name] = {
                "state": "receiving" if last is not None and now - last < 60.0 else "idle",
                "last_event_age": None if last is None else round(max(0.0, now - last), 3),
                "events": st.received.get(name, 0),
            }
        mono = time.monotonic()
        total = sum(st.received.values())
        self._samples.append((mono, total))
        while len(self._samples) > 2 and mono - self._samples[1][0] >= 10.0:
            self._samples.pop(0)  # keep about the last ten seconds
        t0, n0 = self._samples[0]
        rate = (total - n0) / (mono - t0) if mono - t0 >= 1.0 else None
        return {
            "version": __version__,
            "feeds": feeds,
            "events_per_second": None if rate is None else round(rate, 1),
            "players": len(st.engine),
            "applied": st.applied,
            "journal_seq": st.seq,
            "uptime": round(mono - self._started, 1),
            **self._extra(),
        }


#: Batches waiting for the engine task beyond which it is behind and the web keeps to its loop
#: share: a step every ``commit_interval`` (5 ms) leaves about 5 waiting at 50k events/s in
#: datagrams of 50, 15 at 150k; 16 is a step's worth more than ingest at full speed leaves.
BEHIND_BATCHES = 16


def web_ports(
    state: LiveState,
    ratings: RatingHistory | None,
    status: Callable[[], Mapping[str, Any]],
    queue_depth: Callable[[], int],
) -> WebPorts:
    """The ports ``arenad.web.server.start_web`` reads, over the daemon's live state."""

    def scopes() -> ScopeSet:
        return state.scopes

    def engine_behind() -> bool:
        return queue_depth() >= BEHIND_BATCHES

    reader = RatingReader(ratings, scopes) if ratings is not None else None

    def version() -> object:
        # What a forked reader shows moves only with these (docs/web.md "Readers"): a journaled
        # record (events, hide/unhide, control), a recompute's swap, the history's database.
        return (state.seq, state.applied, id(state.scopes), ratings.version if ratings is not None else 0)

    def urgent() -> object:
        # Privacy first: who is hidden must reach the pages at once, not a refresh later.
        sc = state.scopes
        return (id(sc), frozenset(sc.hidden))

    def shared_files() -> tuple[str, ...]:
        # The history's database files stay open in a reader, not /dev/null: SQLite's table of
        # open files (inherited) keeps their locks on these fds, the reader's included.
        if ratings is None:
            return ()
        return tuple(f"{ratings.path}{suffix}" for suffix in ("", "-wal", "-shm"))

    def after_fork() -> None:
        if reader is not None:
            reader.forked()

    return WebPorts(
        scopes=scopes,
        status=status,
        history=History(reader) if reader is not None else None,
        hidden=HiddenPlayers(scopes),
        engine_behind=engine_behind,
        version=version,
        urgent=urgent,
        # A worker thread inside SQLite at the fork would leave its mutexes and SQLite's
        # per-process lock table held in the child: fork only while none is (ForkGate).
        fork_guard=FORK_GATE.quiet,
        after_fork=after_fork,
        shared_files=shared_files,
    )
