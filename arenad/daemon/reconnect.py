"""The reconnect loop of arenad's network clients: the MQTT source and the rating-change notifier.

aiomqtt's documented shape, written once::

    while not stop:
        try:
            async with client: ...      # connect_once: returns at stop, raises when the link fails
        except MqttError:
            await sleep(backoff)        # unless stop comes first

``reconnecting`` calls ``connect_once`` until it returns (it saw ``stop``) or ``stop`` is set.
Between attempts it waits a ``Backoff`` delay, exponential with full jitter; the doubling starts
over after an attempt that connected (``connect_once`` says so by calling the ``connected``
callback it is given), so a broker restart costs the short delay again, not the ceiling. Each
failure is handed to ``on_failure`` (with the delay that follows) for the caller to count and
log under its own event names. An error that is not one of ``expected`` (a bug, a library
surprise) is reported the same way, flagged, and retried: a client of the daemon never takes the
daemon down. Cancellation is never caught.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

#: What ``reconnecting`` calls per attempt; it calls its argument once it is connected.
ConnectOnce = Callable[[Callable[[], None]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Seconds to wait between connection attempts (``[mqtt]``/``[notify]`` ``reconnect_min``/``_max``).

    After ``failures`` consecutive failures the ceiling is ``min_delay * 2 ** failures``, capped at
    ``max_delay``, and the delay is drawn uniformly between ``min_delay`` and that ceiling: "full
    jitter", floored at ``min_delay`` so that many daemons behind one broker spread out without any
    of them spinning.
    """

    min_delay: float
    max_delay: float

    def __post_init__(self) -> None:
        if not self.min_delay >= 0.0:
            raise ValueError(f"min_delay must be >= 0, got {self.min_delay!r}")
        if not self.max_delay >= self.min_delay:
            raise ValueError(f"max_delay must be >= min_delay ({self.min_delay!r}), got {self.max_delay!r}")

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """The delay after ``failures`` consecutive failures (0: the first)."""
        ceiling = min(self.max_delay, self.min_delay * 2.0 ** min(failures, 62))
        return (rng or random).uniform(self.min_delay, ceiling)


@dataclass(frozen=True, slots=True)
class Failure:
    """One attempt that ended in an error, as ``reconnecting`` reports it before backing off."""

    #: Why: the message of an expected error (its type name if empty), else "Type: message".
    error: str
    exception: Exception
    #: An error of the connection (one of ``expected``), not a bug or a library surprise.
    expected: bool
    #: The attempt had connected: an established connection was lost (the backoff starts over).
    connected: bool
    #: Seconds until the next attempt, unless stop comes first.
    retry_in: float


class _Attempt:
    __slots__ = ("up",)

    def __init__(self) -> None:
        self.up = False

    def connected(self) -> None:
        self.up = True


async def reconnecting(
    connect_once: ConnectOnce,
    stop: asyncio.Event,
    backoff: Backoff,
    on_failure: Callable[[Failure], None],
    *,
    expected: tuple[type[Exception], ...] = (),
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Call ``connect_once`` until it returns or ``stop`` is set, backing off between attempts.

    Returns at once if ``stop`` is already set, and promptly when it is set during a backoff; an
    attempt in progress is ``connect_once``'s to end. ``on_failure`` runs inside the ``except``
    clause, so ``log.exception`` there logs the traceback. ``sleep`` is for tests (a fake clock).
    """
    failures = 0  # consecutive failures since the last attempt that connected
    stop_waiter = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            attempt = _Attempt()
            try:
                await connect_once(attempt.connected)
                return
            except Exception as e:  # expected or not, the loop goes on (see the module docstring)
                if attempt.up:
                    failures = 0
                delay = backoff.delay(failures, rng)
                failures += 1
                ok = isinstance(e, expected)
                error = (str(e) or type(e).__name__) if ok else f"{type(e).__name__}: {e}"
                on_failure(Failure(error, e, ok, attempt.up, delay))
            sleeper = asyncio.ensure_future(sleep(delay))
            try:
                await asyncio.wait((sleeper, stop_waiter), return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                await asyncio.wait((sleeper,))  # let the cancellation finish: nothing left running
    finally:
        stop_waiter.cancel()
