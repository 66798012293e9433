"""The reconnect loop shared by the MQTT source and the notifier, on a fake clock.

``reconnecting`` takes its ``sleep``; these tests pass one that records the delay and returns at
once, so the backoff sequence is checked exactly and nothing here waits for real time, but the
stop test, which needs a backoff that does not end by itself.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from arenad.daemon.reconnect import Backoff, Failure, reconnecting

BOUND = 5.0  # seconds any one test may run


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(body(), BOUND)

    asyncio.run(bounded())


class LinkError(Exception):
    """Stands in for ``aiomqtt.MqttError``: the error a lost connection raises."""


class Ceiling(random.Random):
    """Draws the top of each jitter range, so a delay shows the backoff's ceiling."""

    def uniform(self, a: float, b: float) -> float:
        return b


class FakeClock:
    """A ``sleep`` that only records: the delays the loop asked for, in order."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        await asyncio.sleep(0)


class Script:
    """``connect_once`` playing a list of outcomes: "fail", "up-then-fail", "boom" or "return"."""

    def __init__(self, *outcomes: str) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    async def __call__(self, connected: Callable[[], None]) -> None:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if outcome == "up-then-fail":
            connected()
            raise LinkError("connection lost")
        if outcome == "fail":
            raise LinkError("")
        if outcome == "boom":
            raise RuntimeError("a bug")
        assert outcome == "return"


def loop(
    script: Script, clock: FakeClock, failures: list[Failure], stop: asyncio.Event | None = None
) -> Coroutine[Any, Any, None]:
    return reconnecting(
        script,
        stop or asyncio.Event(),
        Backoff(1.0, 8.0),
        failures.append,
        expected=(LinkError,),
        rng=Ceiling(),
        sleep=clock.sleep,
    )


class TestBackoff:
    """Delays double from min_delay up to max_delay, drawn with full jitter in between."""

    def test_doubles_within_bounds(self) -> None:
        b = Backoff(0.5, 4.0)
        assert b.delay(0) == 0.5
        for failures, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (10, 4.0), (10_000, 4.0)]:
            delays = [b.delay(failures) for _ in range(200)]
            assert all(0.5 <= d <= ceiling for d in delays)
            assert max(delays) > 0.5 + (ceiling - 0.5) / 2  # jittered, not fixed

    @pytest.mark.parametrize(("low", "high", "field"), [(-1.0, 1.0, "min_delay"), (2.0, 1.0, "max_delay")])
    def test_refuses_bad_bounds_naming_the_field(self, low: float, high: float, field: str) -> None:
        with pytest.raises(ValueError, match=field):
            Backoff(low, high)


class TestReconnecting:
    """Attempts until one returns or stop is set; backs off between them, and reports each failure."""

    def test_returns_when_an_attempt_returns(self) -> None:
        script, clock = Script("fail", "fail", "return"), FakeClock()
        failures: list[Failure] = []

        async def body() -> None:
            await loop(script, clock, failures)

        run(body)
        assert script.calls == 3
        assert clock.slept == [1.0, 2.0]
        assert [(f.error, f.expected, f.connected, f.retry_in) for f in failures] == [
            ("LinkError", True, False, 1.0),  # an empty message: the type's name
            ("LinkError", True, False, 2.0),
        ]

    def test_no_attempt_once_stop_is_set(self) -> None:
        script, clock = Script(), FakeClock()
        failures: list[Failure] = []

        async def body() -> None:
            stop = asyncio.Event()
            stop.set()
            await loop(script, clock, failures, stop)

        run(body)
        assert script.calls == 0

    def test_backoff_starts_over_after_a_connection(self) -> None:
        script = Script("fail", "fail", "fail", "up-then-fail", "fail", "return")
        clock = FakeClock()
        failures: list[Failure] = []

        async def body() -> None:
            await loop(script, clock, failures)

        run(body)
        assert clock.slept == [1.0, 2.0, 4.0, 1.0, 2.0]
        assert [f.connected for f in failures] == [False, False, False, True, False]
        assert failures[3].error == "connection lost"

    def test_ceiling_holds(self) -> None:
        script, clock = Script(*["fail"] * 6, "return"), FakeClock()
        failures: list[Failure] = []

        async def body() -> None:
            await loop(script, clock, failures)

        run(body)
        assert clock.slept == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]

    def test_an_unexpected_error_is_reported_in_its_except_clause_and_retried(self) -> None:
        script, clock = Script("boom", "return"), FakeClock()
        seen: list[tuple[Failure, BaseException | None]] = []

        def on_failure(f: Failure) -> None:
            seen.append((f, sys.exc_info()[1]))  # what log.exception would log

        async def body() -> None:
            await reconnecting(
                script,
                asyncio.Event(),
                Backoff(1.0, 8.0),
                on_failure,
                expected=(LinkError,),
                sleep=clock.sleep,
            )

        run(body)
        assert script.calls == 2
        ((failure, current),) = seen
        assert failure.expected is False
        assert failure.error == "RuntimeError: a bug"
        assert current is failure.exception

    def test_stop_during_a_backoff_returns_promptly(self) -> None:
        script = Script("fail")
        failures: list[Failure] = []

        async def body() -> None:
            stop = asyncio.Event()

            def on_failure(f: Failure) -> None:
                failures.append(f)
                stop.set()  # during the hour-long backoff that follows

            loop_ = asyncio.get_running_loop()
            started = loop_.time()
            await reconnecting(script, stop, Backoff(3600.0, 3600.0), on_failure, expected=(LinkError,))
            assert loop_.time() - started < 1.0

        run(body)
        assert script.calls == 1
        assert failures[0].retry_in == 3600.0

    def test_stop_during_an_attempt_ends_after_it(self) -> None:
        stop = asyncio.Event()
        calls = 0

        async def attempt(connected: Callable[[], None]) -> None:
            nonlocal calls
            calls += 1
            stop.set()
            raise LinkError("closed at stop")

        async def body() -> None:
            await reconnecting(attempt, stop, Backoff(3600.0, 3600.0), lambda f: None, expected=(LinkError,))

        run(body)
        assert calls == 1

    def test_cancellation_is_not_caught(self) -> None:
        async def forever(connected: Callable[[], None]) -> None:
            connected()
            await asyncio.Event().wait()

        async def body() -> None:
            task = asyncio.ensure_future(
                reconnecting(forever, asyncio.Event(), Backoff(1.0, 1.0), lambda f: None)
            )
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        run(body)
