"""Waiting in tests: on a condition, with a timeout, never a bare sleep (STYLE.md §11).

``wait_until`` polls from a thread (a daemon subprocess, a broker, a file); ``until`` from inside
an event loop (a source's or the notifier's counters, which have no event to wait on); ``settled``
waits for a figure to stop moving, where "done" has no other sign. The poll interval only bounds
how late a wait notices; the timeout is what fails the test, naming what did not happen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds between two looks at a condition.
POLL = 0.02


def wait_until(condition: Callable[[], T], what: str, timeout: float = 10.0, poll: float = POLL) -> T:
    """Poll ``condition`` until it returns something true, and return that; AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(poll)
    return value


async def until(condition: Callable[[], object], what: str = "condition", timeout: float = 5.0) -> None:
    """``wait_until`` inside an event loop: other tasks run while it polls."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(POLL / 2)


def settled(value: Callable[[], T], what: str, quiet: float, timeout: float = 20.0) -> T:
    """Poll ``value`` until it has not changed for ``quiet`` seconds, and return it."""
    deadline = time.monotonic() + timeout
    last = value()
    since = time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise AssertionError(f"still changing after {timeout} s: {what} (last {last!r})")
        time.sleep(POLL)
        now = value()
        if now != last:
            last, since = now, time.monotonic()
    return last
