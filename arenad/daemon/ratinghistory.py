"""The rating history: players' closed play sessions in ``<state_dir>/ratings.sqlite``.

Written off the per-event path: the engine task's checkpoint (``recovery.Checkpointer``) hands
the sessions closed since the last one (``arenad.sessions``) to ``RatingHistory.write`` in its
worker thread, one transaction per checkpoint, before the checkpoint itself is written. Each
row carries the journal position of the tick that closed it, so recovery cuts what a lost
checkpoint did not cover (``truncate_after``) and the replay of the journal tail writes it again,
identically. A recompute writes a fresh database beside the live one (``Rebuild``) and renames
it into place when it swaps its result in. Sessions older than ``[history] ratings_days`` (of
event time) are deleted at most once a day of event time.

SQLite in WAL mode with ``synchronous = NORMAL``: the history is derived state (a recompute
rebuilds it from the archive), so a power cut may lose its last transaction, never the
database. Readers (``HistoryReader``, the web pages) use their own connection.
"""

from __future__ import annotations

import math
import sqlite3
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from pathlib import Path

from arenad.daemon.config import HistorySettings
from arenad.scopes import ScopeSet
from arenad.sessions import Session

FILE = "ratings.sqlite"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS players (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS servers (id INTEGER PRIMARY KEY, name TEXT UNIQUE);
CREATE TABLE IF NOT EXISTS sessions (
    player INTEGER NOT NULL,
    server INTEGER,
    t_start REAL NOT NULL,
    t_end REAL NOT NULL,
    kills INTEGER NOT NULL,
    deaths INTEGER NOT NULL,
    rating_before REAL NOT NULL,
    rating_after REAL NOT NULL,
    display_after REAL NOT NULL,
    tier_after INTEGER NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_player ON sessions (player, t_end);
CREATE INDEX IF NOT EXISTS sessions_by_seq ON sessions (seq);
"""
_DAY = 86400.0
#: A player's newest sessions the reader keeps from the database (``HistoryReader``): enough
#: for a page's chart and the summary's 30-day window; and rows kept for all players at once.
CACHED_SESSIONS = 500
CACHED_ROWS = 200_000


class ForkGate:
    """Which threads are inside SQLite: the web's readers fork only while none is.

    A fork copies SQLite's process-wide state (its mutexes, its table of open files and their
    locks) as it stands; a worker thread inside SQLite at that moment would leave a mutex held
    or a lock recorded in the reader, which then hangs or reads without the lock it thinks it
    has (docs/web.md "Readers"). Threads count themselves in (``inside``) around every use of
    the rating history's databases; the daemon forks under ``quiet``, which holds the count's
    lock so none can enter meanwhile (they wait for one fork, ~11 ms at 1M players)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0

    @contextmanager
    def inside(self) -> Iterator[None]:
        with self._lock:
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1

    @contextmanager
    def quiet(self) -> Iterator[bool]:
        """True (and no thread may enter until the block ends) when none is inside SQLite."""
        if not self._lock.acquire(blocking=False):
            yield False
            return
        try:
            yield self._inside == 0
        finally:
            self._lock.release()


#: One gate for every database of the rating history in this process.
FORK_GATE = ForkGate()


def _connect(path: Path) -> sqlite3.Connection:
    # check_same_thread off: a writer is used by one thread at a time (the checkpoint's worker,
    # or a recompute's), never by two at once (RatingHistory.lock).
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.executescript(_SCHEMA)
    return db


class _Writer:
    """Inserts sessions, naming players and servers once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = _connect(path)
        self._players: dict[str | None, int] = dict(self.db.execute("SELECT name, id FROM players"))
        self._servers: dict[str | None, int] = dict(self.db.execute("SELECT name, id FROM servers"))

    def _id(self, table: str, cache: dict[str | None, int], name: str | None) -> int:
        got = cache.get(name)
        if got is None:  # ``table`` is one of this module's two names, never input
            cur = self.db.execute(f"INSERT INTO {table} (name) VALUES (?)", (name,))
            got = cache[name] = int(cur.lastrowid or 0)
        return got

    def insert(self, sessions: Iterable[Session]) -> int:
        rows = [
            (
                self._id("players", self._players, s.player),
                self._id("servers", self._servers, s.server),
                *astuple(s)[2:],
            )
            for s in sessions
        ]  # the table's columns are Session's fields, player and server by id
        self.db.executemany("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        return len(rows)

    def close(self) -> None:
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.close()


def rating_history(settings: HistorySettings, state_dir: Path) -> RatingHistory | None:
    """The rating history ``[history]`` asks for (None: ``ratings = false``)."""
    return RatingHistory(state_dir, settings.ratings_days) if settings.ratings else None


class RatingHistory:
    """The live database: written at checkpoints, cut at recovery, replaced by a recompute."""

    def __init__(self, state_dir: Path, retention_days: float) -> None:
        self.path = state_dir / FILE
        self.retention = retention_days * _DAY if retention_days > 0 else math.inf
        self.lock = threading.Lock()  # writes, cuts and the swap: one at a time
        self._writer: _Writer | None = None
        self._pruned_at = -math.inf
        self.generation = 0  # bumped when a recompute's database replaces this one
        self.rows_written = 0
        #: Bumped after every change readers can see (a write, a cut, a swap): what a reader
        #: cached under an older version is read again (``HistoryReader``).
        self.version = 0

    def _w(self) -> _Writer:
        if self._writer is None:
            self._writer = _Writer(self.path)
        return self._writer

    def write(self, sessions: Sequence[Session], now_t: float, generation: int) -> None:
        """One transaction with ``sessions``, and retention when a day of event time has passed.

        ``generation``: the one read when the sessions were taken; a recompute's database that
        replaced this one since holds them already (rebuilt), so they are dropped. Raises
        ``OSError`` (``sqlite3`` errors as OSError) when the disk refuses it."""
        with self.lock, FORK_GATE.inside():
            if generation != self.generation:
                return
            try:
                w = self._w()
                w.db.execute("BEGIN")
                self.rows_written += w.insert(sessions)
                if math.isfinite(now_t) and now_t - self._pruned_at >= _DAY and math.isfinite(self.retention):
                    w.db.execute("DELETE FROM sessions WHERE t_end < ?", (now_t - self.retention,))
                    self._pruned_at = now_t
                w.db.execute("COMMIT")
            except sqlite3.Error as e:
                self._abandon()
                raise OSError(0, f"rating history: {e}") from e
            finally:
                self.version += 1

    def truncate_after(self, seq: int) -> int:
        """Delete what a checkpoint after ``seq`` wrote (recovery starts from ``seq``)."""
        with self.lock, FORK_GATE.inside():
            try:
                cur = self._w().db.execute("DELETE FROM sessions WHERE seq > ?", (seq,))
            except sqlite3.Error as e:
                self._abandon()
                raise OSError(0, f"rating history: {e}") from e
            finally:
                self.version += 1
            return cur.rowcount

    def _abandon(self) -> None:
        if self._writer is not None:
            try:
                self._writer.db.rollback()
                self._writer.db.close()
            except sqlite3.Error:
                pass
            self._writer = None

    def replace_with(self, rebuilt: Path) -> None:
        """Put a recompute's database (``Rebuild.finish``'s file) in place of this one."""
        with self.lock, FORK_GATE.inside():
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            rebuilt.replace(self.path)
            self.generation += 1
            self.version += 1

    def rebuild(self, base_seq: int) -> Rebuild:
        """A recompute's database starting after ``base_seq`` (``history.rebuild_from_history``)."""
        return Rebuild(self, base_seq)

    def close(self) -> None:
        with self.lock, FORK_GATE.inside():
            if self._writer is not None:
                self._writer.close()
                self._writer = None


class Rebuild:
    """A recompute's database: the live rows up to ``base_seq`` (a partial recompute keeps what
    came before its snapshot), then the sessions the rebuild closes, streamed in as it goes."""

    def __init__(self, live: RatingHistory, base_seq: int) -> None:
        self.path = live.path.with_name(FILE + ".rebuild")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        with FORK_GATE.inside():
            self._open(live, base_seq)

    def _open(self, live: RatingHistory, base_seq: int) -> None:
        self._w = _Writer(self.path)
        if base_seq > 0 and live.path.exists():
            db = self._w.db
            db.execute("ATTACH DATABASE ? AS live", (str(live.path),))
            db.execute("BEGIN")
            db.execute("INSERT INTO players SELECT * FROM live.players")
            db.execute("INSERT INTO servers SELECT * FROM live.servers")
            db.execute("INSERT INTO sessions SELECT * FROM live.sessions WHERE seq <= ?", (base_seq,))
            db.execute("COMMIT")
            db.execute("DETACH DATABASE live")
            self._w = _Writer(self.path)  # the name caches again, now with the copied rows

    def sink(self, sessions: Sequence[Session]) -> None:
        if sessions:
            with FORK_GATE.inside():
                self._w.db.execute("BEGIN")
                self._w.insert(sessions)
                self._w.db.execute("COMMIT")

    def drain(self, scopes: ScopeSet) -> None:
        """Move what ``scopes`` closed so far into this database."""
        if scopes.sessions is not None:
            self.sink(scopes.sessions.take_closed())

    def finish(self) -> Path:
        with FORK_GATE.inside():
            self._w.close()
        return self.path

    def discard(self) -> None:
        with FORK_GATE.inside():
            self._w.db.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


# ---------------------------------------------------------------------------- reading
@dataclass(frozen=True, slots=True)
class Point:
    """One point of a rating chart."""

    t: float
    rating: float
    display: float
    tier: int


class HistoryReader:
    """Reads a player's sessions for the pages and the API: the database, the sessions closed
    since the last checkpoint (not written yet) and the one in progress, newest first.

    Both are read on the event loop, per request, so neither is read in full: the sessions not
    written yet are indexed by player as they are closed (the tracker only appends to them
    between checkpoints), and a player's newest ``CACHED_SESSIONS`` rows of the database are
    kept until the database changes (``RatingHistory.version``: a checkpoint's write, a cut, a
    recompute's swap), the least recently read players dropped past ``CACHED_ROWS`` rows."""

    def __init__(self, history: RatingHistory, scopes: Callable[[], ScopeSet]) -> None:
        self.history = history
        self._scopes = scopes
        self._db: sqlite3.Connection | None = None
        self._inherited: list[sqlite3.Connection] = []  # across a fork (forked)
        self._generation = -1
        # The tracker's list of closed sessions indexed by player: the list, its first entry
        # (a refused write puts sessions back in front) and how far it is indexed.
        self._closed: list[Session] | None = None
        self._first: Session | None = None
        self._indexed = 0
        self._by_player: dict[str, list[Session]] = {}
        # player -> (RatingHistory.version read before the query, the newest rows, newest first)
        self._rows: OrderedDict[str, tuple[int, list[Session]]] = OrderedDict()
        self._cached = 0
        self.db_reads = 0  # queries the database answered (the cache's misses; tests read it)

    def _conn(self) -> sqlite3.Connection | None:
        h = self.history
        if self._db is None or self._generation != h.generation:
            if self._db is not None:
                self._db.close()
                self._db = None
            if not h.path.exists():
                return None
            self._db = sqlite3.connect(f"file:{h.path}?mode=ro", uri=True, check_same_thread=False)
            self._generation = h.generation
        return self._db

    def forked(self) -> None:
        """In a forked web reader: read through a connection of its own. The inherited one is
        kept, never used or closed (a SQLite connection must not cross a fork; closing it in the
        reader would touch the lock table it shares with the new one, arenad/web/readers.py)."""
        if self._db is not None:
            self._inherited.append(self._db)
            self._db = None

    def _pending(self, closed: list[Session], player: str) -> list[Session]:
        """The player's sessions in ``closed`` (the tracker's, not written yet), oldest first."""
        if closed is not self._closed or (self._indexed and closed[0] is not self._first):
            self._closed, self._indexed, self._by_player = closed, 0, {}
        n = len(closed)
        if n < self._indexed:  # taken and put back differently: index it again
            self._indexed, self._by_player = 0, {}
        by_player = self._by_player
        for s in closed[self._indexed : n]:
            got = by_player.get(s.player)
            if got is None:
                by_player[s.player] = [s]
            else:
                got.append(s)
        self._indexed = n
        self._first = closed[0] if n else None
        return by_player.get(player, [])

    def _query(
        self, db: sqlite3.Connection, player: str, since: float, until: float, limit: int
    ) -> list[Session]:
        self.db_reads += 1
        try:
            rows = db.execute(
                "SELECT v.name, s.t_start, s.t_end, s.kills, s.deaths, s.rating_before,"
                " s.rating_after, s.display_after, s.tier_after, s.seq"
                " FROM sessions AS s JOIN players AS p ON p.id = s.player"
                " LEFT JOIN servers AS v ON v.id = s.server"
                " WHERE p.name = ? AND s.t_end BETWEEN ? AND ? ORDER BY s.t_end DESC LIMIT ?",
                (player, max(since, -1e300), min(until, 1e300), limit),
            ).fetchall()
        except sqlite3.Error:
            return []  # a database being replaced: the next request reads the new one
        return [Session(player, *r) for r in rows]

    def _newest(self, db: sqlite3.Connection, player: str) -> list[Session]:
        """The player's newest ``CACHED_SESSIONS`` rows of the database, newest first."""
        version = self.history.version  # read before the query: a write meanwhile reads again
        got = self._rows.get(player)
        if got is not None and got[0] == version:
            self._rows.move_to_end(player)
            return got[1]
        rows = self._query(db, player, -math.inf, math.inf, CACHED_SESSIONS)
        if got is not None:
            self._cached -= len(got[1])
        self._rows[player] = (version, rows)
        self._rows.move_to_end(player)
        self._cached += len(rows)
        while self._cached > CACHED_ROWS and len(self._rows) > 1:
            _, (_, old) = self._rows.popitem(last=False)
            self._cached -= len(old)
        return rows

    def sessions(
        self, player: str, *, since: float = -math.inf, until: float = math.inf, limit: int = 50
    ) -> list[Session]:
        """The player's sessions ending in [since, until], newest first, at most ``limit``."""
        out: list[Session] = []
        scopes = self._scopes()
        tracker = scopes.sessions
        eng = scopes.global_engine
        i = eng.ids.get(player)
        if tracker is not None and i is not None:
            now = tracker.current(eng, i)
            if now is not None and since <= now.t_end <= until:
                out.append(now)
            out.extend(
                s for s in reversed(self._pending(tracker.closed, player)) if since <= s.t_end <= until
            )
        db = self._conn()
        if db is not None and len(out) < limit:
            want = limit - len(out)
            if until >= sys.float_info.max and want <= CACHED_SESSIONS:
                # Open-ended (the summary, a chart of everything): a prefix of the newest rows.
                out.extend(s for s in self._newest(db, player) if s.t_end >= since)
            else:
                out.extend(self._query(db, player, since, until, want))
        return out[:limit]

    def points(
        self, player: str, *, since: float = -math.inf, until: float = math.inf, limit: int = 500
    ) -> list[Point]:
        """The player's rating over time, oldest first: one point at the end of each session."""
        return [
            Point(s.t_end, s.rating_after, s.display_after, s.tier_after)
            for s in reversed(self.sessions(player, since=since, until=until, limit=limit))
        ]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
