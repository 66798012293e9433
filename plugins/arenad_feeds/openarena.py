"""OpenArena / ioquake3 ``games.log``: the free-for-all deathmatch log of Quake-3-engine servers.

Every line is ``%3i:%02i <Event>: <payload>``, the clock being *game* time since the current map
started (it restarts at ``0:00`` on every ``InitGame``). The lines that matter::

    InitGame: \\...\\g_gametype\\0\\...\\mapname\\aggressor\\...\\g_timestamp\\2026-11-30 19:20:08
    ClientUserinfoChanged: 3 n\\^1Tony\\t\\0\\model\\tony\\...\\skill\\ 2.00\\...\\id\\<guid>
    Kill: 3 9 6: Tony killed Ayumi by MOD_ROCKET
    ClientDisconnect: 3
    Exit: Fraglimit hit.
    score: 30  ping: 0  client: 4 Morgan
    ShutdownGame:

**Kills are keyed on client slots, never on names** (a name may contain `` killed `` or
`` by ``): the three numbers before the second colon are parsed, the text after it is only read
for the ``MOD_...`` name at its end. A slot's player comes from the slot's latest
``ClientUserinfoChanged``; slots are reused after ``ClientDisconnect`` and re-announced on a map
change, so a slot always means whoever the log last said it was.

**Identities** (option ``identity``):

- ``"guid"`` (default): ``bot:<name>`` for a bot (always: the ``bot:`` namespace is how the
  journal knows a bot, ``arenad.gates``); ``guid:<id>`` for a human when the server logs a
  non-empty ``id`` (or ``cl_guid``), otherwise ``name:<name>``. A name first seen without a
  guid and later with one joins it: the feed yields ``Alias("name:<name>", "guid:<id>")`` once,
  which the daemon journals as a merge (``arenad aliases`` lists it, ``include`` undoes it), so
  a recompute re-rates the name's games as the guid's. Only the first guid a name shows joins
  it (a second guid under the same name is another player who took the name);
- ``"name"``: ``bot:<name>`` or ``name:<name>`` even when a guid is logged.

``<name>`` is the display name with colour codes (``^1``, ``^a``: ioquake3's ``Q_IsColorString``)
and surrounding blanks removed. A bot is a client whose userinfo has a ``skill`` key. Two bots
with the same name share one rating: the log gives nothing else to tell them apart. Bots are
rated by default (option ``bots = "include"``): on community servers they are real opponents;
``"exclude"`` turns every kill involving a bot into ``NonKill("bot_excluded")``.

**What a ``Kill`` line becomes** (§11 item 2: only pairwise kills are rated):

- killer is not a client (``1022`` is ``<world>``; ``64..1021`` are other entities such as a
  ``trigger_hurt``) → ``NonKill("world_kill")``. This includes the ``MOD_SUICIDE`` world kill the
  server logs for a player who leaves while alive;
- killer slot == victim slot → ``NonKill("suicide")``;
- killer and victim on the same team (red or blue) in a team game type (``g_gametype >= 3``)
  → ``NonKill("team_kill")``;
- a bot involved and ``bots = "exclude"`` → ``NonKill("bot_excluded")``;
- a slot nobody was announced on, or two slots with the same identity → a ``Reject``;
- otherwise a ``KillEvent`` with ``weapon`` = the ``MOD_...`` name. A victim pushed into lava
  is credited to the pusher by the game (``g_awardpushing``) and is a real player kill.

**Match results.** The ``score:`` lines the server prints right after ``Exit`` are the final
scoreboard. When they end (at the next line that is not a ``score:`` line) they become one
``PlacementEvent`` at the time of the ``Exit`` line: players grouped by score, best first, equal
scores tied, each slot read as its current player (unannounced slots and, with
``bots = "exclude"``, bots are left out; fewer than two players gives nothing). Its id is
``<map>:placements``. ADR rates kills only; the match models (TrueSkill FFA, OpenSkill,
Glicko-2 MP) rate these.

**Time.** ``t = map_start + game_seconds / timescale`` (unix seconds), so the §2.1 cooldown and
§5 decay see wall-clock seconds. ``timescale`` is the server's ``timescale`` cvar: at
``timescale 4`` game time runs four times faster than wall time. ``map_start`` is, per map:

- ``live = true``: the ``received_at`` of the ``InitGame`` line (the daemon tails the file, so
  that is when the map started, to within the tail delay);
- otherwise ``g_timestamp`` from ``InitGame`` (the server's wall clock at map start), read as UTC
  unless ``timezone_offset`` (hours east of UTC of the server's clock) is given;
- otherwise ``base_time`` for the first map, and for each later map the time of the last line of
  the map before it (map changes are immediate, and time stays monotonic);
- otherwise (no ``base_time`` either) the ``received_at`` of the ``InitGame`` line.

A stream that starts mid-map (no ``InitGame`` seen yet) anchors on its first timed line:
``base_time`` when replaying, else ``received_at - game_seconds / timescale``.

**Event ids** are ``<map>:<line>``, ``<map>`` being the map's ``g_timestamp`` (compact, e.g.
``20261130T192008``) or ``map<N>`` (N = maps seen by this parser) when it has none, and
``<line>`` the line's offset from the map's ``InitGame``. Ids are therefore the same whenever the
same log is read again (the daemon's duplicate check works across restarts and re-reads); give
each log file its own ``server`` when several have no ``g_timestamp``.

**Bad lines** never stop the feed. A line that is meant as one of the events above but cannot be
parsed (non-numeric slots, an ``InitGame`` without a clock) is a ``Reject(MALFORMED)`` with a
detail; every other line (``Item``, ``say``, ``Award``, separators, noise) is ignored, and so
is a ``score:`` line that does not follow an ``Exit`` or cannot be read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from arenad.core.events import MAX_NAME_BYTES, KillEvent, PlacementEvent, Reject, RejectReason
from arenad.errors import ConfigError, ConfigProblem
from arenad.feeds import Alias, ChatLine, ClockNote, FeedItem, IdentityUpdate, MatchBoundary, NonKill

#: ioquake3's MAX_CLIENTS: entity numbers below it are client slots.
MAX_CLIENTS = 64
#: ioquake3's MAX_GENTITIES: a killer number at or above it cannot be an entity at all.
MAX_GENTITIES = 1024
#: ioquake3's ENTITYNUM_WORLD, the ``<world>`` killer.
WORLD = 1022
#: g_gametype values from GT_TEAM (3) up are team games (TDM, CTF, ...).
FIRST_TEAM_GAMETYPE = 3
#: Team numbers of the red and blue teams (0 is "free", 3 spectators).
_PLAYING_TEAMS = (1, 2)
#: Most guid-less names remembered for aliases (a flood of invented names stops here).
MAX_UNGUIDED = 100_000
#: What the game calls a player whose cleaned name is empty.
_UNNAMED = "UnnamedPlayer"

_IDENTITIES = ("guid", "name")
_BOT_POLICIES = ("include", "exclude")
_OPTION_KEYS = ("identity", "bots", "base_time", "timezone_offset", "live", "server", "timescale")

# `%3i:%02i Event: payload`. Minutes are capped at 9 digits: int() of a longer run is slow, and
# of a very long one raises (Python's limit on int digits), which a fuzzed line must not reach.
_HEADER = re.compile(r"\s*(\d{1,9}):(\d\d)[ \t]+([A-Za-z][A-Za-z0-9_]*):(.*)", re.DOTALL | re.ASCII)
# A line that mentions one of the events we act on but has no valid header is an event that got
# mangled (a torn write, an edited file), not noise: it is rejected so that it is counted.
_LOOSE_EVENT = re.compile(r"(?:^|\s)(Kill|InitGame|ClientUserinfoChanged|ClientDisconnect):")
_KILL = re.compile(r"[ \t]*(\d{1,5})[ \t]+(\d{1,5})[ \t]+(\d{1,5}):(.*)", re.DOTALL | re.ASCII)
_MOD = re.compile(r" by (MOD_[A-Z0-9_]{1,60})[ \t]*$", re.ASCII)
_SLOT_AND_INFO = re.compile(r"[ \t]*(\d{1,5})[ \t]+(.*)", re.DOTALL | re.ASCII)
_SLOT_ONLY = re.compile(r"[ \t]*(\d{1,5})[ \t]*", re.ASCII)
# ioquake3's Q_IsColorString: '^' followed by a letter or digit.
_COLOUR = re.compile(r"\^[0-9A-Za-z]")
_G_TIMESTAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)", re.ASCII)
_SMALL_INT = re.compile(r"[0-9]{1,5}")
# `score: 30  ping: 0  client: 4 Morgan` (G_LogPrintf in ioquake3's LogExit).
_SCORE = re.compile(r"[ \t]*(-?\d{1,6})[ \t]+ping:[ \t]*\d{1,6}[ \t]+client:[ \t]*(\d{1,5})\b", re.ASCII)

#: Longest chat text kept (a command is a few words; a 1,000-character line is cut, not refused).
MAX_CHAT_CHARS = 200
#: Longest name prefix of a ``say:`` payload tried: ioquake3's netname holds 36 bytes, and its
#: colour codes are counted in them.
_MAX_SAY_NAME = 128
#: Game time this many times faster than the wall clock (or more) is reported as a fast clock:
#: the gap between two maps' ``g_timestamp`` includes the intermission and the map load, so a
#: server at ``timescale 4`` shows a ratio a little under 4, one at timescale 1 a little under 1.
FAST_CLOCK_RATIO = 1.5
#: Wall seconds a map must have run before its pace is judged (a short map says little).
FAST_CLOCK_MIN_WALL = 20.0

_T = TypeVar("_T")


def _decode(line: bytes) -> str:
    # Names are whatever bytes the client sent: UTF-8 from modern clients, Latin-1 from old
    # ones. Falling back to Latin-1 never fails and keeps distinct byte names distinct.
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return line.decode("latin-1")


def _info(text: str) -> dict[str, str]:
    """A Quake info string (``\\k\\v\\k\\v`` or ``k\\v\\k\\v``) as a dict; a missing value is ''."""
    parts = text.split("\\")
    if parts and parts[0] == "":
        parts = parts[1:]
    if len(parts) % 2:
        parts.append("")
    return dict(zip(parts[::2], parts[1::2], strict=True))


def clean_name(name: str) -> str:
    """The display name: colour codes and surrounding blanks removed (never empty)."""
    return _COLOUR.sub("", name).strip() or _UNNAMED


def _too_long(s: str) -> bool:
    return len(s) > MAX_NAME_BYTES or len(s.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES


@dataclass(frozen=True, slots=True)
class OpenArenaOptions:
    """The validated options of one OpenArena feed (see the module docstring)."""

    identity: str = "guid"
    bots: str = "include"
    base_time: float | None = None
    timezone_offset: float = 0.0
    live: bool = False
    server: str = "openarena"
    timescale: float = 1.0

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> OpenArenaOptions:
        """Validate ``options``; a ``ConfigError`` names every bad key and its value."""
        problems: list[ConfigProblem] = []
        problems.extend(
            ConfigProblem(key, options[key], f"unknown option (known: {', '.join(_OPTION_KEYS)})")
            for key in options
            if key not in _OPTION_KEYS
        )
        d = cls()
        identity = options.get("identity", d.identity)
        if identity not in _IDENTITIES:
            problems.append(ConfigProblem("identity", identity, "must be 'guid' or 'name'"))
        bots = options.get("bots", d.bots)
        if bots not in _BOT_POLICIES:
            problems.append(ConfigProblem("bots", bots, "must be 'include' or 'exclude'"))
        base_time = options.get("base_time", d.base_time)
        if base_time is not None and not _finite_number(base_time):
            problems.append(ConfigProblem("base_time", base_time, "must be unix seconds (a number)"))
        tz = options.get("timezone_offset", d.timezone_offset)
        if not _finite_number(tz) or not -24 < tz < 24:
            problems.append(ConfigProblem("timezone_offset", tz, "must be hours east of UTC, -24 < h < 24"))
        live = options.get("live", d.live)
        if not isinstance(live, bool):
            problems.append(ConfigProblem("live", live, "must be true or false"))
        server = options.get("server", d.server)
        if not isinstance(server, str) or not server or _too_long(server):
            problems.append(
                ConfigProblem(
                    "server", server, f"must be a non-empty string of at most {MAX_NAME_BYTES} bytes"
                )
            )
        timescale = options.get("timescale", d.timescale)
        if not _finite_number(timescale) or timescale <= 0:
            problems.append(ConfigProblem("timescale", timescale, "must be a number > 0"))
        if problems:
            raise ConfigError(problems, "openarena feed options")
        return cls(
            identity=identity,
            bots=bots,
            base_time=None if base_time is None else float(base_time),
            timezone_offset=float(tz),
            live=live,
            server=server,
            timescale=float(timescale),
        )


def _finite_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True, slots=True)
class _Client:
    """Who is on a slot, as the last ClientUserinfoChanged said."""

    player: str
    name: str
    bot: bool
    team: int


class OpenArenaParser:
    """The state of one ``games.log`` stream: client slots, the map's clock anchor, positions."""

    def __init__(self, options: OpenArenaOptions | None = None) -> None:
        self.options = options if options is not None else OpenArenaOptions()
        self._clients: dict[int, _Client] = {}
        self._anchor: float | None = None  # unix time of the current map's 0:00
        self._gametype = 0
        self._map_index = 0  # InitGame lines seen
        self._map_tag = "map0"
        self._line = 0  # lines fed so far: the number of the current line, named in reject details
        self._line_in_map = 0  # offset from the current map's InitGame
        self._last_t: float | None = None  # time of the latest timed line
        self._match_open = False  # an InitGame not yet followed by Exit/ShutdownGame
        # After Exit: the time of the Exit line and the (score, player) rows read since.
        self._exit_t: float | None = None
        self._scores: list[tuple[int, str]] = []
        # Names rated as name:<name> (no guid yet), and names that have joined a guid (issue 17).
        self._unguided: set[str] = set()
        self._joined: set[str] = set()
        # The fast-clock check: the current map's g_timestamp (unix) or, live, the received_at of
        # its InitGame; the game seconds of the latest line; whether this map was reported.
        self._map_wall: float | None = None
        self._game_seconds = 0
        self._fast_noted = False
        self._handlers: dict[str, Callable[[int, str, float], list[FeedItem]]] = {
            "Kill": self._kill,
            "ClientUserinfoChanged": self._userinfo,
            "ClientDisconnect": self._disconnect,
            "InitGame": self._init_game,
            "Exit": self._exit,
            "ShutdownGame": self._end,
            "score": self._score,
            "say": self._say,
            "sayteam": self._sayteam,
        }

    # ------------------------------------------------------------------ FeedParser
    def feed(self, line: bytes, received_at: float) -> list[FeedItem]:
        self._line += 1
        self._line_in_map += 1
        text = _decode(line.rstrip(b"\r\n"))
        m = _HEADER.match(text)
        if m is None:
            loose = _LOOSE_EVENT.search(text)
            if loose is not None:
                return [self._malformed(f"{loose.group(1)} line without a valid m:ss clock", text)]
            return []
        if self._exit_t is not None and m.group(3) != "score":
            return self._placements() + self._dispatch(m, text, received_at)  # the scoreboard ended
        return self._dispatch(m, text, received_at)

    def _dispatch(self, m: re.Match[str], text: str, received_at: float) -> list[FeedItem]:
        minutes, seconds, event, payload = m.groups()
        handler = self._handlers.get(event)
        if int(seconds) >= 60:
            return [self._malformed(f"{event} line with seconds {seconds} >= 60", text)] if handler else []
        game_seconds = int(minutes) * 60 + int(seconds)
        if handler is None:
            self._clock(game_seconds, received_at)  # keeps the anchor and last_t current
            items: list[FeedItem] = []
        else:
            items = handler(game_seconds, payload, received_at)
        if self.options.live and not self._fast_noted:
            items.extend(self._check_live_pace(game_seconds, received_at))
        return items

    def state(self) -> dict[str, Any]:
        """Everything the stream's meaning depends on, as JSON/msgpack-friendly plain values."""
        return {
            "version": 1,
            "clients": {
                str(slot): [c.player, c.name, c.bot, c.team] for slot, c in sorted(self._clients.items())
            },
            "anchor": self._anchor,
            "gametype": self._gametype,
            "map_index": self._map_index,
            "map_tag": self._map_tag,
            "line": self._line,
            "line_in_map": self._line_in_map,
            "last_t": self._last_t,
            "match_open": self._match_open,
            "exit_t": self._exit_t,
            "scores": [[score, player] for score, player in self._scores],
            "unguided": sorted(self._unguided),
            "joined": sorted(self._joined),
            "map_wall": self._map_wall,
            "game_seconds": self._game_seconds,
            "fast_noted": self._fast_noted,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state()``; a state of another shape raises ``ValueError`` naming the key."""
        if state.get("version") != 1:
            raise ValueError(f"openarena parser state: unsupported version {state.get('version')!r}")
        clients = _field(
            state,
            "clients",
            lambda v: {int(k): _Client(str(p), str(n), bool(b), int(t)) for k, (p, n, b, t) in v.items()},
        )
        anchor = _field(state, "anchor", _optional_float)
        gametype = _field(state, "gametype", int)
        map_index = _field(state, "map_index", int)
        map_tag = _field(state, "map_tag", str)
        line = _field(state, "line", int)
        line_in_map = _field(state, "line_in_map", int)
        last_t = _field(state, "last_t", _optional_float)
        match_open = _field(state, "match_open", bool)
        # Absent from states written before match results were read: nothing pending then.
        exit_t = _field({"exit_t": state.get("exit_t")}, "exit_t", _optional_float)
        scores = _field(
            {"scores": state.get("scores", [])}, "scores", lambda v: [(int(s), str(p)) for s, p in v]
        )
        # Absent from states written before aliases: no name seen yet.
        unguided = _field({"v": state.get("unguided", [])}, "v", lambda v: {str(n) for n in v})
        joined = _field({"v": state.get("joined", [])}, "v", lambda v: {str(n) for n in v})
        # Absent from states written before the clock checks: nothing to compare with then.
        map_wall = _field({"map_wall": state.get("map_wall")}, "map_wall", _optional_float)
        game_seconds = _field({"game_seconds": state.get("game_seconds", 0)}, "game_seconds", int)
        fast_noted = _field({"fast_noted": state.get("fast_noted", False)}, "fast_noted", bool)
        # Assigned only once every field has been read, so a refused state changes nothing.
        self._map_wall, self._game_seconds, self._fast_noted = map_wall, game_seconds, fast_noted
        self._clients, self._anchor, self._gametype = clients, anchor, gametype
        self._map_index, self._map_tag, self._line, self._line_in_map = map_index, map_tag, line, line_in_map
        self._last_t, self._match_open = last_t, match_open
        self._exit_t, self._scores = exit_t, scores
        self._unguided, self._joined = unguided, joined

    def _malformed(self, what: str, text: str) -> Reject:
        # The line number and the start of the text let an operator find the line; the quote is
        # capped because a torn line may be arbitrarily long.
        return Reject(RejectReason.MALFORMED, f"line {self._line}: {what}: {text[:80]!r}")

    # ------------------------------------------------------------------ time
    def _clock(self, game_seconds: int, received_at: float) -> float:
        """Wall-clock time of a line ``game_seconds`` into the current map."""
        o = self.options
        if self._anchor is None:
            # The stream started mid-map: the first line we see fixes the map's start.
            if o.base_time is not None and not o.live:
                self._anchor = o.base_time
            else:
                self._anchor = received_at - game_seconds / o.timescale
        t = self._anchor + game_seconds / o.timescale
        self._last_t = t
        self._game_seconds = game_seconds
        return t

    def _map_start(self, info: Mapping[str, str], game_seconds: int, received_at: float) -> float:
        o = self.options
        if o.live:
            return received_at - game_seconds / o.timescale
        stamp = _parse_g_timestamp(info.get("g_timestamp", ""))
        if stamp is not None:
            return stamp[0] - o.timezone_offset * 3600.0
        if o.base_time is not None:
            # Without a server clock, the next map starts where the previous one ended.
            return o.base_time if self._last_t is None else max(o.base_time, self._last_t)
        return received_at - game_seconds / o.timescale

    # ------------------------------------------------------------------ events
    def _init_game(self, game_seconds: int, payload: str, received_at: float) -> list[FeedItem]:
        info = _info(payload.strip())
        notes: list[FeedItem] = []
        start = self._map_start(info, game_seconds, received_at)
        stamp_wall = _parse_g_timestamp(info.get("g_timestamp", ""))
        wall = received_at if self.options.live or stamp_wall is None else stamp_wall[0]
        fast = self._fast_clock(wall, self._game_seconds)
        if fast is not None:
            notes.append(fast)
        # Time stays monotonic across maps: a map that starts before the last line read (the
        # previous map's clock ran fast, or the server's clock was stepped back) is moved to
        # start at that line, so none of its kills is refused as out of order.
        last = self._last_t
        if last is not None and start + game_seconds / self.options.timescale < last:
            moved = last - (start + game_seconds / self.options.timescale)
            start += moved
            notes.append(ClockNote("reanchored", last, moved=moved, hint=self._hint(fast)))
        self._anchor = start
        self._map_wall = wall if (self.options.live or stamp_wall is not None) else None
        self._fast_noted = False
        gametype = info.get("g_gametype", "0").strip()
        # An unreadable game type counts as FFA: team kills need same-team slots anyway.
        self._gametype = int(gametype) if _SMALL_INT.fullmatch(gametype) else 0
        self._map_index += 1
        self._line_in_map = 0
        stamp = _parse_g_timestamp(info.get("g_timestamp", ""))
        self._map_tag = stamp[1] if stamp is not None else f"map{self._map_index}"
        self._match_open = True
        t = self._clock(game_seconds, received_at)
        detail: dict[str, str] = {
            k: info[k][:MAX_NAME_BYTES] for k in ("mapname", "g_gametype", "g_timestamp") if k in info
        }
        detail["map_index"] = str(self._map_index)
        return [*notes, MatchBoundary("start", t, detail)]

    def _fast_clock(self, wall_now: float, game_seconds: int) -> ClockNote | None:
        """A ``fast_clock`` note when the current map's game time ran well ahead of the wall clock
        between its start (``_map_wall``) and ``wall_now``; once per map."""
        if self._map_wall is None or self._fast_noted:
            return None
        wall = wall_now - self._map_wall
        game = game_seconds / self.options.timescale
        if not (wall >= FAST_CLOCK_MIN_WALL and game >= FAST_CLOCK_RATIO * wall):
            return None
        self._fast_noted = True
        ratio = game / wall
        return ClockNote("fast_clock", self._last_t or wall_now, ratio=ratio, hint=self._hint_for(ratio))

    def _hint_for(self, ratio: float) -> str:
        # The server's timescale is (about) the configured one times the pace measured; the
        # measured pace is a little low (intermissions), hence the rounding to a whole number.
        suggested = max(1, round(ratio * self.options.timescale))
        return (
            f"the game clock runs about {ratio:.1f}x the wall clock: "
            f"set the feed option timescale = {suggested}"
        )

    @staticmethod
    def _hint(fast: ClockNote | None) -> str:
        return fast.hint if fast is not None else ""

    def _check_live_pace(self, game_seconds: int, received_at: float) -> list[FeedItem]:
        """Live (``received_at`` is the wall clock at reading): a map whose game time outruns it."""
        if self._map_wall is None:
            return []
        note = self._fast_clock(received_at, game_seconds)
        return [note] if note is not None else []

    def _sayteam(self, game_seconds: int, payload: str, received_at: float) -> list[FeedItem]:
        return self._say(game_seconds, payload, received_at, team=True)

    def _say(
        self, game_seconds: int, payload: str, received_at: float, *, team: bool = False
    ) -> list[FeedItem]:
        """``say: <name>: <text>``: the log names the speaker, not the slot, so the name is
        matched against the slots' names; a name two slots share is not guessed at."""
        t = self._clock(game_seconds, received_at)
        body = payload[1:] if payload.startswith(" ") else payload
        slot: int | None = None
        unresolved = "unknown_name"
        name, text = "", body
        # Names may contain ": " themselves. Every prefix ending before a ": " is tried; exactly
        # one slot may match across all of them, else ("Dr" saying "Who: hi" and "Dr: Who"
        # saying "hi" look the same) the line is refused rather than answered to a guess.
        matches: list[tuple[int, str, str]] = []
        cut = body.find(": ")
        while 0 <= cut <= _MAX_SAY_NAME:
            candidate = clean_name(body[:cut])
            matches += [
                (k, candidate, body[cut + 2 :]) for k, c in self._clients.items() if c.name == candidate
            ]
            cut = body.find(": ", cut + 1)
        if matches:
            slot, name, text = matches[-1]
            if len(matches) > 1:
                slot, unresolved = None, "ambiguous_name"
            else:
                unresolved = ""
        if not name:
            head, _, rest = body.partition(": ")
            name, text = clean_name(head[:_MAX_SAY_NAME]), rest
        client = self._clients.get(slot) if slot is not None else None
        return [
            ChatLine(
                server=self.options.server,
                t=t,
                slot=str(slot) if client is not None else None,
                player=client.player if client is not None else None,
                name=name[:MAX_NAME_BYTES],
                text=text[:MAX_CHAT_CHARS],
                team=team,
                unresolved=unresolved,
            )
        ]

    def _end(self, game_seconds: int, payload: str, received_at: float) -> list[FeedItem]:
        t = self._clock(game_seconds, received_at)
        if not self._match_open:
            return []  # the ShutdownGame after an Exit ends nothing new
        self._match_open = False
        reason = payload.strip()[:MAX_NAME_BYTES] or "ShutdownGame"
        return [MatchBoundary("end", t, {"reason": reason, "map_index": str(self._map_index)})]

    def _exit(self, game_seconds: int, payload: str, received_at: float) -> list[FeedItem]:
        was_open = self._match_open
        items = self._end(game_seconds, payload, received_at)
        if was_open:
            # The final scoreboard follows Exit: collect its rows until another line comes.
            self._exit_t = self._last_t
            self._scores = []
        return items

    def _score(self, game_seconds: int, payload: str, received_at: float) -> list[FeedItem]:
        self._clock(game_seconds, received_at)
        m = _SCORE.match(payload)
        if self._exit_t is None or m is None:
            return []  # a scoreboard row outside a scoreboard, or one we cannot read: ignored
        client = self._clients.get(int(m.group(2)))
        if client is None or (client.bot and self.options.bots == "exclude"):
            return []
        self._scores.append((int(m.group(1)), client.player))
        return []

    def _placements(self) -> list[FeedItem]:
        """The collected scoreboard as one PlacementEvent (groups of equal score, best first)."""
        t, rows = self._exit_t, self._scores
        self._exit_t, self._scores = None, []
        best: dict[str, int] = {}
        for score, player in rows:  # a player listed twice (two slots) keeps the better row
            best[player] = max(score, best.get(player, score))
        if t is None or len(best) < 2:
            return []
        groups: dict[int, list[str]] = {}
        for player, score in best.items():
            groups.setdefault(score, []).append(player)
        placements = tuple(tuple(groups[score]) for score in sorted(groups, reverse=True))
        return [PlacementEvent(t, placements, self.options.server, f"{self._map_tag}:placements")]

    def _userinfo(self, game_seconds: int, payload: str, received_at: float) -> list[FeedItem]:
        self._clock(game_seconds, received_at)
        m = _SLOT_AND_INFO.fullmatch(payload)
        if m is None:
            return [self._malformed("ClientUserinfoChanged without a numeric slot", payload)]
        slot = int(m.group(1))
        if slot >= MAX_CLIENTS:
            return [self._malformed(f"ClientUserinfoChanged slot {slot} is not a client slot", payload)]
        # Whatever follows, the slot's old player is gone: never credit kills to them.
        self._clients.pop(slot, None)
        info = _info(m.group(2))
        if "n" not in info:
            return [self._malformed(f"ClientUserinfoChanged for slot {slot} without a name (n\\)", payload)]
        name = clean_name(info["n"])
        bot = "skill" in info
        team_text = info.get("t", "0").strip()
        team = int(team_text) if _SMALL_INT.fullmatch(team_text) else 0
        guid = (info.get("id") or info.get("cl_guid") or "").strip()
        out: list[FeedItem] = []
        if bot:
            player = "bot:" + name
        elif guid and self.options.identity == "guid":
            player = "guid:" + guid
            if name in self._unguided and name not in self._joined and not _too_long(player):
                self._joined.add(name)  # once: a later guid under this name is someone else
                out.append(Alias("name:" + name, player, self._last_t or 0.0))
        else:
            player = "name:" + name
            if self.options.identity == "guid" and len(self._unguided) < MAX_UNGUIDED:
                self._unguided.add(name)
        if _too_long(player):
            return [
                Reject(
                    RejectReason.OVERSIZE,
                    f"line {self._line}: slot {slot}: identity longer than {MAX_NAME_BYTES} bytes",
                )
            ]
        self._clients[slot] = _Client(player, name, bot, team)
        out.append(IdentityUpdate(str(slot), player, name, bot))
        return out

    def _disconnect(self, game_seconds: int, payload: str, received_at: float) -> list[FeedItem]:
        self._clock(game_seconds, received_at)
        m = _SLOT_ONLY.fullmatch(payload)
        if m is None:
            return [self._malformed("ClientDisconnect without a numeric slot", payload)]
        self._clients.pop(int(m.group(1)), None)
        return []

    def _kill(self, game_seconds: int, payload: str, received_at: float) -> list[FeedItem]:
        t = self._clock(game_seconds, received_at)
        # Only the part before the second colon is read for numbers: names may say anything.
        m = _KILL.fullmatch(payload)
        if m is None:
            return [self._malformed("Kill line without numeric killer, victim and means of death", payload)]
        killer, victim = int(m.group(1)), int(m.group(2))
        if victim >= MAX_CLIENTS:
            return [self._malformed(f"Kill victim {victim} is not a client slot", payload)]
        if killer >= MAX_GENTITIES:
            return [self._malformed(f"Kill killer {killer} is not an entity number", payload)]
        v = self._clients.get(victim)
        if v is None:
            return [self._malformed(f"Kill victim slot {victim} has no announced player", payload)]
        if killer >= MAX_CLIENTS:
            return [NonKill("world_kill", t, v.player)]  # §11 item 2: not a pairwise kill
        if killer == victim:
            return [NonKill("suicide", t, v.player)]  # §11 item 2
        k = self._clients.get(killer)
        if k is None:
            return [self._malformed(f"Kill killer slot {killer} has no announced player", payload)]
        if self._gametype >= FIRST_TEAM_GAMETYPE and k.team == v.team and k.team in _PLAYING_TEAMS:
            return [NonKill("team_kill", t, v.player)]
        if self.options.bots == "exclude" and (k.bot or v.bot):
            return [NonKill("bot_excluded", t, v.player)]
        if k.player == v.player:
            return [
                Reject(
                    RejectReason.SELF_KILL,
                    f"line {self._line}: slots {killer} and {victim} are both {k.player!r}",
                )
            ]
        mod = _MOD.search(m.group(4))
        return [
            KillEvent(
                t,
                k.player,
                v.player,
                self.options.server,
                f"{self._map_tag}:{self._line_in_map}",
                mod.group(1) if mod else None,
            )
        ]


def _field(state: Mapping[str, Any], key: str, convert: Callable[[Any], _T]) -> _T:
    try:
        return convert(state[key])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"openarena parser state: bad or missing {key!r} ({type(e).__name__}: {e})") from e


def _optional_float(v: object) -> float | None:
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise TypeError(f"expected a number or null, got {type(v).__name__}")
    return float(v)


def _parse_g_timestamp(text: str) -> tuple[float, str] | None:
    """``YYYY-MM-DD HH:MM:SS`` as (unix seconds read as UTC, compact tag); None when not one."""
    m = _G_TIMESTAMP.fullmatch(text.strip())
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    try:
        unix = datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
    except ValueError:  # month 13, hour 25, year 0000...
        return None
    return unix, "".join(m.groups()[:3]) + "T" + "".join(m.groups()[3:])


class OpenArenaFeed:
    """The ``openarena`` feed plugin: OpenArena / ioquake3 ``games.log``."""

    name = "openarena"
    description = (
        "OpenArena / ioquake3 games.log (Kill, ClientUserinfoChanged, InitGame); options: identity, "
        "bots, base_time, timezone_offset, live, server, timescale"
    )

    def parser(self, options: Mapping[str, Any]) -> OpenArenaParser:
        return OpenArenaParser(OpenArenaOptions.from_mapping(options))
