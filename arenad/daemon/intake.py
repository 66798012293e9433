"""Validation of decoded events (kills and match placements) against the wall clock and delivery
history (pure: ``now`` is passed in). The decoders already refused what is malformed; this adds
the rules that need time or memory: ``future_time``, ``too_old`` and ``duplicate_id``.

What passes is journaled. Kills go to the rating core, which applies its own rules (§2.1
cooldown, self-kill, out-of-order beyond the late tolerance) deterministically, so replaying
the journal reproduces the daemon's state exactly; placements go to the shadow models only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from arenad.core.events import KillEvent, PlacementEvent, Reject, RejectReason
from arenad.daemon.config import DaemonSettings
from arenad.daemon.state import JournalRecord, PlacementRecord
from arenad.decode import DecodedRow

#: Either event kind: a kill or a match placement. Both carry ``t``, ``server`` and ``id``.
E = TypeVar("E", bound=KillEvent | PlacementEvent)


class Intake:
    """Wall-clock and duplicate checks; remembers (server, id) pairs for ``dedupe_window``."""

    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        # Insertion order is arrival order, so the oldest entries are at the front.
        self._seen: dict[tuple[str, str], float] = {}
        #: Events stamped ahead of this host's clock (within max_clock_skew) and moved back to it.
        self.clamped = 0

    def check(self, ev: E, default_server: str | None, now: float) -> E | Reject:
        """Accept (returning the event with its server filled in) or refuse with a reason.

        Kills and match placements share the rules and the id history: an id names one event
        of a server, whatever its kind.
        """
        s = self.settings
        if ev.t > now + s.max_clock_skew:
            return _future(ev.t, now)
        if ev.t < now - s.max_event_age:
            return _too_old(ev.t, now)
        server = ev.server if ev.server is not None else default_server
        if ev.t > now and s.clamp_future:
            # A game server whose clock runs ahead would move the rating clock ahead with it, and
            # every other server's events would then be out_of_order for as long: an event is
            # never rated later than the moment it arrived (docs/operations.md "Clocks").
            ev = replace(ev, t=now, server=server)
            self.clamped += 1
        if ev.id is not None:
            key = (server or "", ev.id)
            if key in self._seen:
                return _duplicate(ev.id, server)
            self._seen[key] = now
            if len(self._seen) > s.dedupe_max_ids:
                self.prune(now)
        if server != ev.server:
            ev = replace(ev, server=server)
        return ev

    def check_rows(
        self,
        items: Sequence[DecodedRow],
        default_server: str | None,
        now: float,
        seq: int,
        *,
        records: list[JournalRecord],
        rejects: list[Reject],
    ) -> int:
        """``check`` over a source read, in order: accepted events become journal records.

        ``items`` are decoded kills as ``KillRow`` tuples or ``KillEvent`` objects, placements
        and decoders' refusals (``arenad.decode.decode_msgpack_rows``). Each accepted one is
        appended to ``records`` with the next sequence number after ``seq``; each refusal (the
        decoder's or this check's, with the same reasons and details as ``check``) to
        ``rejects``. Returns the last sequence number used. The kill path is ``check`` inlined,
        without building an event object per kill.
        """
        s = self.settings
        newest = now + s.max_clock_skew
        oldest = now - s.max_event_age
        clamp = s.clamp_future
        seen = self._seen
        cap = s.dedupe_max_ids
        for item in items:
            if type(item) is tuple:
                t, attacker, victim, server, event_id = item
            elif isinstance(item, KillEvent):
                t, attacker, victim = item.t, item.attacker, item.victim
                server, event_id = item.server, item.id
            elif isinstance(item, Reject):
                rejects.append(item)
                continue
            else:
                assert isinstance(item, PlacementEvent)
                checked = self.check(item, default_server, now)
                if isinstance(checked, Reject):
                    rejects.append(checked)
                    continue
                seq += 1
                records.append(
                    PlacementRecord(seq, checked.t, checked.placements, checked.server, checked.id)
                )
                continue
            # From here on exactly ``check``, in the same order.
            if t > newest:
                rejects.append(_future(t, now))
                continue
            if t < oldest:
                rejects.append(_too_old(t, now))
                continue
            if server is None:
                server = default_server
            if t > now and clamp:
                t = now
                self.clamped += 1
            if event_id is not None:
                key = (server or "", event_id)
                if key in seen:
                    rejects.append(_duplicate(event_id, server))
                    continue
                seen[key] = now
                if len(seen) > cap:
                    self.prune(now)
            seq += 1
            records.append((seq, t, attacker, victim, server, event_id))
        return seq

    def remember(self, server: str | None, event_id: str | None, now: float) -> None:
        """Register an id seen in the journal (recovery replays ids through this)."""
        if event_id is not None:
            self._seen[(server or "", event_id)] = now

    def prune(self, now: float) -> None:
        """Forget ids older than the window, and the oldest beyond the size cap."""
        horizon = now - self.settings.dedupe_window
        seen = self._seen
        while seen:
            key = next(iter(seen))
            if seen[key] > horizon and len(seen) <= self.settings.dedupe_max_ids:
                break
            del seen[key]

    def __len__(self) -> int:
        return len(self._seen)

    def export_state(self) -> list[list[Any]]:
        return [[server, event_id, t] for (server, event_id), t in self._seen.items()]

    def import_state(self, rows: list[list[Any]]) -> None:
        self._seen = {(str(server), str(event_id)): float(t) for server, event_id, t in rows}


# The refusals of both checks, worded once.
def _future(t: float, now: float) -> Reject:
    return Reject(RejectReason.FUTURE_TIME, f"t is {t - now:.0f} s ahead of this host's clock")


def _too_old(t: float, now: float) -> Reject:
    return Reject(RejectReason.TOO_OLD, f"t is {now - t:.0f} s in the past")


def _duplicate(event_id: str, server: str | None) -> Reject:
    return Reject(RejectReason.DUPLICATE_ID, f"id {event_id!r} of server {server!r} was applied already")
