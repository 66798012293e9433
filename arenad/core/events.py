"""Kill events as values, and the validation every source shares.

A decoder turns bytes into plain Python objects; ``event_from_obj`` turns one such object into a
``KillEvent`` or a ``Reject`` with a typed reason. Nothing here raises on bad input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

#: Longest player, server, id or weapon string accepted, in UTF-8 bytes (wire schema).
MAX_NAME_BYTES = 128
#: Most players one match-placement event may rank (an FFA server holds far fewer).
MAX_PLACEMENT_PLAYERS = 256


class RejectReason(StrEnum):
    """Why an input was refused. The value is the label used in summaries and metrics."""

    MALFORMED = "malformed"
    MISSING_FIELD = "missing_field"
    BAD_TYPE = "bad_type"
    NON_FINITE_TIME = "non_finite_time"
    SELF_KILL = "self_kill"
    FUTURE_TIME = "future_time"
    TOO_OLD = "too_old"
    DUPLICATE_ID = "duplicate_id"
    UNAUTHORISED = "unauthorised"
    OVERSIZE = "oversize"


@dataclass(frozen=True, slots=True)
class KillEvent:
    """``attacker`` killed ``victim`` at ``t`` (unix seconds)."""

    t: float
    attacker: str
    victim: str
    server: str | None = None
    id: str | None = None
    weapon: str | None = None


@dataclass(frozen=True, slots=True)
class PlacementEvent:
    """A match ended at ``t`` with these placements: groups of players, best first.

    Players in one group tied. ADR rates kills only and does not consume these; the models that
    rate matches (TrueSkill FFA, OpenSkill, Glicko-2 MP-weighted) do.
    """

    t: float
    placements: tuple[tuple[str, ...], ...]
    server: str | None = None
    id: str | None = None

    @property
    def players(self) -> int:
        return sum(len(group) for group in self.placements)


Event = KillEvent | PlacementEvent


@dataclass(frozen=True, slots=True)
class Reject:
    """A refused input with its reason and a short human-readable detail."""

    reason: RejectReason
    detail: str


def _text(obj: dict[Any, Any], key: str, required: bool) -> str | Reject | None:
    if key not in obj:
        return Reject(RejectReason.MISSING_FIELD, f"missing {key!r}") if required else None
    v = obj[key]
    if v is None and not required:
        return None
    if not isinstance(v, str):
        return Reject(RejectReason.BAD_TYPE, f"{key!r} must be a string, got {type(v).__name__}")
    if not v and required:
        return Reject(RejectReason.BAD_TYPE, f"{key!r} must not be empty")
    if len(v) > MAX_NAME_BYTES or len(v.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return Reject(RejectReason.OVERSIZE, f"{key!r} longer than {MAX_NAME_BYTES} bytes")
    if not _utf8_ok(v):
        return Reject(RejectReason.BAD_TYPE, f"{key!r} holds a lone surrogate (not encodable as UTF-8)")
    return v


def _utf8_ok(s: str) -> bool:
    """Whether ``s`` encodes as UTF-8.

    JSON's ``"\\ud800"`` escape decodes to a lone surrogate, which no UTF-8 writer accepts: such a
    name would make the journal's msgpack encoder raise after the event was accepted.
    """
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: Strings of at most this many characters are within MAX_NAME_BYTES whatever they contain
#: (UTF-8 needs at most 4 bytes per character), so the fast path need not encode them.
_SAFE_CHARS = MAX_NAME_BYTES // 4


def kill_row(obj: object) -> tuple[float, str, str, str | None, str | None, str | None] | None:
    """The wire schema's fast path: ``(t, attacker, victim, server, id, weapon)`` of a kill of
    the shape well-behaved senders use, or None when the detailed checks must decide."""
    if type(obj) is dict and len(obj) <= 6:
        t = obj.get("t")
        attacker = obj.get("attacker")
        victim = obj.get("victim")
        server = obj.get("server")
        weapon = obj.get("weapon")
        raw_id = obj.get("id")
        event_id = str(raw_id) if type(raw_id) is int else raw_id
        if (
            type(t) is float
            and math.isfinite(t)
            and type(attacker) is str
            and type(victim) is str
            and 0 < len(attacker) <= _SAFE_CHARS
            and 0 < len(victim) <= _SAFE_CHARS
            and attacker != victim
            and (server is None or (type(server) is str and len(server) <= _SAFE_CHARS))
            and (weapon is None or (type(weapon) is str and len(weapon) <= _SAFE_CHARS))
            and (event_id is None or (type(event_id) is str and len(event_id) <= _SAFE_CHARS))
            and len(obj) == 3 + (server is not None) + (raw_id is not None) + (weapon is not None)
            # isascii() is O(1) in CPython: ASCII names skip the call (the hot path).
            and (attacker.isascii() or _utf8_ok(attacker))
            and (victim.isascii() or _utf8_ok(victim))
            and (server is None or _utf8_ok(server))
            and (weapon is None or _utf8_ok(weapon))
            and (event_id is None or _utf8_ok(event_id))
        ):
            return (t, attacker, victim, server, event_id, weapon)
    return None


def event_from_obj(obj: object) -> KillEvent | PlacementEvent | Reject:
    """Validate one decoded event object (a JSON object or msgpack map) of the wire schema."""
    # Fast path for the shape well-behaved senders use; anything else (or any doubt) goes through
    # the detailed checks below, which also name the reason of a refusal.
    row = kill_row(obj)
    if row is not None:
        return KillEvent(*row)
    return _event_from_obj_slow(obj)


def _time(obj: dict[Any, Any]) -> float | Reject:
    if "t" not in obj:
        return Reject(RejectReason.MISSING_FIELD, "missing 't'")
    t = obj["t"]
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return Reject(RejectReason.BAD_TYPE, f"'t' must be a number, got {type(t).__name__}")
    try:
        tf = float(t)
    except OverflowError:
        return Reject(RejectReason.NON_FINITE_TIME, "'t' does not fit a float")
    if not math.isfinite(tf):
        return Reject(RejectReason.NON_FINITE_TIME, f"'t' is {tf!r}")
    return tf


def _event_id(obj: dict[Any, Any]) -> str | Reject | None:
    if obj.get("id") is None:
        return None
    raw = obj["id"]
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        return Reject(RejectReason.BAD_TYPE, f"'id' must be a string or integer, got {type(raw).__name__}")
    event_id = str(raw)
    if len(event_id) > MAX_NAME_BYTES or len(event_id.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return Reject(RejectReason.OVERSIZE, f"'id' longer than {MAX_NAME_BYTES} bytes")
    if not _utf8_ok(event_id):
        return Reject(RejectReason.BAD_TYPE, "'id' holds a lone surrogate (not encodable as UTF-8)")
    return event_id


def _event_from_obj_slow(obj: object) -> KillEvent | PlacementEvent | Reject:
    if not isinstance(obj, dict):
        return Reject(RejectReason.MALFORMED, f"an event must be a map, got {type(obj).__name__}")
    if "placements" in obj:
        return _placement_from_obj(obj)
    tf = _time(obj)
    if isinstance(tf, Reject):
        return tf
    fields: list[str | None] = []
    for key, required in (("attacker", True), ("victim", True), ("server", False), ("weapon", False)):
        v = _text(obj, key, required)
        if isinstance(v, Reject):
            return v
        fields.append(v)
    attacker, victim, server, weapon = fields
    assert attacker is not None and victim is not None  # required fields were checked above
    event_id = _event_id(obj)
    if isinstance(event_id, Reject):
        return event_id
    if attacker == victim:
        return Reject(RejectReason.SELF_KILL, "attacker and victim are the same player")
    return KillEvent(tf, attacker, victim, server, event_id, weapon)


def _placement_from_obj(obj: dict[Any, Any]) -> PlacementEvent | Reject:
    """``{"t", "placements": [[player, ...], ...], "server"?, "id"?}``: groups best first."""
    unknown = set(obj) - {"t", "placements", "server", "id"}
    if unknown:
        return Reject(
            RejectReason.MALFORMED, f"unknown field(s) in a placement event: {sorted(map(str, unknown))}"
        )
    tf = _time(obj)
    if isinstance(tf, Reject):
        return tf
    server = _text(obj, "server", False)
    if isinstance(server, Reject):
        return server
    event_id = _event_id(obj)
    if isinstance(event_id, Reject):
        return event_id
    raw = obj["placements"]
    if not isinstance(raw, list):
        return Reject(RejectReason.BAD_TYPE, f"'placements' must be an array, got {type(raw).__name__}")
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for k, group in enumerate(raw):
        if not isinstance(group, list) or not group:
            return Reject(RejectReason.BAD_TYPE, f"'placements'[{k}] must be a non-empty array of players")
        names: list[str] = []
        for player in group:
            if not isinstance(player, str) or not player:
                return Reject(RejectReason.BAD_TYPE, f"'placements'[{k}] holds a non-string or empty player")
            if len(player) > MAX_NAME_BYTES or len(player.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
                return Reject(
                    RejectReason.OVERSIZE,
                    f"a player in 'placements'[{k}] is longer than {MAX_NAME_BYTES} bytes",
                )
            if not _utf8_ok(player):
                return Reject(RejectReason.BAD_TYPE, f"a player in 'placements'[{k}] holds a lone surrogate")
            if player in seen:
                return Reject(RejectReason.MALFORMED, f"player {player[:32]!r} is placed twice")
            seen.add(player)
            if len(seen) > MAX_PLACEMENT_PLAYERS:
                return Reject(
                    RejectReason.OVERSIZE, f"more than {MAX_PLACEMENT_PLAYERS} players in one match"
                )
            names.append(player)
        groups.append(tuple(names))
    if len(seen) < 2:
        return Reject(RejectReason.MALFORMED, "a match needs at least two players")
    return PlacementEvent(tf, tuple(groups), server, event_id)
