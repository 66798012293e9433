"""`python -m bench.scale --quick` stays runnable: every part finishes on small sizes and reports.

Speed is measured by the benchmark itself, never asserted here (the quick sizes are not the
targets' sizes: its "met?" column says so).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def test_scale_benchmark_quick() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--quick", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["quick"] is True
    assert "| target | arenad measured | reference measured | met? |" in proc.stdout
    assert "n/a (quick)" in proc.stdout  # small sizes are never reported as a target met

    (engine,) = report["engine"]
    assert engine["arenad"]["events_per_s"] > 0 and engine["arenad"]["rss_bytes_per_player"] > 0
    assert engine["openskill"]["events_per_s"] > 0
    assert report["openskill_memory"]["rss_bytes_per_player"] > 0

    e2e = report["e2e"]
    assert e2e["udp"]["events_per_s"] > 0 and e2e["udp"]["dropped"] == {}
    assert e2e["mqtt"]["events_per_s"] > 0  # mosquitto is installed wherever the suite runs
    assert e2e["mqtt_transport"]["events"] == e2e["mqtt"]["events"]

    q = report["query"]["arenad"]
    assert q["errors"] == 0 and q["get"]["n"] > 0 and q["top"]["n"] > 0
    assert all(x > 0 for x in (q["get"]["p50_ms"], q["top"]["p50_ms"], q["all"]["max_ms"]))
    if shutil.which("cc") or shutil.which("gcc"):  # scripts/test installs gcc: the C client runs
        assert report["query"]["client"] == "bench/qload.c"
    # Every event sent was either rated or dropped at a full queue (speed is not asserted).
    assert q["decided"] + q["dropped_events"] == q["events"] > 0

    restart = report["restart"]
    assert restart["arenad"]["players"] == restart["state"]["players"] == 20_000
    assert restart["arenad"]["replayed"] == restart["state"]["journal_records"] == 20_000
    assert 0 < restart["arenad"]["ready_s"] < 60

    if redis_up():
        red = engine["redis"]
        assert red["memory"]["members"] == 10_000
        assert red["pipelined"]["events_per_s"] > 0 and red["unpipelined"]["events_per_s"] > 0
        assert e2e["redis"]["events_per_s"] > 0
        assert report["query"]["redis"]["errors"] == 0
