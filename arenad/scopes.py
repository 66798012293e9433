"""Leaderboard scopes: several independent ADR ladders fed from one event stream (issue 6).

Pure like the core: no I/O, no clock; time comes in with each event. A *scope* is one ``Engine``
(its own ratings, sorted index, active set and tiers). Kinds (seed 003 "partitions"):

* ``global``: every kill. Always on: it is the ladder queries fall back to.
* ``server:<id>``: the kills of one game server, created at its first kill (at most
  ``max_servers`` of them, so invented server ids cannot exhaust memory).
* ``season:<name>``: the current season, from a calendar, explicit start times, or an admin
  command (journaled, so a replay starts it at the same point). At a rollover the previous
  season is closed (read-only, still queryable) and the new one starts from its final state
  with the seed 001 §4 reset applied; the first season starts from the global ladder.
* ``event:<name>``: a named time window (a tournament), optionally limited to some servers.
  It starts empty and never decays (seed 003: an event is a fixed period).

Every scope sees its events in stream order with the same ``Engine.feed`` contract as the
global ladder, so the ladder of ``server:S`` equals a plain replay of S's events alone.
Excluded events (``Exclusions``: a cheater's games, a broken server's window) go to no scope.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from arenad.core.engine import Engine, Outcome
from arenad.core.params import ADRParams
from arenad.gates import GateConfig, Gates, is_bot
from arenad.sessions import Sessions

SCOPE_KINDS = ("global", "server", "season", "event")
SEASON_CALENDARS = ("none", "monthly", "quarterly", "yearly")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

_PHI = (1.0 + math.sqrt(5.0)) / 2.0


@dataclass(frozen=True, slots=True)
class Reset:
    """A season reset (seed 001 §4.1): sigma <- min(sigma_max, alpha sigma),
    mu <- (1 - lam) mu + lam mu_anchor."""

    alpha: float
    lam: float

    def problems(self) -> list[str]:
        out = []
        if not (isinstance(self.alpha, float) and math.isfinite(self.alpha) and 1.0 <= self.alpha <= 3.0):
            out.append(f"alpha must lie in [1, 3] (seed 001 §4.1), got {self.alpha!r}")
        if not (isinstance(self.lam, float) and math.isfinite(self.lam) and 0.0 <= self.lam <= 1.0):
            out.append(f"lambda must lie in [0, 1] (seed 001 §4.1), got {self.lam!r}")
        return out


#: Seed 001 §4.2 presets.
RESET_PRESETS: dict[str, Reset] = {
    "continuous": Reset(1.0, 0.0),
    "softer": Reset((_PHI + math.sqrt(_PHI)) / 2.0, _PHI**-3 / 2.0),
    "soft": Reset(_PHI, _PHI**-3),
    "hard": Reset(_PHI**2, 1.0 / _PHI),
}


@dataclass(frozen=True, slots=True)
class SeasonStart:
    """``[[scopes.season]]``: a season that starts at event time ``start`` (seconds)."""

    name: str
    start: float


@dataclass(frozen=True, slots=True)
class EventWindow:
    """``[[scopes.event]]``: kills with start <= t < end (on ``servers``, if any) form a scope."""

    name: str
    start: float
    end: float
    servers: frozenset[str] = frozenset()

    def holds(self, t: float, server: str | None) -> bool:
        return self.start <= t < self.end and (not self.servers or server in self.servers)


@dataclass(frozen=True, slots=True)
class ScopeConfig:
    """What the ``[scopes]`` section configures (validated by ``arenad.daemon.config``)."""

    kinds: tuple[str, ...] = ("global",)
    max_servers: int = 1000
    season_calendar: str = "none"
    seasons: tuple[SeasonStart, ...] = ()
    season_reset: Reset = RESET_PRESETS["softer"]
    events: tuple[EventWindow, ...] = ()
    #: Play sessions of the global ladder for the rating history (``arenad.sessions``): the idle
    #: seconds of event time that end one; 0 keeps none (``[history] ratings``).
    session_gap: float = 0.0
    #: The anti-boosting gates and the boosting report (``[gates]``, ``arenad.gates``).
    gates: GateConfig = GateConfig()  # noqa: RUF009 - frozen, so one shared default is safe

    def on(self, kind: str) -> bool:
        return kind in self.kinds


def calendar_season(calendar: str, t: float) -> tuple[str, float]:
    """(name, start time) of the calendar season holding event time ``t`` (UTC)."""
    # Whole seconds: fromtimestamp rounds to microseconds, which would put a time within 0.5 us
    # before a boundary into the next season (calendar boundaries are whole seconds).
    d = datetime.fromtimestamp(math.floor(t), UTC)
    if calendar == "monthly":
        return f"{d.year}-{d.month:02d}", datetime(d.year, d.month, 1, tzinfo=UTC).timestamp()
    if calendar == "quarterly":
        q = (d.month - 1) // 3
        return f"{d.year}-Q{q + 1}", datetime(d.year, 3 * q + 1, 1, tzinfo=UTC).timestamp()
    if calendar == "yearly":
        return f"{d.year}", datetime(d.year, 1, 1, tzinfo=UTC).timestamp()
    raise ValueError(f"no calendar {calendar!r}")


def calendar_next(calendar: str, t: float) -> float:
    """Start time of the calendar season after the one holding ``t``."""
    d = datetime.fromtimestamp(math.floor(t), UTC)
    months = {"monthly": 1, "quarterly": 3, "yearly": 12}[calendar]
    first = (d.month - 1) // months * months  # 0-based month the current season starts in
    m = first + months
    return datetime(d.year + m // 12, m % 12 + 1, 1, tzinfo=UTC).timestamp()


@dataclass(frozen=True, slots=True)
class Rule:
    """One exclusion: every kill involving ``player``, or every kill of ``server`` in [start, end);
    or, with ``into``, a merge (issue 17): ``player``'s events are rated as ``into``'s.

    A merge is a rule like an exclusion so that it has the same two readings (``applier.py``):
    from its record on live, over the whole history in a recompute, which is what re-rates the
    merged player's past as the other's; ``include`` of its id undoes it the same way."""

    id: int
    player: str | None = None
    server: str | None = None
    start: float = -math.inf
    end: float = math.inf
    reason: str = ""
    into: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "reason": self.reason}
        if self.player is not None:
            out["player"] = self.player
        if self.into is not None:  # only on merges: exclusion rules keep their bytes
            out["into"] = self.into
        if self.server is not None:
            out["server"] = self.server
            out["from"] = None if math.isinf(self.start) else self.start
            out["to"] = None if math.isinf(self.end) else self.end
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Rule:
        start = d.get("from")
        end = d.get("to")
        return cls(
            id=int(d["id"]),
            player=d.get("player"),
            server=d.get("server"),
            start=-math.inf if start is None else float(start),
            end=math.inf if end is None else float(end),
            reason=str(d.get("reason", "")),
            into=None if d.get("into") is None else str(d["into"]),
        )

    def earliest(self) -> float:
        """The earliest event time this rule can exclude (-inf for a player rule)."""
        return self.start if self.player is None else -math.inf


@dataclass(slots=True)
class Exclusions:
    """The exclusion rules in force; a kill matching any of them is rated nowhere."""

    rules: list[Rule] = field(default_factory=list)
    _players: frozenset[str] = frozenset()
    _servers: tuple[Rule, ...] = ()
    #: Merged player -> the player it is rated as (chains followed to their end).
    aliases: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        self._players = frozenset(r.player for r in self.rules if r.player is not None and r.into is None)
        self._servers = tuple(r for r in self.rules if r.server is not None)
        direct = {r.player: r.into for r in self.rules if r.player is not None and r.into is not None}
        aliases = {}
        for p in direct:
            q, hops = p, 0
            while q in direct and hops <= len(direct):  # admin.py refuses a cycle; this bounds one
                q, hops = direct[q], hops + 1
            aliases[p] = q
        self.aliases = aliases

    def merges(self) -> list[Rule]:
        return [r for r in self.rules if r.into is not None]

    def resolve(self, player: str) -> str:
        """The player ``player`` is rated as (itself unless merged)."""
        return self.aliases.get(player, player)

    def touches(self, attacker: str, victim: str, t: float, server: str | None) -> bool:
        """The rules exclude the kill or merge one of its players (a recompute starts there)."""
        aliases = self.aliases
        return attacker in aliases or victim in aliases or self.excludes(attacker, victim, t, server)

    def touches_placement(self, groups: Sequence[Sequence[str]], t: float, server: str | None) -> bool:
        aliases = self.aliases
        return any(p in aliases for g in groups for p in g) or self.excludes_placement(groups, t, server)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def excludes(self, attacker: str, victim: str, t: float, server: str | None) -> bool:
        players = self._players
        if players and (attacker in players or victim in players):
            return True
        return self._server_window(t, server)

    def excludes_placement(self, groups: Sequence[Sequence[str]], t: float, server: str | None) -> bool:
        players = self._players
        if players and any(p in players for g in groups for p in g):
            return True
        return self._server_window(t, server)

    def _server_window(self, t: float, server: str | None) -> bool:
        return any(r.server == server and r.start <= t < r.end for r in self._servers)

    def add(self, rule: Rule) -> None:
        self.rules.append(rule)
        self._index()

    def remove(self, rule_id: int) -> Rule | None:
        for k, r in enumerate(self.rules):
            if r.id == rule_id:
                del self.rules[k]
                self._index()
                return r
        return None

    def next_id(self) -> int:
        return 1 + max((r.id for r in self.rules if r.id > 0), default=0)  # feeds' merges are < 0

    def export(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.rules]

    @classmethod
    def load(cls, rows: object) -> Exclusions:
        if not isinstance(rows, list):
            return cls()
        return cls([Rule.from_dict(r) for r in rows])


def parse_scope(text: str) -> tuple[str, str | None]:
    """``"global"``, ``"server:eu-1"``, ``"season"`` (the current one), ``"season:2026-Q4"``,
    ``"event:cup"`` -> (kind, id). Raises ``ValueError`` naming what is wrong."""
    kind, sep, ident = text.partition(":")
    if kind not in SCOPE_KINDS:
        raise ValueError(f"unknown scope kind {kind!r} (one of: {', '.join(SCOPE_KINDS)})")
    if kind == "global":
        if sep:
            raise ValueError("the global scope has no id")
        return kind, None
    if not sep:
        if kind == "season":
            return kind, None
        raise ValueError(f"scope {kind!r} needs an id: {kind}:ID")
    if not ident or len(ident.encode()) > 256:
        raise ValueError(f"bad {kind} id {ident!r}")
    return kind, ident


class ScopeSet:
    """Every scope's engine, and which scopes each event goes to."""

    def __init__(self, params: ADRParams, config: ScopeConfig | None = None) -> None:
        self.params = params
        self.config = config if config is not None else ScopeConfig()
        self.engines: dict[str, Engine] = {"global": Engine(params)}
        self.closed: set[str] = set()  # finished seasons and events: read-only
        self.season: str | None = None  # name of the current season
        self.season_start = -math.inf
        self.exclusions = Exclusions()
        self.excluded = 0  # kills rated nowhere because an exclusion rule matched
        #: Players who asked to be left out of public lists (admin op ``hide``): absent from
        #: ``top``, the web pages and the API, still rated and still counted for others.
        self.hidden: set[str] = set()
        #: The anti-boosting gates' state, only when one is configured (``arenad.gates``).
        self.gates: Gates | None = Gates(self.config.gates) if self.config.gates.gating else None
        self.sessions: Sessions | None = (
            Sessions(self.config.session_gap, params.late_tolerance) if self.config.session_gap > 0 else None
        )
        self.refused: Counter[str] = Counter()  # scopes not created (max_servers)
        self._event_params = replace(params, decay=False, idle_after=0.0)
        self._season_quiet_until = -math.inf  # a cache: recomputed after a restart
        self._servers = 0

    # ------------------------------------------------------------------ lookups
    @property
    def global_engine(self) -> Engine:
        return self.engines["global"]

    def resolve(self, text: str) -> str:
        """A query's scope text -> the key of an existing scope; ``KeyError`` says why not."""
        kind, ident = parse_scope(text)
        if kind == "global":
            return "global"
        if kind == "season" and ident is None:
            if self.season is None:
                raise KeyError("no season has started")
            return f"season:{self.season}"
        key = f"{kind}:{ident}"
        if key not in self.engines:
            if not self.config.on(kind):
                raise KeyError(f"scope kind {kind!r} is not enabled ([scopes] kinds)")
            raise KeyError(f"no scope {key!r} (no events in it yet)")
        return key

    @property
    def hides_bots(self) -> bool:
        """Bots are left out of public lists (``[gates] bots = "hidden"``)."""
        return self.config.gates.bots == "hidden"

    @property
    def hides_anyone(self) -> bool:
        """Someone may be hidden: a reader can skip the per-player check when not."""
        return bool(self.hidden) or self.hides_bots

    def is_hidden(self, player: str) -> bool:
        """Left out of public lists: asked to be (``hide``), or a bot under ``[gates] bots = "hidden"``."""
        return player in self.hidden or (self.hides_bots and is_bot(player))

    def keys(self) -> list[str]:
        return list(self.engines)

    def kind_counts(self) -> Counter[str]:
        return Counter(key.partition(":")[0] for key in self.engines)

    # ------------------------------------------------------------------ routing
    def targets(self, attacker: str, victim: str, t: float, server: str | None) -> list[Engine] | None:
        """The engines a kill goes to, global first; None when an exclusion rule matches it.

        Starts, closes and rolls scopes over as event time ``t`` requires (a calendar season
        changing, an event window opening or closing); only an event the global ladder would
        accept moves them (a rejected one never changes anything, as in ``Engine.feed``).
        """
        if self.exclusions and self.exclusions.excludes(attacker, victim, t, server):
            self.excluded += 1
            return None
        return self._route(t, server, attacker != victim)

    def _route(self, t: float, server: str | None, pairwise: bool) -> list[Engine]:
        """``targets`` after the exclusion rules: ``pairwise`` is false for a self-kill."""
        g = self.engines["global"]
        out = [g]
        cfg = self.config
        if len(cfg.kinds) == 1:
            return out
        valid = pairwise and math.isfinite(t) and t >= g.clock - self.params.late_tolerance
        # A new server or event scope is judged by its own (fresh, clockless) engine, which rates a
        # kill the global ladder refuses as out of order: so it equals a plain replay of its kills.
        fresh = pairwise and math.isfinite(t)
        if cfg.on("server") and server is not None:
            key = "server:" + server
            eng = self.engines.get(key)
            if eng is None and fresh:
                eng = self._server_scope(key)
            if eng is not None:
                out.append(eng)
        if cfg.on("season"):
            if valid:
                self._season_due(t)
            if self.season is not None:
                out.append(self.engines["season:" + self.season])
        if cfg.on("event"):
            for ev in cfg.events:
                key = "event:" + ev.name
                if ev.holds(t, server):
                    eng = self.engines.get(key)
                    if eng is None and fresh and key not in self.closed:
                        eng = self.engines[key] = Engine(self._event_params)
                        eng.scope = key
                    if eng is not None and key not in self.closed:
                        out.append(eng)
                elif valid and t >= ev.end and key not in self.closed:
                    self.closed.add(key)  # the window is over: read-only from now on
        return out

    def feed(self, attacker: str, victim: str, t: float, server: str | None) -> Outcome | None:
        """Rate one kill in every scope it belongs to (the replay contract); global's outcome."""
        engines = self.targets(attacker, victim, t, server)
        if engines is None:
            return None
        outcome = engines[0].feed(attacker, victim, t)
        for eng in engines[1:]:
            eng.feed(attacker, victim, t)
        return outcome

    def feed_placement(self, placements: Sequence[Sequence[str]], t: float, server: str | None) -> int:
        """A finished match into every scope it belongs to, as a kill at ``t`` on ``server`` would
        be routed (``Engine.apply_placement``: its pairs at ADRParams.placement_weight, known
        players only); returns the pairs the global ladder learnt. Exclusion rules are the
        caller's (``Exclusions.excludes_placement``), as for the journal's other readers."""
        engines = self._route(t, server, True)
        learnt = engines[0].apply_placement(placements, t)
        for eng in engines[1:]:
            eng.apply_placement(placements, t)
        return learnt

    def reconfigure(self, config: ScopeConfig) -> None:
        """New windows, seasons or calendar (the admin ``reload``); kinds stay as they are."""
        old = self.config.gates
        self.config = config
        self._season_quiet_until = -math.inf
        if not config.gates.gating:
            self.gates = None
        elif self.gates is None:
            self.gates = Gates(config.gates)  # presence is known from here on
        elif config.gates != old:
            self.gates.config = config.gates

    def _server_scope(self, key: str) -> Engine | None:
        if self._servers >= self.config.max_servers:
            self.refused["server"] += 1
            return None
        self._servers += 1
        eng = self.engines[key] = Engine(self.params)
        eng.scope = key
        return eng

    # ------------------------------------------------------------------ seasons
    def _season_due(self, t: float) -> None:
        if t < self._season_quiet_until:
            return  # no season can start before then (calendar dates cost microseconds per kill)
        cfg = self.config
        if cfg.season_calendar != "none":
            name, start = calendar_season(cfg.season_calendar, t)
            if name != self.season and start > self.season_start:
                self.start_season(name, start, cfg.season_reset)
            self._season_quiet_until = calendar_next(cfg.season_calendar, t)
            return
        due: SeasonStart | None = None
        for s in cfg.seasons:  # sorted by start; the newest one whose start has come
            if s.start <= t and s.start > self.season_start:
                due = s
        if due is not None and f"season:{due.name}" not in self.engines:
            self.start_season(due.name, due.start, cfg.season_reset)

    def start_season(self, name: str, start: float, reset: Reset) -> Engine:
        """Close the current season and start ``name`` from its state with ``reset`` applied.

        The first season starts from the global ladder (the lifetime ratings carried over).
        Raises ``ValueError`` for a name already used.
        """
        key = "season:" + name
        if key in self.engines:
            raise ValueError(f"season {name!r} exists already")
        base = self.engines["global"] if self.season is None else self.engines["season:" + self.season]
        if self.season is not None:
            self.closed.add("season:" + self.season)
        eng = base.copy()
        eng.scope = key
        eng.season_reset(reset.alpha, reset.lam)
        self.engines[key] = eng
        self.season = name
        self.season_start = start
        return eng

    # ------------------------------------------------------------------ state
    def export_state(self) -> dict[str, Any]:
        return {
            "version": 1,
            "engines": {key: eng.export_state() for key, eng in self.engines.items()},
            "closed": sorted(self.closed),
            "season": self.season,
            "season_start": self.season_start,
            "exclusions": self.exclusions.export(),
            "excluded": self.excluded,
            "refused": dict(self.refused),
            # Only when someone is hidden: a state without hidden players keeps its bytes.
            **({"hidden": sorted(self.hidden)} if self.hidden else {}),
            **({"sessions": self.sessions.export_state()} if self.sessions is not None else {}),
            # Only with a gate configured, likewise.
            **({"gates": self.gates.export_state()} if self.gates is not None else {}),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], params: ADRParams, config: ScopeConfig) -> ScopeSet:
        if state.get("version") != 1:
            raise ValueError(f"scope state version {state.get('version')!r}, expected 1")
        out = cls(params, config)
        event_keys = {"event:" + ev.name for ev in config.events}
        engines: dict[str, Engine] = {}
        for key, eng_state in state["engines"].items():
            p = out._event_params if key.startswith("event:") else params
            engines[key] = Engine.from_state(eng_state, p)
            engines[key].scope = key
        if "global" not in engines:
            raise ValueError("scope state has no global ladder")
        out.engines = engines
        out.closed = set(state.get("closed", ()))
        out.season = state.get("season")
        out.season_start = float(state.get("season_start", -math.inf))
        out.exclusions = Exclusions.load(state.get("exclusions"))
        out.excluded = int(state.get("excluded", 0))
        out.refused = Counter(state.get("refused", {}))
        out.hidden = {str(p) for p in state.get("hidden", ())}
        if out.sessions is not None and "sessions" in state:
            # A state from before the rating history starts with fresh (zero) counters.
            out.sessions = Sessions.from_state(state["sessions"], config.session_gap, params.late_tolerance)
        if out.gates is not None and "gates" in state:
            # A state from before the gates starts with nobody seen: the gate fills in a window.
            out.gates = Gates.from_state(state["gates"], config.gates)
        out._servers = sum(1 for k in engines if k.startswith("server:"))
        # An event scope dropped from the config stays queryable, read-only.
        out.closed |= {k for k in engines if k.startswith("event:") and k not in event_keys}
        return out

    def iter_engines(self) -> Iterator[tuple[str, Engine]]:
        yield from self.engines.items()
