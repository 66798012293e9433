"""The daemon's wall clock (arenad.daemon.clock): follows drift, refuses steps until they persist.

Unit tests with scripted wall and monotonic clocks; tests/daemon/test_clock_jump.py steps the
wall clock of a real daemon process."""

from __future__ import annotations

from arenad.daemon.clock import DaemonClock


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_796_000_000.0
        self.mono = 100.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def clock(c: Clocks, **kw: float) -> DaemonClock:
    return DaemonClock(wall=lambda: c.wall, mono=lambda: c.mono, check_every=0.0, **kw)


def test_follows_the_wall_clock_and_its_drift() -> None:
    c = Clocks()
    dc = clock(c)
    c.advance(10.0)
    assert dc.now() == c.wall
    c.wall += 1.5  # NTP slewing, below the step threshold: followed
    c.mono += 0.0
    assert dc.now() == c.wall
    assert (dc.jumps, dc.offset) == (0, 0.0)


def test_a_step_back_is_not_followed_and_is_counted() -> None:
    c = Clocks()
    dc = clock(c, step=2.0, adopt_after=60.0)
    c.advance(5.0)
    real = c.wall
    c.wall -= 3600.0  # the host clock steps an hour back
    assert dc.now() == real  # monotonic time went on: still the true time
    assert dc.jumps == 1 and dc.offset == -3600.0
    c.advance(30.0)
    assert dc.now() == real + 30.0  # still not followed, and counted once
    assert dc.jumps == 1


def test_a_step_that_goes_away_is_forgotten() -> None:
    c = Clocks()
    dc = clock(c, step=2.0, adopt_after=60.0)
    c.wall += 7200.0
    dc.now()
    c.wall -= 7200.0
    c.advance(1.0)
    assert dc.now() == c.wall
    assert dc.offset == 0.0 and dc.adopted == 0


def test_a_step_that_persists_is_adopted() -> None:
    c = Clocks()
    dc = clock(c, step=2.0, adopt_after=60.0)
    c.wall -= 3600.0
    dc.now()
    c.advance(59.0)
    assert dc.now() == c.wall + 3600.0  # not yet
    c.advance(1.0)
    assert dc.now() == c.wall  # adopted after 60 s
    assert dc.adopted == 1 and dc.offset == 0.0
    c.advance(1.0)
    assert dc.now() == c.wall


def test_the_wall_clock_is_read_at_most_every_check_interval() -> None:
    c = Clocks()
    reads = 0

    def wall() -> float:
        nonlocal reads
        reads += 1
        return c.wall

    dc = DaemonClock(wall=wall, mono=lambda: c.mono, check_every=0.25)
    reads = 0
    for _ in range(100):
        dc.now()
        c.mono += 0.001
        c.wall += 0.001
    assert reads <= 1 + 100 * 0.001 / 0.25 + 1
    assert dc.now_ms() == int(dc.now() * 1000)
