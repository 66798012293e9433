"""Source-engine logs (the HL Log Standard) as CS2, CS:GO and TF2 servers write and send them.

A log line is ``L MM/DD/YYYY - HH:MM:SS: <event>``; the events that matter for rating are::

    "Name<uid><STEAMID><TEAM>" [x y z] killed "Name<uid><STEAMID><TEAM>" [x y z] with "ak47" (headshot)
    "Name<uid><STEAMID><TEAM>" killed "Name<uid><STEAMID><TEAM>" with "scattergun" (attacker_position "1 2 3")
    "Name<uid><STEAMID><TEAM>" [x y z] committed suicide with "world"
    "Name<uid><STEAMID><TEAM>" [x y z] was killed by the bomb.

The bracketed positions are optional (CS:GO and CS2 write them, TF2 does not) and trailing
properties such as ``(headshot)`` or ``(victim_position "...")`` are allowed and not used.

Players are rated by Steam ID in one spelling whatever the game logs (``STEAM_0:1:61``,
``STEAM_1:1:61`` and ``[U:1:123]`` are all ``steam:[U:1:123]``, ``arenad.identity``; a malformed
one is a ``Reject(MALFORMED)`` saying why); bots, whose Steam ID field is ``BOT``, by name
(``bot:Name``: the ``bot:`` prefix is how the journal knows a bot, ``arenad.gates``).
Suicides, world deaths, team kills and (optionally) kills involving bots are ``NonKill`` items:
counted, never rated.

Over UDP (``logaddress_add``) each datagram carries one line behind ``FF FF FF FF`` and a type
byte: ``R`` + line, or ``S`` + secret + line when the server sets ``sv_logsecret``.
``unframe_udp`` checks that framing; the parser then takes the line like one read from a file.

Options of ``SourceFeed.parser``:

``server`` (str, default ``"source"``)
    The server id put on every kill event.
``bots`` (``"include"`` default, ``"exclude"``)
    ``exclude`` turns every kill involving a bot into ``NonKill("bot_excluded")``.
``ignore_team_kills`` (bool, default true)
    A kill between two players on the same team (CT, TERRORIST, Red, Blue) becomes
    ``NonKill("team_kill")``. Turn it off for deathmatch servers that put everyone on one side
    (CS ``mp_teammates_are_enemies 1``), where such kills are ordinary FFA kills.
``timezone_offset`` (hours, default 0)
    The servers' log times are local time; this is their offset from UTC (``2`` for UTC+2,
    ``5.5`` for UTC+5:30). It is fixed: a server whose zone observes daylight saving time should
    run in UTC or use ``clock = "received"``.
``clock`` (``"log"`` default, ``"received"``)
    ``log`` dates an event by its line's own timestamp, so re-reading a log file gives the same
    times (and the same ratings) every time. ``received`` dates it by when arenad read it: for
    live UDP feeds from servers whose clocks drift, since arenad refuses events too far from its
    own clock (``future_time``, ``too_old``). Log timestamps have one-second resolution either way.
``ids`` (bool, default false)
    Give each kill a stable id derived from its line, so a line delivered twice (a log file
    re-read after a restart) is refused as ``duplicate_id``. Two kills share an id only when
    their lines are identical, which for a real server means the same kill delivered twice.
"""

from __future__ import annotations

import hmac
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from hashlib import blake2b
from typing import Any, Final, Literal

from arenad.core.events import MAX_NAME_BYTES, KillEvent, Reject, RejectReason
from arenad.errors import ConfigError, ConfigProblem, InputError
from arenad.feeds import ChatLine, FeedItem, IdentityUpdate, MatchBoundary, NonKill
from arenad.identity import SteamIdError, canonical_steam_id

#: Longest datagram or line accepted, in bytes (Source itself sends lines far shorter).
MAX_LINE_BYTES: Final = 4096

#: Teams of team modes: a kill within one of these is a team kill. "Unassigned", "Spectator"
#: and an empty team are not teams anyone fights for.
TEAMS: Final = frozenset({"CT", "TERRORIST", "Red", "Blue"})

_UDP_HEADER: Final = b"\xff\xff\xff\xff"
_LINE_START: Final = b"L "
_BOM: Final = b"\xef\xbb\xbf"

_HEADER = re.compile(r"L (\d\d)/(\d\d)/(\d{4}) - (\d\d):(\d\d):(\d\d): ")
# The subject of a player event: its quoted token, its optional position, then the verb. Names
# cannot contain '"' (the engine refuses them), so the first closing quote ends the token.
_SUBJECT = re.compile(r'"([^"]*)"(?: \[[^\]"]*\])? ')
_KILL = re.compile(r'killed "([^"]*)"(?: \[[^\]"]*\])? with "([^"]*)"(?: .*)?', re.DOTALL)
_SUICIDE = re.compile(r'committed suicide with "([^"]*)"(?: .*)?', re.DOTALL)
# Chat: the text is everything between the first quote and the last (a player may type quotes).
_SAY = re.compile(r'(say|say_team) "(.*)"[ \t]*', re.DOTALL)
#: Longest chat text kept (commands are short; a long line is cut, not refused).
MAX_CHAT_CHARS = 200
_CHANGED_NAME = re.compile(r'changed name to "([^"]*)"', re.DOTALL)
# Parsed from the end: names may contain '<', '>' and anything else but '"', while the uid,
# the Steam ID and the team never contain '<' or '>'.
_PLAYER = re.compile(r"(.*)<(-?\d+)><([^<>]*)><([^<>]*)>", re.DOTALL)
# A Steam2 id (STEAM_<digit>...), not STEAM_ID_PENDING / STEAM_ID_LAN (no account yet).
_STEAM2_START = re.compile(r"STEAM_[0-9]")
_WORLD_TRIGGERED = re.compile(r'World triggered "([^"]*)"(.*)', re.DOTALL)
_MAP = re.compile(r'(Loading|Started) map "([^"]*)"(?: .*)?', re.DOTALL)
_PROPERTY = re.compile(r'\((\w+) "([^"]*)"\)')
_ON_MAP = re.compile(r' on "([^"]*)"')

# What the attacker token of a kill says when the world, not a player, did it.
_WORLD_ATTACKERS: Final = frozenset({"world", "worldspawn"})
_WORLD_EVENTS: Final[Mapping[str, Literal["start", "end"]]] = {
    "Round_Start": "start",
    "Match_Start": "start",
    "Game_Commencing": "start",
    "Round_End": "end",
    "Round_Win": "end",
    "Round_Stalemate": "end",
    "Game_Over": "end",
}


def unframe_udp(packet: bytes, secret: str | None) -> bytes | Reject:
    """The log line of one ``logaddress_add`` datagram, or why it is refused.

    ``secret`` is the server's ``sv_logsecret`` as configured in arenad (None or "" for none).
    With a secret only ``S`` + that secret + line is accepted; without one only ``R`` + line.
    Whatever else claims to come from a server is ``unauthorised``, so a forged or misconfigured
    sender is counted apart from line noise. Details never echo a secret.
    """
    if len(packet) > MAX_LINE_BYTES:
        return Reject(RejectReason.OVERSIZE, f"datagram of {len(packet)} bytes > {MAX_LINE_BYTES}")
    if not packet.startswith(_UDP_HEADER):
        return Reject(RejectReason.MALFORMED, "datagram without the FF FF FF FF header")
    kind = packet[4:5]
    # The engine sends a C string: nothing after its NUL belongs to the line.
    body = packet[5:].split(b"\x00", 1)[0].rstrip(b"\r\n")
    if kind == b"R":
        if secret:
            return Reject(RejectReason.UNAUTHORISED, "R datagram (no secret) where a secret is configured")
        line = body
    elif kind == b"S":
        if not secret:
            return Reject(RejectReason.UNAUTHORISED, "S datagram (with a secret) where none is configured")
        key = secret.encode("utf-8")
        # The secret ends where the line begins: compare exactly the configured secret and
        # require "L " right after it, so a longer or shorter secret in the datagram fails.
        # compare_digest keeps the comparison's time independent of how much of it matches.
        if not hmac.compare_digest(body[: len(key)], key) or not body.startswith(_LINE_START, len(key)):
            return Reject(RejectReason.UNAUTHORISED, "S datagram with a wrong secret")
        line = body[len(key) :]
    else:
        return Reject(RejectReason.MALFORMED, f"unknown datagram type {kind!r}")
    if not line:
        return Reject(RejectReason.MALFORMED, "datagram without a log line")
    return line


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The parser's options, validated (see the module docstring for what each one does)."""

    server: str = "source"
    bots: Literal["include", "exclude"] = "include"
    ignore_team_kills: bool = True
    timezone_offset: float = 0.0
    clock: Literal["log", "received"] = "log"
    ids: bool = False

    def __post_init__(self) -> None:
        problems = _check_options(self)
        if problems:
            raise ConfigError(problems, "source feed options")

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> SourceOptions:
        """Options as a config file gives them; every unknown key and bad value is reported."""
        known = {f.name for f in fields(cls)}
        problems = [
            ConfigProblem(str(k), v, f"unknown option; known: {', '.join(sorted(known))}")
            for k, v in options.items()
            if k not in known
        ]
        given = {k: v for k, v in options.items() if k in known}
        try:
            opts = cls(**given)
        except ConfigError as e:
            raise ConfigError(problems + e.problems, e.source) from e
        if problems:
            raise ConfigError(problems, "source feed options")
        return opts


def _check_options(o: SourceOptions) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    if not isinstance(o.server, str) or not o.server:
        problems.append(ConfigProblem("server", o.server, "must be a non-empty string"))
    elif len(o.server.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        problems.append(ConfigProblem("server", o.server, f"longer than {MAX_NAME_BYTES} bytes"))
    if o.bots not in ("include", "exclude"):
        problems.append(ConfigProblem("bots", o.bots, 'must be "include" or "exclude"'))
    for key in ("ignore_team_kills", "ids"):
        if not isinstance(getattr(o, key), bool):
            problems.append(ConfigProblem(key, getattr(o, key), "must be true or false"))
    tz = o.timezone_offset
    if (
        isinstance(tz, bool)
        or not isinstance(tz, (int, float))
        or not math.isfinite(tz)
        or not -12.0 <= tz <= 14.0
    ):
        # UTC-12 .. UTC+14 are the offsets in use anywhere.
        problems.append(ConfigProblem("timezone_offset", tz, "must be hours from UTC in -12 .. 14"))
    if o.clock not in ("log", "received"):
        problems.append(ConfigProblem("clock", o.clock, 'must be "log" or "received"'))
    return problems


@dataclass(frozen=True, slots=True)
class _Player:
    name: str
    slot: str
    steam_id: str
    team: str

    @property
    def bot(self) -> bool:
        return self.steam_id == "BOT"


def _parse_player(token: str) -> _Player | None:
    m = _PLAYER.fullmatch(token)
    if m is None:
        return None
    return _Player(m[1], m[2], m[3], m[4])


def _identity(p: _Player) -> str | Reject:
    """The rated identity of a player, or why the line cannot be rated."""
    if p.bot:
        if not p.name:
            return Reject(RejectReason.MISSING_FIELD, "bot without a name")
        identity = "bot:" + p.name
    elif p.steam_id.startswith("[U:") or _STEAM2_START.match(p.steam_id):
        # One account, one player: STEAM_0:X:Y, STEAM_1:X:Y and [U:1:Z] are all [U:1:Z].
        try:
            identity = "steam:" + canonical_steam_id(p.steam_id)
        except SteamIdError as e:
            return Reject(RejectReason.MALFORMED, f"bad Steam ID for {p.name[:40]!r}: {e}")
    else:
        # STEAM_ID_PENDING, STEAM_ID_LAN, Console, HLTV, "": nothing stable to rate.
        return Reject(RejectReason.MISSING_FIELD, f"no Steam ID for {p.name!r}: {p.steam_id!r}")
    if len(identity.encode("utf-8")) > MAX_NAME_BYTES:
        return Reject(RejectReason.OVERSIZE, f"player id longer than {MAX_NAME_BYTES} bytes")
    return identity


_COUNTERS: Final = ("lines", "kills", "non_kills", "rejects", "boundaries", "identities", "ignored", "chat")


#: The phrases after a player token that ``_player_event`` acts on.
_HANDLED_PHRASES = (
    ' killed "',
    " committed suicide with ",
    " was killed by ",
    " entered the game",
    " changed name to ",
    ' say "',
    ' say_team "',
)


_HANDLED_PHRASES_B = tuple(p.encode() for p in _HANDLED_PHRASES)


class SourceParser:
    """One Source server's log stream (a file or one server's datagrams, already unframed)."""

    def __init__(self, options: SourceOptions | None = None) -> None:
        self.options = options if options is not None else SourceOptions()
        self._offset_seconds = self.options.timezone_offset * 3600.0
        self.map: str | None = None
        self.counts: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        # Kills come in bursts within the same second: one datetime per second is enough.
        self._last_stamp = ""
        self._last_t = 0.0

    # ------------------------------------------------------------------ FeedParser
    def feed(self, line: bytes, received_at: float) -> list[FeedItem]:
        counts = self.counts
        counts["lines"] += 1
        items = self._parse(line, received_at)
        if not items:
            counts["ignored"] += 1
        for item in items:
            if type(item) is KillEvent:
                counts["kills"] += 1
            elif type(item) is NonKill:
                counts["non_kills"] += 1
            elif type(item) is Reject:
                counts["rejects"] += 1
            elif type(item) is MatchBoundary:
                counts["boundaries"] += 1
            elif type(item) is ChatLine:
                counts["chat"] += 1
            else:
                counts["identities"] += 1
        return items

    def state(self) -> dict[str, Any]:
        return {"map": self.map, "counts": dict(self.counts)}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state()``; keys missing from an older checkpoint keep their defaults."""
        game_map = state.get("map")
        if game_map is not None and not isinstance(game_map, str):
            raise InputError(f"source feed state: 'map' must be a string or null, got {game_map!r}")
        counts = state.get("counts", {})
        if not isinstance(counts, Mapping) or not all(
            isinstance(k, str) and type(v) is int and v >= 0 for k, v in counts.items()
        ):
            raise InputError(f"source feed state: 'counts' must map names to counts, got {counts!r}")
        self.map = game_map
        self.counts = dict.fromkeys(_COUNTERS, 0) | {k: v for k, v in counts.items() if k in _COUNTERS}

    # ------------------------------------------------------------------ parsing
    def _time(self, stamp: re.Match[str]) -> float | Reject:
        text = stamp[0]
        if text == self._last_stamp:
            return self._last_t
        month, day, year, hour, minute, second = (int(g) for g in stamp.groups())
        try:
            local = datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
        except ValueError as e:
            return Reject(RejectReason.MALFORMED, f"bad log timestamp {text.strip()!r}: {e}")
        # The log's wall time is the server's local time; shifting by its offset gives UTC.
        t = local - self._offset_seconds
        self._last_stamp = text
        self._last_t = t
        return t

    def _parse(self, raw: bytes, received_at: float) -> list[FeedItem]:
        if len(raw) > MAX_LINE_BYTES:
            return [Reject(RejectReason.OVERSIZE, f"line of {len(raw)} bytes > {MAX_LINE_BYTES}")]
        line = raw.removeprefix(_BOM).rstrip(b"\r\n\x00")
        if not line.strip():
            return []
        if not line.startswith(_LINE_START):
            return [Reject(RejectReason.MALFORMED, "not an HL log line (no 'L ' at the start)")]
        # Most lines of a busy server are damage, purchases and chat (a player event whose phrase
        # we do not handle): skip them before decoding and matching, so that parsing costs less
        # than the rating update it feeds. Byte 25 is the first after "L MM/DD/YYYY - HH:MM:SS: ".
        if line[25:26] == b'"' and not any(p in line for p in _HANDLED_PHRASES_B) and line.count(b'"') >= 2:
            return []
        # Source cuts names at a byte limit, which can split a UTF-8 character: keep the line.
        text = line.decode("utf-8", "replace")
        stamp = _HEADER.match(text)
        if stamp is None:
            return [Reject(RejectReason.MALFORMED, "no 'MM/DD/YYYY - HH:MM:SS: ' log timestamp")]
        t = self._time(stamp)
        if isinstance(t, Reject):
            return [t]
        if self.options.clock == "received":
            if not math.isfinite(received_at):
                return [Reject(RejectReason.NON_FINITE_TIME, f"received_at is {received_at!r}")]
            t = received_at
        body = text[stamp.end() :]
        if body.startswith('"'):
            return self._player_event(body, t, line)
        return self._world_event(body, t)

    def _player_event(self, body: str, t: float, line: bytes) -> list[FeedItem]:
        subject = _SUBJECT.match(body)
        if subject is None:
            if body.find('"', 1) < 0:
                return [Reject(RejectReason.MALFORMED, "unterminated quoted name")]
            return []  # a quoted word and nothing after it: no event we know
        rest = body[subject.end() :]
        if rest.startswith('killed "'):
            return self._kill(subject[1], rest, t, line)
        if rest.startswith("committed suicide with "):
            m = _SUICIDE.fullmatch(rest)
            player = _parse_player(subject[1])
            if m is None or player is None:
                return [Reject(RejectReason.MALFORMED, "unparsable suicide line")]
            return [NonKill("suicide", t, self._victim(player))]
        if rest.startswith("was killed by "):
            # CS: "was killed by the bomb." The world, not a player, killed them.
            player = _parse_player(subject[1])
            if player is None:
                return [Reject(RejectReason.MALFORMED, "unparsable world-death line")]
            return [NonKill("world_kill", t, self._victim(player))]
        if rest.startswith("entered the game"):
            player = _parse_player(subject[1])
            if player is None:
                return [Reject(RejectReason.MALFORMED, "unparsable 'entered the game' line")]
            return self._identity_update(player, player)
        if rest.startswith("changed name to "):
            m = _CHANGED_NAME.fullmatch(rest)
            player = _parse_player(subject[1])
            if m is None or player is None:
                return [Reject(RejectReason.MALFORMED, "unparsable 'changed name' line")]
            renamed = _Player(m[1], player.slot, player.steam_id, player.team)
            return self._identity_update(player, renamed)
        if rest.startswith(("say ", "say_team ")):
            return self._chat(subject[1], rest, t)
        # Purchases, damage, "killed other" (chickens), assists, CS2 JSON statistics...
        return []

    def _chat(self, token: str, rest: str, t: float) -> list[FeedItem]:
        """``"Name<uid><STEAMID><TEAM>" say "text"``: answered to ``#uid`` (sm_psay's target)."""
        m = _SAY.fullmatch(rest)
        player = _parse_player(token)
        if m is None or player is None:
            return []  # chat we cannot read is not worth a reject: it is never rated
        identity = _identity(player)
        resolved = isinstance(identity, str)
        return [
            ChatLine(
                server=self.options.server,
                t=t,
                slot=f"#{player.slot}" if resolved else None,
                player=identity if isinstance(identity, str) else None,
                name=player.name[:MAX_NAME_BYTES],
                text=m[2][:MAX_CHAT_CHARS],
                team=m[1] == "say_team",
                unresolved="" if resolved else "unknown_name",
            )
        ]

    def _kill(self, attacker_token: str, rest: str, t: float, line: bytes) -> list[FeedItem]:
        m = _KILL.fullmatch(rest)
        if m is None:
            return [Reject(RejectReason.MALFORMED, "unparsable kill line")]
        victim_player = _parse_player(m[1])
        attacker_player = _parse_player(attacker_token)
        if victim_player is None:
            return [Reject(RejectReason.MALFORMED, "kill line with an unparsable victim")]
        if attacker_player is None:
            if attacker_token.lower() in _WORLD_ATTACKERS:
                return [NonKill("world_kill", t, self._victim(victim_player))]
            return [Reject(RejectReason.MALFORMED, "kill line with an unparsable attacker")]
        attacker = _identity(attacker_player)
        if isinstance(attacker, Reject):
            return [attacker]
        victim = _identity(victim_player)
        if isinstance(victim, Reject):
            return [victim]
        if attacker == victim:
            return [NonKill("suicide", t, victim)]
        opts = self.options
        # A bot that is not rated cannot make a kill count either way, team or not.
        if opts.bots == "exclude" and (attacker_player.bot or victim_player.bot):
            return [NonKill("bot_excluded", t, victim)]
        if (
            opts.ignore_team_kills
            and attacker_player.team == victim_player.team
            and attacker_player.team in TEAMS
        ):
            return [NonKill("team_kill", t, victim)]
        weapon = m[2] or None
        if weapon is not None and len(weapon.encode("utf-8")) > MAX_NAME_BYTES:
            return [Reject(RejectReason.OVERSIZE, f"weapon longer than {MAX_NAME_BYTES} bytes")]
        event_id = blake2b(line, digest_size=12).hexdigest() if opts.ids else None
        return [KillEvent(t, attacker, victim, opts.server, event_id, weapon)]

    @staticmethod
    def _victim(p: _Player) -> str:
        identity = _identity(p)
        # A non-kill is only counted, so a player without a usable id is still worth counting.
        return identity if isinstance(identity, str) else ""

    @staticmethod
    def _identity_update(before: _Player, after: _Player) -> list[FeedItem]:
        # A bot's identity is its name, so a renamed bot becomes a new player; a human keeps
        # their Steam ID whatever they are called.
        identity = _identity(after)
        if isinstance(identity, Reject):
            return []  # still connecting (STEAM_ID_PENDING) or HLTV: nothing to bind yet
        return [IdentityUpdate(before.slot, identity, after.name, after.bot)]

    def _world_event(self, body: str, t: float) -> list[FeedItem]:
        if body.startswith("World triggered "):
            m = _WORLD_TRIGGERED.fullmatch(body)
            if m is None:
                return [Reject(RejectReason.MALFORMED, "unparsable 'World triggered' line")]
            kind = _WORLD_EVENTS.get(m[1])
            if kind is None:
                return []
            on_map = _ON_MAP.match(m[2])
            if on_map is not None:
                self.map = on_map[1]
            return [self._boundary(kind, t, m[1].lower())]
        if body.startswith(("Loading map ", "Started map ")):
            m = _MAP.fullmatch(body)
            if m is None:
                return [Reject(RejectReason.MALFORMED, "unparsable map line")]
            self.map = m[2]
            event = "loading_map" if m[1] == "Loading" else "started_map"
            return [self._boundary("start", t, event)]
        if body.startswith("Log file started"):
            # A new log file comes with a new map (its "Loading map" line follows).
            self.map = None
            props = dict(_PROPERTY.findall(body))
            return [self._boundary("start", t, "log_file_started", props)]
        if body.startswith("Log file closed"):
            return [self._boundary("end", t, "log_file_closed")]
        return []

    def _boundary(
        self, kind: str, t: float, event: str, extra: Mapping[str, str] | None = None
    ) -> MatchBoundary:
        detail = dict(extra or {})
        detail["event"] = event
        if self.map is not None:
            detail["map"] = self.map
        return MatchBoundary(kind, t, detail)


class SourceFeed:
    """The ``source`` feed plugin."""

    name = "source"
    description = (
        "Source-engine logs (HL Log Standard) from CS2, CS:GO and TF2: log files or logaddress_add "
        "UDP lines; players by Steam ID, bots by name"
    )

    def parser(self, options: Mapping[str, Any]) -> SourceParser:
        return SourceParser(SourceOptions.from_mapping(options))
