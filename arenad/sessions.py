"""Play sessions of the global ladder's players: what a rating history shows per visit.

A session is a player's continuous play on one server: it ends when the player has had no
event for ``gap`` seconds of event time, or shows up on another server. Each closed session
carries its kills and deaths (every journaled kill the applier kept, cooldown repeats included:
the frags a player counts), the rating before it (the end of the player's previous session, or
the starting rating: so a session's change includes any decay while away), and the rating,
display rating and tier after it.

Cost on the per-event path: one ``tally`` per run of records (``_kernel.tally`` in C, about
40 ns a kill; this module's loop where the extension is missing, the reference it is checked
against), into four per-player columns (14 bytes a player). Sessions are opened and closed at
*ticks*, the global ladder's recalibration points (every ``recalibrate_interval`` of event time):
the same records in every driver, so live, recovery, rebuild and replay close the same sessions
with the same figures (tests/core/test_sessions.py). Session boundaries are resolved to a tick.

Pure: no I/O, no clock (the purity test holds it to that). The daemon writes closed sessions to
its SQLite rating history (``arenad/daemon/ratinghistory.py``).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass
from typing import Any

import numpy as np

from arenad.core.engine import Engine
from arenad.records import JournalRecord

try:  # the C tally: the Python loop below is its reference
    from arenad.core._ladder import tally as _c_tally
except ImportError:  # pragma: no cover - built without a compiler
    _c_tally = None  # type: ignore[assignment]

#: Most servers told apart (codes are 16-bit; code 0 is "no server").
MAX_SERVERS = 65535
#: Counters saturate here instead of wrapping (a 32-bit column).
_COUNT_MAX = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Session:
    """One closed session (``seq``: the journal position of the tick that closed it)."""

    player: str
    server: str | None
    t_start: float
    t_end: float
    kills: int
    deaths: int
    rating_before: float
    rating_after: float
    display_after: float
    tier_after: int  # 0: unplaced; 1 (1H) is the best
    seq: int

    @property
    def delta(self) -> float:
        return self.rating_after - self.rating_before


class Sessions:
    """Per-player session counters and the open sessions of one (the global) ladder."""

    def __init__(self, gap: float, tolerance: float = 0.0) -> None:
        if not (gap > 0 and math.isfinite(gap)):
            raise ValueError(f"session gap must be a positive number of seconds, got {gap!r}")
        self.gap = gap
        #: The engine's rule for a kill it takes (ADRParams.late_tolerance), on a running clock:
        #: so the kills counted do not depend on how the records are cut into tallies.
        self.tolerance = tolerance
        self.clock = -math.inf
        # Per player, as the engine numbers them: kills and deaths in the open session, the
        # server code of the latest event, the rating after the previous session (NaN: none).
        self.kills = array("I")
        self.deaths = array("I")
        self.server = array("H")
        self.after = array("f")
        self.servers: list[str | None] = [None]
        self.codes: dict[str | None, int] = {None: 0}
        #: Per player: whether a session is open, and on which server (its code).
        self.is_open = bytearray()
        self.open_server = array("H")
        #: The open sessions' start times by player index (a session's end is its player's last
        #: event, read from the engine's activity ring when it closes).
        self.open: dict[int, float] = {}
        #: Closed and not yet written to the store (the daemon drains it at checkpoints).
        self.closed: list[Session] = []
        self.last_tick = -math.inf
        self.native = _c_tally is not None

    # ------------------------------------------------------------------ per run of records
    def _grow(self, players: int) -> None:
        short = players - len(self.kills)
        if short > 0:
            zeros = bytes(4 * short)
            self.kills.frombytes(zeros)
            self.deaths.frombytes(zeros)
            self.server.frombytes(bytes(2 * short))
            self.after.extend([math.nan] * short)
            self.is_open.extend(bytes(short))
            self.open_server.frombytes(bytes(2 * short))

    def code(self, server: str | None) -> int:
        """The server's code, assigned on first sight (0 once MAX_SERVERS are known)."""
        c = self.codes.get(server)
        if c is None:
            if len(self.servers) > MAX_SERVERS:
                return 0
            c = self.codes[server] = len(self.servers)
            self.servers.append(server)
        return c

    def tally(
        self, records: Sequence[JournalRecord | None], lo: int, hi: int, ids: Mapping[str, int]
    ) -> None:
        """Count the kills of ``records[lo:hi]`` that the applier kept (None: refused or excluded;
        placements and control records are not kills) for players the ladder tracks."""
        hi = min(hi, len(records))
        if hi <= lo:
            return
        self._grow(len(ids))
        if _c_tally is not None and self.native:
            k = lo
            while k < hi:
                k, self.clock = _c_tally(
                    records,
                    k,
                    hi,
                    ids,
                    self.kills,
                    self.deaths,
                    self.server,
                    self.codes,
                    self.clock,
                    self.tolerance,
                )
                if k < hi:  # a server seen for the first time: give it a code, go on
                    rec = records[k]
                    assert isinstance(rec, tuple)
                    self.code(rec[4])
                    if self.codes.get(rec[4]) is None:  # the table is full: count it as "none"
                        self.codes[rec[4]] = 0
            return
        self._tally_py(records, lo, hi, ids)

    def _tally_py(
        self, records: Sequence[JournalRecord | None], lo: int, hi: int, ids: Mapping[str, int]
    ) -> None:
        kills, deaths, where, code = self.kills, self.deaths, self.server, self.code
        clock, tolerance = self.clock, self.tolerance
        for k in range(lo, hi):
            rec = records[k]
            if type(rec) is not tuple:
                continue
            t = rec[1]
            if type(t) is not float or not math.isfinite(t) or t < clock - tolerance:
                continue  # refused by the engine (out of order)
            a = ids.get(rec[2])
            v = ids.get(rec[3])
            if a is None or v is None or a == v:
                continue
            clock = max(clock, t)
            c = code(rec[4])
            if kills[a] < _COUNT_MAX:
                kills[a] += 1
            if deaths[v] < _COUNT_MAX:
                deaths[v] += 1
            where[a] = c
            where[v] = c
        self.clock = clock

    # ------------------------------------------------------------------ ticks
    def tick(self, eng: Engine, t: float, seq: int) -> None:
        """Open sessions for players with new events, close those idle for ``gap`` (or moved to
        another server). ``t``: the event time of the tick; ``seq``: its journal position.

        Vectorised over the players with events in an open session (numpy): a player who goes
        on playing on the same server costs no Python work here; only a session that opens or
        closes does."""
        players = len(eng.names)
        self._grow(players)
        kills = np.frombuffer(self.kills, dtype=np.uint32)[:players]
        deaths = np.frombuffer(self.deaths, dtype=np.uint32)[:players]
        busy = np.flatnonzero((kills | deaths) != 0)  # every open session is among them
        if busy.size:
            na = eng.params.n_active
            n = np.frombuffer(eng._n, dtype=np.int64)[busy]
            ring = np.frombuffer(eng._aring, dtype=np.float64)
            # The newest slot of the activity ring: the time of the player's last counted event.
            last = ring[busy * na + (np.maximum(n, 1) - 1) % na]
            is_open = np.frombuffer(self.is_open, dtype=np.uint8)[busy] != 0
            server = np.frombuffer(self.server, dtype=np.uint16)[busy]
            moved = is_open & (np.frombuffer(self.open_server, dtype=np.uint16)[busy] != server)
            idle = is_open & ~moved & (t - last > self.gap)
            new = ~is_open
            if new.any():
                # The start: its oldest event since the last tick that the ring still holds.
                blocks = ring[: players * na].reshape(players, na)[busy[new]]
                newer = np.where(blocks > self.last_tick, blocks, np.inf).min(axis=1)
                starts = np.minimum(np.where(np.isfinite(newer), newer, last[new]), last[new])
                for i, start, code in zip(
                    busy[new].tolist(), starts.tolist(), server[new].tolist(), strict=True
                ):
                    self.open[i] = start
                    self.is_open[i] = 1
                    self.open_server[i] = code
            # Moved to another server: the session ends here, with what the player did since the
            # last tick (a boundary is resolved to a tick); the next events open the next one.
            for i in busy[moved | idle].tolist():  # in player order
                self._close(eng, i, seq)
        self.last_tick = t

    def _close(self, eng: Engine, i: int, seq: int) -> None:
        before = self.after[i]
        mu = eng.mu(i)
        self.closed.append(
            Session(
                player=eng.names[i],
                server=self.servers[self.open_server[i]],
                t_start=self.open.pop(i),
                t_end=_last_event(eng, i),
                kills=self.kills[i],
                deaths=self.deaths[i],
                rating_before=eng.params.mu0 if math.isnan(before) else float(before),
                rating_after=mu,
                display_after=eng.display(i),
                tier_after=eng._tier[i],
                seq=seq,
            )
        )
        self.after[i] = mu
        self.kills[i] = 0
        self.deaths[i] = 0
        self.is_open[i] = 0

    def current(self, eng: Engine, i: int) -> Session | None:
        """Player ``i``'s session in progress (as far as the last tally), or None."""
        if i >= len(self.kills) or not (self.kills[i] or self.deaths[i]):
            return None
        start = self.open.get(i)
        before = self.after[i]
        last = _last_event(eng, i)
        return Session(
            player=eng.names[i],
            server=self.servers[self.open_server[i] if start is not None else self.server[i]],
            t_start=start if start is not None else last,
            t_end=last,
            kills=self.kills[i],
            deaths=self.deaths[i],
            rating_before=eng.params.mu0 if math.isnan(before) else float(before),
            rating_after=eng.mu(i),
            display_after=eng.display(i),
            tier_after=eng._tier[i],
            seq=0,
        )

    def take_closed(self) -> list[Session]:
        out, self.closed = self.closed, []
        return out

    # ------------------------------------------------------------------ state
    def export_state(self) -> dict[str, Any]:
        return {
            "gap": self.gap,
            "kills": self.kills.tobytes(),
            "deaths": self.deaths.tobytes(),
            "server": self.server.tobytes(),
            "after": self.after.tobytes(),
            "servers": list(self.servers),
            "open": [[i, self.open_server[i], start] for i, start in sorted(self.open.items())],
            "closed": [list(astuple(s)) for s in self.closed],
            "last_tick": self.last_tick,
            "clock": self.clock,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], gap: float, tolerance: float = 0.0) -> Sessions:
        out = cls(gap, tolerance)
        out.clock = float(state.get("clock", -math.inf))
        for name in ("kills", "deaths", "server", "after"):
            getattr(out, name).frombytes(state[name])
        n = len(out.kills)
        if not (len(out.deaths) == len(out.server) == len(out.after) == n):
            raise ValueError("session columns of different lengths")
        out.servers = list(state["servers"])
        out.codes = {s: k for k, s in enumerate(out.servers)}
        out.is_open = bytearray(n)
        out.open_server = array("H", bytes(2 * n))
        for i, code, start in state["open"]:
            out.open[int(i)] = float(start)
            out.is_open[int(i)] = 1
            out.open_server[int(i)] = int(code)
        out.closed = [Session(*row) for row in state["closed"]]
        out.last_tick = float(state["last_tick"])
        return out


def _last_event(eng: Engine, i: int) -> float:
    """Event time of player ``i``'s latest counted event: the newest slot of the activity ring
    (``Engine._last`` is where decay was applied up to, which a sweep moves on)."""
    na = eng.params.n_active
    n = eng._n[i]
    return float(eng._aring[i * na + (max(n, 1) - 1) % na])
