"""The daemon's wall clock: host time that a clock step cannot yank around.

Wall time decides which events are ``future_time`` or ``too_old``, when dedupe ids expire and
whether a signed datagram is stale. ``time.time()`` can step: an NTP correction, an operator's
``date -s``, a VM resumed from a snapshot. Followed blindly, a step of an hour backwards makes
every valid event an hour "in the future" and refuses it.

``DaemonClock.now()`` is the wall time at the last sync plus the monotonic time since (the
monotonic clock never steps). Each call (at most one ``time.time()`` per ``check_every``
seconds) compares it with the host's wall clock:

* a difference below ``step`` seconds is drift or NTP slewing: the clock re-anchors on the wall
  clock and follows it;
* a larger difference is a *step*: counted (``arenad_wall_clock_jumps_total``), logged
  (``wall_clock_jump`` with the seconds), and **not followed**; ``arenad_wall_clock_offset_seconds``
  shows how far the host is from the daemon's clock;
* a step that persists for ``adopt_after`` seconds is taken as the new truth (the host clock was
  wrong before, e.g. no NTP at boot): the clock re-anchors and logs ``wall_clock_adopted``.

Event *times* are the events' own; the rating core never reads this clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("arenad.clock")


class DaemonClock:
    def __init__(
        self,
        *,
        step: float = 2.0,
        adopt_after: float = 600.0,
        check_every: float = 0.25,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.step = step
        self.adopt_after = adopt_after
        self.check_every = check_every
        self._wall = wall
        self._mono = mono
        m = mono()
        self._anchor_wall = wall()
        self._anchor_mono = m
        self._checked = m
        self._stepped_since: float | None = None  # monotonic time a step was first seen
        self.jumps = 0
        self.adopted = 0
        self.offset = 0.0  # host wall clock minus this clock, at the last check

    def now(self) -> float:
        m = self._mono()
        ours = self._anchor_wall + (m - self._anchor_mono)
        if m - self._checked < self.check_every:
            return ours
        self._checked = m
        wall = self._wall()
        diff = wall - ours
        if abs(diff) < self.step:
            if self._stepped_since is not None:
                log.warning("wall_clock_recovered", offset=round(diff, 3))
            self._stepped_since = None
            self._anchor_wall, self._anchor_mono = wall, m
            self.offset = 0.0
            return wall
        self.offset = diff
        if self._stepped_since is None:
            self._stepped_since = m
            self.jumps += 1
            log.warning("wall_clock_jump", seconds=round(diff, 3), adopt_after=self.adopt_after)
        elif m - self._stepped_since >= self.adopt_after:
            log.warning("wall_clock_adopted", seconds=round(diff, 3))
            self.adopted += 1
            self._stepped_since = None
            self._anchor_wall, self._anchor_mono = wall, m
            self.offset = 0.0
            return wall
        return ours

    def now_ms(self) -> int:
        return int(self.now() * 1000)
