"""The public view of the live ladders: what the API and the pages read, hidden players left out.

Pure (no I/O, no clock: ``now`` is the engine's event clock where a window needs one). Built on
``arenad.views``, the rows the NDJSON query op answers, and adjusted for hidden players:

* a hidden player is absent from the leaderboard, search and batch lookups (answered as unknown),
  and looking them up answers 404 exactly as for a name never seen;
* their rating still counts for others (they stay in the engine), but the **ranks shown skip
  them**: a public rank is the ladder's competition rank less the hidden players rated strictly
  above; the percentile and the player count are taken over the public players the same way.
  So the public ladder reads 1, 2, 3 … with no gap where a hidden player sits, and the page, the
  leaderboard and the API agree. (The NDJSON query port is the operators' tool and keeps the
  ladder's own ranks.)

Every failure a client can cause is an ``ApiError`` naming its status, the parameter and why.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from sortedcontainers import SortedKeyList

from arenad.core.engine import DISPLAY_K, Engine
from arenad.core.events import MAX_NAME_BYTES
from arenad.core.params import TIER_NAMES
from arenad.scopes import ScopeSet
from arenad.views import ladder_rows, player_body, tiers_body, walk_ladder
from arenad.web.balance import MAX_PLAYERS, MIN_PLAYERS, Split, balance, win_probability
from arenad.web.port import HiddenPlayers, HistoryPoint, HistoryReader, Session

#: The window the player summary reports its rating change over (seconds of event time).
SUMMARY_WINDOW = 30 * 86400.0
#: Most history points one answer carries (longer histories are thinned evenly).
MAX_HISTORY_POINTS = 5000
#: Recent sessions on a player page and in the player summary.
RECENT_SESSIONS = 10
#: Name-index entries added per step: about 7 µs an entry at a million players (bench.web), so a
#: step holds the loop ~3.5 ms; the whole index of a million names is ~7 s of CPU in such steps.
INDEX_STEP = 500
#: Names of at most this many characters are within MAX_NAME_BYTES whatever they hold (UTF-8
#: takes at most 4 bytes a character), so a batch need not encode them to check.
_SURELY_SHORT = MAX_NAME_BYTES // 4
#: Hidden players a batch compares each id with directly, rather than through np.isin.
_FEW_HIDDEN = 64


class ApiError(Exception):
    """A request the client got wrong (or asked for what is not there): status, parameter, why."""

    def __init__(self, status: int, message: str, parameter: str | None = None, retry_after: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.parameter = parameter
        self.retry_after = retry_after


# ---------------------------------------------------------------------------- name index
@dataclass(slots=True)
class NameIndex:
    """Player ids in case-folded name order, for prefix search, built a step at a time.

    Names are only ever appended to an engine (ids are dense), so the index follows an engine by
    adding ``names[seen:]``. Building it for a million players takes a few seconds of CPU in all;
    ``step`` adds at most ``INDEX_STEP`` names, so no single call holds the event loop long.
    """

    engine: Engine
    seen: int = 0
    ids: Any = field(default=None)

    def __post_init__(self) -> None:
        names = self.engine.names
        self.ids = SortedKeyList(key=lambda i: names[i].casefold())

    @property
    def complete(self) -> bool:
        return self.seen >= len(self.engine.names)

    def step(self, budget: int = INDEX_STEP) -> bool:
        """Index up to ``budget`` more names; True when every name is indexed."""
        end = min(len(self.engine.names), self.seen + budget)
        for i in range(self.seen, end):
            self.ids.add(i)
        self.seen = end
        return self.complete

    def prefix(self, text: str, limit: int, keep: Callable[[int], bool]) -> list[int]:
        """Up to ``limit`` ids whose case-folded name starts with ``text`` case-folded, in name
        order, that ``keep`` accepts."""
        fold = text.casefold()
        out: list[int] = []
        ids = self.ids
        for i in ids.islice(ids.bisect_key_left(fold), len(ids)):
            if not self.engine.names[i].casefold().startswith(fold):
                break
            if keep(i):
                out.append(i)
                if len(out) >= limit:
                    break
        return out


# ---------------------------------------------------------------------------- hidden players
@dataclass(frozen=True, slots=True)
class Public:
    """One scope's engine with its hidden players, and the public ranks that follow."""

    scope: str
    eng: Engine
    hidden_ids: frozenset[int]
    keys: tuple[float, ...]  # -mu of each hidden player, sorted (the ladder's order, shifted by the offset)
    positions: tuple[int, ...]  # ladder positions of the hidden players, sorted

    @classmethod
    def of(cls, scope: str, eng: Engine, hidden: HiddenPlayers) -> Public:
        ids = frozenset(i for name in hidden.hidden(scope) if (i := eng.ids.get(name)) is not None)
        return cls(
            scope,
            eng,
            ids,
            tuple(sorted(-eng.mu(i) for i in ids)),
            tuple(sorted(eng.position(i) for i in ids)),
        )

    @property
    def total(self) -> int:
        return len(self.eng) - len(self.hidden_ids)

    def visible(self, i: int) -> bool:
        return i not in self.hidden_ids

    def rank(self, i: int) -> int:
        """Competition rank among the public players."""
        return self.eng.rank(i) - bisect_left(self.keys, -self.eng.mu(i))

    def percentile(self, i: int) -> float:
        """``Engine.percentile`` over the public players (strictly below, plus half the ties)."""
        if not self.hidden_ids:
            return self.eng.percentile(i)
        key = -self.eng.mu(i)
        above, tied = self.eng.standing(i)
        h_above = bisect_left(self.keys, key)
        h_tied = bisect_right(self.keys, key) - h_above
        above -= h_above
        tied -= h_tied
        total = self.total
        if total <= 1:
            return 100.0
        below = total - above - tied
        return 100.0 * (below + 0.5 * (tied - 1)) / (total - 1)

    def ladder_offset(self, offset: int) -> int:
        """The ladder position of the public ladder's position ``offset``."""
        e = offset
        for p in self.positions:
            if p <= e:
                e += 1
            else:
                break
        return e

    def rows(
        self, ids: Sequence[int] | npt.NDArray[np.int64], names: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        return ladder_rows(self.eng, ids, DISPLAY_K, self.keys, names)


# ---------------------------------------------------------------------------- the reader
class Reader:
    """Every public read, against the live scopes and the ports."""

    def __init__(
        self,
        scopes: Callable[[], ScopeSet],
        hidden: HiddenPlayers,
        history: HistoryReader | None,
    ) -> None:
        self._scopes = scopes
        self._hidden = hidden
        self.history = history
        self._indexes: dict[str, NameIndex] = {}
        #: Called with a scope whose search found its index incomplete (a forked reader tells
        #: the daemon, whose loop builds the indexes the next readers inherit).
        self.index_wanted: Callable[[str], None] | None = None

    # -- scopes ----------------------------------------------------------------------------
    def scope_set(self) -> ScopeSet:
        return self._scopes()

    def public(self, scope: str) -> Public:
        live = self._scopes()
        try:
            key = live.resolve(scope)
        except ValueError as e:
            raise ApiError(400, f"scope {scope!r}: {e}", "scope") from None
        except KeyError as e:
            raise ApiError(404, f"scope {scope!r}: {e.args[0] if e.args else e}", "scope") from None
        return Public.of(key, live.engines[key], self._hidden)

    def player_id(self, pub: Public, name: str, parameter: str) -> int:
        check_name(name, parameter)
        i = pub.eng.ids.get(name)
        if i is None or not pub.visible(i):
            raise ApiError(404, f"unknown player {name!r}", parameter)
        return i

    # -- reads -----------------------------------------------------------------------------
    def leaderboard(
        self, pub: Public, offset: int, limit: int, tier: str | None, active: bool
    ) -> dict[str, Any]:
        eng = pub.eng
        truncated = False
        if tier is None and not active:
            start = pub.ladder_offset(offset)
            # Enough ladder entries past the start to fill ``limit`` even if every remaining
            # hidden player sits among them.
            ids = [i for i in eng.top(limit + len(pub.hidden_ids), start) if pub.visible(i)][:limit]
            total = pub.total
        else:

            def keep(i: int) -> bool:
                if not pub.visible(i):
                    return False
                if active and not eng.is_active(i):
                    return False
                return tier is None or eng.tier_of(i) == tier

            ids, truncated = walk_ladder(eng, keep, offset, limit)
            total = None
            if tier is None:
                total = eng.active_count - sum(1 for i in pub.hidden_ids if eng.is_active(i))
            else:
                count = eng.tier_info().counts[TIER_NAMES.index(tier)]
                if not active:
                    total = count - sum(1 for i in pub.hidden_ids if eng.tier_of(i) == tier)
        out: dict[str, Any] = {
            "scope": pub.scope,
            "offset": offset,
            "limit": limit,
            "total": total,
            "players": pub.rows(ids),
        }
        if tier is not None:
            out["tier"] = tier
        if active:
            out["active"] = True
        if truncated:
            out["truncated"] = True
        return out

    def player(self, pub: Public, name: str) -> dict[str, Any]:
        i = self.player_id(pub, name, "player")
        body = player_body(pub.eng, i, DISPLAY_K, pub.scope)
        body["rank"] = pub.rank(i)
        body["percentile"] = pub.percentile(i)
        body["players"] = pub.total
        body["history"] = self.summary(pub, body["player"])
        return body

    def summary(self, pub: Public, name: str) -> dict[str, Any]:
        """The history summary of the player answer: recent sessions and the change over the
        last ``SUMMARY_WINDOW`` of event time."""
        if self.history is None:
            return {"available": False}
        clock = pub.eng.clock
        now = clock if math.isfinite(clock) else 0.0
        window = self.history.points(pub.scope, name, now - SUMMARY_WINDOW, math.inf)
        sessions = self.history.sessions(pub.scope, name, RECENT_SESSIONS)
        return {
            "available": True,
            "window_seconds": SUMMARY_WINDOW,
            "points_in_window": len(window),
            "change_in_window": (window[-1].rating - window[0].rating) if window else 0.0,
            "sessions": [session_row(s) for s in sessions],
        }

    def history_of(self, pub: Public, name: str, since: float, until: float) -> dict[str, Any]:
        i = self.player_id(pub, name, "player")
        if self.history is None:
            raise ApiError(501, "this server keeps no rating history ([history] is not configured)")
        player = pub.eng.names[i]
        points = list(self.history.points(pub.scope, player, since, until))
        thinned = len(points) > MAX_HISTORY_POINTS
        if thinned:
            step = (len(points) - 1) / (MAX_HISTORY_POINTS - 1)
            points = [points[round(j * step)] for j in range(MAX_HISTORY_POINTS)]
        sessions = self.history.sessions(pub.scope, player, RECENT_SESSIONS)
        return {
            "scope": pub.scope,
            "player": player,
            "since": since if math.isfinite(since) else None,
            "until": until if math.isfinite(until) else None,
            "thinned": thinned,
            "points": [point_row(p) for p in points],
            "sessions": [session_row(s) for s in sessions],
        }

    def batch(self, pub: Public, names: Sequence[str]) -> dict[str, Any]:
        asked = list(dict.fromkeys(names))  # each once, in the order asked
        for name in asked:
            if not name or len(name) > _SURELY_SHORT:
                check_name(name, "ids")
        # One C pass over the name index that writes nothing to it (Engine.ids_of): at a million
        # names the lookups are most of a 256-id batch's cost, and in a forked reader a write
        # to the index copies the page it lies on.
        found = pub.eng.ids_of(asked)
        shown = found >= 0
        if pub.hidden_ids:
            hidden = np.fromiter(pub.hidden_ids, dtype=np.int64, count=len(pub.hidden_ids))
            # A few hidden players (the usual case) by one comparison of each with each; isin's
            # sort costs more than that below a hundred or so.
            shown &= ~(
                (found[:, None] == hidden).any(axis=1)
                if hidden.size <= _FEW_HIDDEN
                else np.isin(found, hidden)
            )
        flags = shown.tolist()
        names = [n for n, f in zip(asked, flags, strict=True) if f]
        unknown = [n for n, f in zip(asked, flags, strict=True) if not f]
        # The rows carry the names as asked (each equal to the engine's): they are this
        # request's own strings, so the rows read nothing more of the shared name list.
        return {"scope": pub.scope, "players": pub.rows(found[shown], names), "unknown": unknown}

    def tiers(self, pub: Public) -> dict[str, Any]:
        body = tiers_body(pub.eng)
        targets = pub.eng.params.tier_proportions
        for row, target in zip(body["tiers"], targets, strict=True):
            row["target"] = target
            row["share"] = row["players"] / body["placed"] if body["placed"] else 0.0
        body["scope"] = pub.scope
        return body

    def predict(self, pub: Public, a: str, b: str) -> dict[str, Any]:
        i = self.player_id(pub, a, "a")
        j = self.player_id(pub, b, "b")
        return {"scope": pub.scope, "a": pub.eng.names[i], "b": pub.eng.names[j], "p": pub.eng.predict(i, j)}

    def balance(self, pub: Public, names: Sequence[str], teams: int) -> dict[str, Any]:
        unique = list(dict.fromkeys(names))
        if not MIN_PLAYERS <= len(unique) <= MAX_PLAYERS:
            raise ApiError(
                400, f"needs {MIN_PLAYERS} to {MAX_PLAYERS} distinct players, got {len(unique)}", "players"
            )
        if teams > len(unique):
            raise ApiError(400, f"more teams ({teams}) than players ({len(unique)})", "teams")
        eng = pub.eng
        ratings: list[float] = []
        unknown: list[str] = []
        for name in unique:
            check_name(name, "players")
            i = eng.ids.get(name)
            if i is None or not pub.visible(i):
                # A newcomer (or a hidden player, who must not be told apart) plays at the
                # starting rating.
                unknown.append(name)
                ratings.append(eng.params.mu0)
            else:
                ratings.append(eng.mu(i))
        split: Split = balance(ratings, teams)
        return {
            "scope": pub.scope,
            "teams": [
                {"players": [unique[i] for i in team], "mean": mean}
                for team, mean in zip(split.teams, split.means, strict=True)
            ],
            "spread": split.spread,
            "p": win_probability(split, eng.predict_gap),
            "method": split.method,
            "unknown": unknown,
        }

    def search(self, pub: Public, q: str, limit: int) -> dict[str, Any]:
        check_name(q, "q")
        index = self.index(pub)
        if not index.step():
            if self.index_wanted is not None:
                self.index_wanted(pub.scope)
            raise ApiError(503, "the name index is still being built; try again shortly", "q", retry_after=1)
        ids = index.prefix(q, limit, pub.visible)
        return {"scope": pub.scope, "q": q, "players": pub.rows(ids)}

    def index(self, pub: Public) -> NameIndex:
        index = self._indexes.get(pub.scope)
        if index is None or index.engine is not pub.eng:  # a recompute swapped the engine
            index = self._indexes[pub.scope] = NameIndex(pub.eng)
        return index

    def want_index(self, scope: str) -> None:
        """Build ``scope``'s name index in the following ``warm`` steps (a reader asked)."""
        eng = self._scopes().engines.get(scope)
        index = self._indexes.get(scope)
        if eng is not None and (index is None or index.engine is not eng):
            self._indexes[scope] = NameIndex(eng)

    def index_progress(self) -> tuple[tuple[str, int], ...]:
        """How far each name index is built: a fork inherits them as they stand."""
        return tuple((scope, index.seen) for scope, index in self._indexes.items())

    def warm(self, budget: int = INDEX_STEP) -> bool:
        """Advance one incomplete name index by a step, the global one first, then those searches
        asked for; True when every index is complete (the server calls this between requests so
        a search need not wait)."""
        eng = self._scopes().global_engine
        index = self._indexes.get("global")
        if index is None or index.engine is not eng:
            index = self._indexes["global"] = NameIndex(eng)
        for candidate in (index, *self._indexes.values()):
            if not candidate.complete:
                candidate.step(budget)
                return False
        return True


def check_name(name: str, parameter: str) -> None:
    if not name:
        raise ApiError(400, "a player name must not be empty", parameter)
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise ApiError(400, f"a player name has at most {MAX_NAME_BYTES} UTF-8 bytes, got {size}", parameter)


def point_row(p: HistoryPoint) -> dict[str, Any]:
    return {"t": p.t, "rating": p.rating, "display": p.display, "tier": p.tier}


def session_row(s: Session) -> dict[str, Any]:
    return {
        "server": s.server,
        "t_start": s.t_start,
        "t_end": s.t_end,
        "kills": s.kills,
        "deaths": s.deaths,
        "delta": s.delta,
        "rating_after": s.rating_after,
    }
