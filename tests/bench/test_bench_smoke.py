"""The benchmarks stay runnable: each command finishes on a tiny input and prints its JSON line.

Speed is measured by the benchmarks themselves, never asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


class TestBenchmarksRun:
    """`python -m bench`, `bench.feeds` and `bench.daemon` run end to end on small inputs."""

    def test_core_benchmark(self) -> None:
        out = run("bench", "--players", "2000", "--events", "5000", "--no-trace", "--in-process")
        results = out["results"]
        assert isinstance(results, list) and results[0]["players"] == 2000
        assert results[0]["throughput"]["events_per_s"] > 0

    def test_replay_benchmark(self) -> None:
        """bench.replay: the batch replay, the batched tuning evaluation and Engine.feed beside
        their references, and the batch replay reaching the per-event path's state."""
        out = run("bench.replay", "--players", "2000", "--events", "20000", "--json")
        replay = out["replay"]
        assert isinstance(replay, dict) and replay["same_state"] is True
        events = out["events"]
        assert isinstance(events, int) and events > 20000  # the warm-up history comes first
        feed = out["feed"]
        assert isinstance(feed, dict) and feed["openskill_rate_per_s"] > 0

    def test_replay_instruction_count_parts(self) -> None:
        """bench.replay_count (what callgrind runs): every part on a tiny stream."""
        for part in ("replay", "tune", "feed", "none"):
            proc = subprocess.run(
                [sys.executable, "-m", "bench.replay_count", part, "--kills", "2000"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert proc.stderr.startswith("seconds ")

    def test_feed_benchmark(self) -> None:
        out = run("bench.feeds", "--lines", "5000", "--kills", "2000", "--repeat", "1")
        formats = out["formats"]
        assert isinstance(formats, dict) and set(formats) == {"openarena", "source", "arenad"}
        assert all(f["kills"] > 0 for f in formats.values())

    def test_daemon_benchmark(self) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.daemon", "--players", "500", "--events", "2000"],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        assert rows[0]["players"] == 500
        assert rows[0]["events_per_s"] > 0
        assert rows[0]["dropped"] == {}
