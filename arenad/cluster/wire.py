"""What the cluster's stream carries: subjects, message bodies and message ids (pure, no I/O).

A message on ``<prefix>.<server>.kills`` is one ingest step's accepted records of one server,
``[SCHEMA, rows, kinds]`` in msgpack: the journal's chunk layout (``daemon/state.py``) with the
schema version where the journal has the first sequence number, because replicas number the
records themselves, in stream order. ``<prefix>.control`` carries control records the same way
(season starts, exclusions, merges, hides, published by the replica that was asked), and
``<prefix>.<server>.chat`` players' chat lines for the leader's in-game commands (never rated).

Every replica decodes every message with ``decode_records``; it is a pure function of the bytes,
so a garbage message or one of another schema is refused identically everywhere and the record
numbering stays the same on all replicas (what makes their checkpoints equal byte for byte).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from arenad.core.events import PlacementEvent, Reject, event_from_obj
from arenad.feeds import ChatLine
from arenad.records import (
    KIND_CONTROL,
    KIND_KILL,
    KIND_PLACEMENT,
    JournalRecord,
    record_from_row,
    record_kind,
    record_row,
)
from arenad.scopes import Rule

#: The body's schema version; a replica refuses (and counts) any other.
SCHEMA = 1
#: Why a replica refused a message (``arenad_cluster_rejected_total{reason}``).
REJECT_REASONS = ("undecodable", "schema_version", "malformed", "subject")
#: Longest name or id a stream row may carry (the decoders' own bound is far below it).
MAX_FIELD = 4096
#: Characters a subject token keeps as they are; every other byte of the UTF-8 form is ``~XX``.
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
#: The tokens of events without a server id and of the empty server id (never the escape of a
#: real one: that is ``~XX``).
NO_SERVER = "~"
EMPTY_SERVER = "~~"


@dataclass(frozen=True, slots=True)
class WireReject:
    """A message no replica applies: ``reason`` one of ``REJECT_REASONS``, ``detail`` for the log."""

    reason: str
    detail: str


# ---------------------------------------------------------------------------- subjects
def server_token(server: str | None) -> str:
    """One subject token for a server id, reversible (``token_server``): NATS tokens cannot hold
    ``.``, spaces or wildcards, and a server id may."""
    if server is None:
        return NO_SERVER
    if not server:
        return EMPTY_SERVER
    if all(c in _PLAIN for c in server):
        return server
    return "".join(c if c in _PLAIN else "".join(f"~{b:02X}" for b in c.encode()) for c in server)


def token_server(token: str) -> str | None:
    """The server id of a subject token (``server_token``'s inverse)."""
    if token == NO_SERVER:
        return None
    if token == EMPTY_SERVER:
        return ""
    out = bytearray()
    k = 0
    while k < len(token):
        if token[k] == "~":
            out.append(int(token[k + 1 : k + 3], 16))
            k += 3
        else:
            out.extend(token[k].encode())
            k += 1
    return out.decode()


def kills_subject(prefix: str, server: str | None) -> str:
    return f"{prefix}.{server_token(server)}.kills"


def chat_subject(prefix: str, server: str | None) -> str:
    return f"{prefix}.{server_token(server)}.chat"


def subject_matches(subject: str, pattern: str) -> bool:
    """NATS subject matching: ``*`` is one token, a final ``>`` one or more."""
    have = subject.split(".")
    want = pattern.split(".")
    for k, token in enumerate(want):
        if token == ">":
            return len(have) > k
        if k >= len(have) or (token != "*" and token != have[k]):
            return False
    return len(have) == len(want)


# ---------------------------------------------------------------------------- records
def encode_records(records: Sequence[JournalRecord]) -> bytes:
    """One message body for ``records`` (accepted by an ingest, or a control record)."""
    kinds = bytes(record_kind(r) for r in records)
    return bytes(msgpack.packb([SCHEMA, list(map(record_row, records)), kinds], use_bin_type=True))


def message_id(server: str | None, records: Sequence[JournalRecord], body: bytes) -> str:
    """The JetStream message id of a records message: the same for a redelivery of the same
    events (an MQTT message again after an ingest restart), so the stream keeps it once.

    Events with ids are named by their ids (a redelivered event may be clamped to a later
    ``t``: its id is what stays); otherwise by the body.
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(server_token(server).encode())
    ids = [_event_id(r) for r in records]
    if all(i is not None for i in ids):
        for i in ids:
            h.update(b"\x00" + str(i).encode())
    else:
        h.update(b"\x01" + body)
    return h.hexdigest()


def _event_id(rec: JournalRecord) -> str | None:
    if isinstance(rec, tuple):
        return rec[5]
    return getattr(rec, "id", None)


#: The record kinds each subject carries: control records only on the control subject, kills and
#: placements only on a server's subject (a scoped replica takes every control record, and only
#: those, from the control subject).
ON_KILLS = frozenset({KIND_KILL, KIND_PLACEMENT})
ON_CONTROL = frozenset({KIND_CONTROL})


def decode_rows(body: bytes, allowed: frozenset[int] = ON_KILLS) -> list[tuple[int, Any]] | WireReject:
    """The (record kind, row) pairs of a message, checked, or why it is refused.

    Strict where the journal reader is lenient: the stream is written by other processes, so
    every field is checked for its type and bounds, and one bad row refuses the whole message
    (an ingest publishes a step's records of one server together; applying part of it would
    be a state no ingest produced).
    """
    try:
        message = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        return WireReject("undecodable", f"not msgpack ({type(e).__name__})")
    if not isinstance(message, list) or len(message) != 3:
        return WireReject("undecodable", "not a [schema, rows, kinds] array")
    schema, rows, kinds = message
    if schema != SCHEMA or type(schema) is not int:
        return WireReject("schema_version", f"schema {schema!r}, this arenad reads {SCHEMA}")
    if not isinstance(rows, list) or not isinstance(kinds, bytes) or len(rows) != len(kinds):
        return WireReject("malformed", "rows and kinds do not match")
    out: list[tuple[int, Any]] = []
    for k, (kind, row) in enumerate(zip(kinds, rows, strict=True)):
        problem = _row_problem(kind, row) or (
            "" if kind in allowed else f"record kind {kind} does not belong on this subject"
        )
        if problem:
            return WireReject("malformed", f"row {k}: {problem}")
        out.append((kind, row))
    return out


def decode_records(
    body: bytes, first_seq: int = 1, allowed: frozenset[int] = ON_KILLS
) -> list[JournalRecord] | WireReject:
    """The records of a message numbered from ``first_seq`` (as a replica numbers them), or why not."""
    rows = decode_rows(body, allowed)
    if isinstance(rows, WireReject):
        return rows
    return [record_from_row(kind, first_seq + k, row) for k, (kind, row) in enumerate(rows)]


def _row_problem(kind: int, row: Any) -> str:
    if not isinstance(row, list):
        return "not an array"
    if kind == KIND_KILL:
        if len(row) != 5:
            return "a kill has 5 fields"
        t, attacker, victim, server, event_id = row
        return (
            _time_problem(t)
            or _text_problem(attacker, "attacker")
            or _text_problem(victim, "victim")
            or _optional_problem(server, "server")
            or _optional_problem(event_id, "id")
        )
    if kind == KIND_PLACEMENT:
        if len(row) != 4:
            return "a placement has 4 fields"
        t, groups, server, event_id = row
        # The decoders' own rule for a match (two players at least, none twice, the size bounds):
        # the applier relies on it.
        checked = event_from_obj({"t": t, "placements": groups, "server": server, "id": event_id})
        if isinstance(checked, Reject):
            return checked.detail
        return "" if isinstance(checked, PlacementEvent) else "not a placement"
    if kind == KIND_CONTROL:
        if len(row) != 3:
            return "a control record has 3 fields"
        t, op, args = row
        if not isinstance(op, str) or not isinstance(args, dict):
            return "a control record is [t, op, {args}]"
        return _time_problem(t) or control_problem(op, args)
    return f"unknown record kind {kind}"


def control_problem(op: str, args: dict[str, Any]) -> str:
    """What makes a control record one the applier cannot apply ("" if none): the ops it knows
    (``daemon/applier.py`` ``Applier.control``) with the arguments each reads. A record of an op
    this arenad does not know is refused here, counted, and skipped by every replica alike,
    instead of stopping them all (a newer arenad's op reaches an older replica that way)."""
    try:
        if op == "season_start":
            if not isinstance(args.get("name"), str) or not args["name"]:
                return "season_start needs a name"
            if not all(_number(args.get(k)) for k in ("alpha", "lambda")):
                return "season_start needs numbers alpha and lambda"
        elif op in ("exclude", "merge"):
            rule = Rule.from_dict(args if "id" in args or op == "exclude" else {**args, "id": -1})
            if op == "merge" and (not rule.player or not rule.into):
                return "a merge names a player and whom they are rated as"
            if op == "exclude" and (rule.player is None) == (rule.server is None):
                return "an exclusion names exactly one of a player or a server"
        elif op == "include":
            if not _integer(args.get("id")):
                return "include needs a rule id"
        elif op in ("hide", "unhide"):
            if not isinstance(args.get("player"), str) or not args["player"]:
                return f"{op} needs a player"
        elif op == "recompute":
            if not (args.get("scope") is None or isinstance(args.get("scope"), str)):
                return "recompute's scope is a string or null"
            if not (args.get("from") is None or _number(args.get("from"))):
                return "recompute's from is a number or null"
        else:
            return f"unknown control op {op[:40]!r}"
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        return f"{op}: {type(e).__name__}"
    return ""


def _number(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(float(value))  # type: ignore[arg-type]


def _integer(value: object) -> bool:
    return type(value) is int


def _time_problem(t: object) -> str:
    # msgpack carries at most 64-bit integers, so float() cannot overflow here.
    if type(t) not in (int, float) or not math.isfinite(float(t)):  # type: ignore[arg-type]
        return "t must be a finite number"
    return ""


def _text_problem(value: object, name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_FIELD:
        return f"{name} must be a non-empty string of at most {MAX_FIELD} characters"
    return ""


def _optional_problem(value: object, name: str) -> str:
    """A server id or event id: absent, or a string (empty too: the decoders take ``""``)."""
    if value is None or (isinstance(value, str) and len(value) <= MAX_FIELD):
        return ""
    return f"{name} must be null or a string of at most {MAX_FIELD} characters"


# ---------------------------------------------------------------------------- chat
def encode_chat(line: ChatLine) -> bytes:
    return bytes(
        msgpack.packb(
            [
                SCHEMA,
                line.server,
                line.t,
                line.slot,
                line.player,
                line.name,
                line.text,
                line.team,
                line.unresolved,
            ],
            use_bin_type=True,
        )
    )


def decode_chat(body: bytes) -> ChatLine | WireReject:
    try:
        m = msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        return WireReject("undecodable", f"not msgpack ({type(e).__name__})")
    if not isinstance(m, list) or len(m) != 9:
        return WireReject("undecodable", "not a chat line")
    if m[0] != SCHEMA:
        return WireReject("schema_version", f"schema {m[0]!r}, this arenad reads {SCHEMA}")
    _, server, t, slot, player, name, text, team, unresolved = m
    fine = (
        isinstance(server, str)
        and not _time_problem(t)
        and all(v is None or isinstance(v, str) for v in (slot, player))
        and all(isinstance(v, str) and len(v) <= MAX_FIELD for v in (name, text, unresolved))
        and isinstance(team, bool)
    )
    if not fine:
        return WireReject("malformed", "chat line fields")
    return ChatLine(server, float(t), slot, player, name, text, team, unresolved)


__all__ = [
    "KIND_CONTROL",
    "KIND_KILL",
    "KIND_PLACEMENT",
    "NO_SERVER",
    "ON_CONTROL",
    "ON_KILLS",
    "REJECT_REASONS",
    "SCHEMA",
    "WireReject",
    "chat_subject",
    "control_problem",
    "decode_chat",
    "decode_records",
    "decode_rows",
    "encode_chat",
    "encode_records",
    "kills_subject",
    "message_id",
    "server_token",
    "subject_matches",
    "token_server",
]
