"""Journal records as values: kills, match placements and control records (no I/O here).

What the journal (``daemon/state.py``) stores and the applier (``daemon/applier.py``) applies;
pure, so the applier can be, and the purity test holds both to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from arenad.errors import ArenadError
from arenad.models.base import placement_pairs


class StateError(ArenadError):
    """The state directory cannot be used (permissions, a corrupt journal in the middle)."""


#: One journaled kill: (seq, t, attacker, victim, server, id). A plain tuple: it is the hot path.
Record = tuple[int, float, str, str, str | None, str | None]

#: Record kinds of a ``[first_seq, rows, kinds]`` chunk.
KIND_KILL = 0
KIND_PLACEMENT = 1
KIND_CONTROL = 2


@dataclass(frozen=True, slots=True)
class PlacementRecord:
    """One journaled match placement: groups of players, best first (ADR never rates these).

    ``pairs`` (not journaled) are its (better, worse) pairs, the predictions every model is
    scored on, worked out once for all of them.
    """

    seq: int
    t: float
    placements: tuple[tuple[str, ...], ...]
    server: str | None
    id: str | None
    pairs: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pairs", tuple(placement_pairs(self.placements)))

    def row(self) -> list[Any]:
        return [self.t, [list(group) for group in self.placements], self.server, self.id]


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """One journaled admin operation (``op``: ``season_start``) at event time ``t``."""

    seq: int
    t: float
    op: str
    args: dict[str, Any]

    def row(self) -> list[Any]:
        return [self.t, self.op, self.args]


#: Whatever the journal holds: kills (tuples), match placements and control records.
JournalRecord = Record | PlacementRecord | ControlRecord


def record_seq(rec: JournalRecord) -> int:
    """The sequence number of a journal record of any kind."""
    return rec[0] if isinstance(rec, tuple) else rec.seq


def record_kind(rec: JournalRecord) -> int:
    if isinstance(rec, tuple):
        return KIND_KILL
    return KIND_PLACEMENT if isinstance(rec, PlacementRecord) else KIND_CONTROL


def record_row(rec: JournalRecord) -> list[Any] | tuple[Any, ...]:
    """A record without its sequence number, as the journal and the cluster stream store it:
    a kill ``(t, attacker, victim, server, id)``, a placement ``[t, groups, server, id]``, a
    control record ``[t, op, args]``."""
    return rec[1:] if isinstance(rec, tuple) else rec.row()


def record_from_row(kind: int, seq: int, row: Any) -> JournalRecord:
    """The record of kind ``kind`` at ``seq`` from its stored row (``record_row``'s inverse).

    ``ValueError``/``TypeError`` when the row does not have its kind's shape; ``StateError``
    for a kind this arenad does not know (written by a newer one).
    """
    if kind == KIND_KILL:
        t, attacker, victim, server, event_id = row
        return (seq, float(t), str(attacker), str(victim), server, event_id)
    if kind == KIND_PLACEMENT:
        t, groups, server, event_id = row
        placements = tuple(tuple(str(player) for player in group) for group in groups)
        return PlacementRecord(seq, float(t), placements, server, event_id)
    if kind == KIND_CONTROL:
        t, op, args = row
        if not isinstance(op, str) or not isinstance(args, dict):
            raise ValueError("bad control record")
        return ControlRecord(seq, float(t), op, args)
    raise StateError(f"record kind {kind} at event {seq}: written by a newer arenad")
