"""Group commit in a real daemon ([daemon] commit_interval): datagrams that arrive within the
window are journaled, fsynced and applied in one engine step; an event after a quiet spell is
taken at once; with the window off, each datagram that arrives on its own is its own step.
Steps are read from arenad_engine_step_events (its _count is steps, its _sum events)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon_harness import DaemonProcess


def kill(k: int) -> dict[str, Any]:
    return {"t": time.time() - 60 + k * 0.01, "attacker": f"a{k}", "victim": f"v{k}"}


def applied(n: int) -> Callable[[dict[str, Any]], bool]:
    return lambda s: bool(s["applied"] == n)


def steps(d: DaemonProcess) -> tuple[float, float]:
    """(engine steps, events they took) so far."""
    return d.metric("arenad_engine_step_events_count"), d.metric("arenad_engine_step_events_sum")


def start(tmp_path: Path, commit_interval: float) -> DaemonProcess:
    config = tmp_path / "arenad.toml"
    config.write_text(f"[daemon]\ncheckpoint_interval = 3600\ncommit_interval = {commit_interval}\n")
    return DaemonProcess(tmp_path / "state", config=config).start()


def test_datagrams_inside_the_window_share_one_step(tmp_path: Path) -> None:
    window = 1.0  # the largest the config allows
    d = start(tmp_path, window)
    try:
        # After a quiet spell (here: since start) the first event is taken at once, long before
        # the window would have passed.
        sent = time.monotonic()
        d.send_events([kill(0)])
        d.wait_for(lambda s: s["applied"] == 1, timeout=window - 0.3)
        assert time.monotonic() - sent < window
        assert steps(d) == (1.0, 1.0)
        # Ten datagrams right behind it, one event each, 30 ms apart (each would be a step of its
        # own without the window): the next step waits for the window and takes all ten (two
        # steps at most if sending them straddled the window's end).
        for k in range(1, 11):
            d.send_events([kill(k)])
            time.sleep(0.03)  # the point: datagrams spread over the window, not a synchronisation
        d.wait_for(lambda s: s["applied"] == 11, timeout=window + 10)
        n, events = steps(d)
        assert events == 11.0
        assert 2.0 <= n <= 3.0, n
        # Nothing was lost or applied twice on the way: every event is on the ladder once.
        assert sorted(row["player"] for row in d.ladder()) == sorted(
            [f"a{k}" for k in range(11)] + [f"v{k}" for k in range(11)]
        )
    finally:
        d.stop()


def test_without_a_window_each_lone_datagram_is_a_step(tmp_path: Path) -> None:
    d = start(tmp_path, 0.0)
    try:
        for k in range(6):
            d.send_events([kill(k)])
            d.wait_for(applied(k + 1))  # applied before the next is sent
        assert steps(d) == (6.0, 6.0)
    finally:
        d.stop()
