"""`python -m bench.web_daemon` stays runnable: a real daemon, tiny sizes, every figure reported.

Speed is measured by the benchmark itself, never asserted here (the tiny run's verdict says
"n/a (small run)").
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.web_daemon import HTTP_KINDS, verdict

ROOT = Path(__file__).resolve().parents[2]

ARGS = ["--players", "5000", "--seconds", "2", "--ingest", "2000", "--rps", "100"]


def test_web_daemon_benchmark_tiny(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.web_daemon", *ARGS, "--json", "--latencies", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| target | measured | met? |" in proc.stdout and "n/a (small run)" in proc.stdout
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["players"] == report["daemon_players_end"] == 5000
    assert "HLstatsX" in proc.stdout
    assert "readers' CPU per answered request: " in proc.stdout  # one reader by default

    phases = report["phases"]
    for name in ("ingest_idle", "ingest_max_idle", "web", "query"):
        assert phases[name]["events_per_s"] > 0, name
        assert phases[name]["sent_by_sender"] > 0, name

    web = phases["web"]
    load = web["load"]
    assert load["error_count"] == 0, load["errors"]
    assert set(load["latency"]) == set(HTTP_KINDS) == set(load["latency_from_due"])
    assert all(s["n"] > 0 and 0 < s["p50_ms"] <= s["p99_ms"] for s in load["latency"].values())
    # Every request answered 200, as the client saw it and as the daemon counted it.
    assert load["statuses"] == {"200": load["sent"]}
    assert web["server_statuses"] == {"200": load["sent"]}
    assert {
        "/api/v1/players/{player}",
        "/api/v1/players",
        "/api/v1/leaderboard",
        "/players/{player}",
        "/api/v1/players/{player}/history",
    } <= set(web["server"])

    # --latencies: every request of the phase, in the order due, as the summary counted them.
    with (tmp_path / "web.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == load["due"]
    assert {r["kind"] for r in rows} == set(HTTP_KINDS)
    answered = [r for r in rows if r["client_ms"]]
    assert len(answered) == load["sent"] and all(r["status"] == "200" for r in answered)
    slowest = max(float(r["client_ms"]) for r in answered)
    assert abs(slowest - max(s["max_ms"] for s in load["latency"].values())) < 0.01
    assert (tmp_path / "query.csv").exists()

    ref = phases["query"]["load"]
    assert ref["error_count"] == 0 and set(ref["latency"]) == {"query get", "query top 100"}
    assert ref["statuses"] == {"200": ref["sent"]}

    v = report["verdict"]
    assert v["at_size"] is False
    for key in ("api_p99_ms_worst", "page_p99_ms", "ingest_idle_max_per_s", "ingest_with_web_ratio"):
        assert v[key] is not None and v[key] > 0, key


def phases(idle: float, asked: float, web: float, dropped: dict[str, int]) -> dict[str, Any]:
    lat = {k: {"p99_ms": 1.0} for k in HTTP_KINDS}
    return {
        "ingest_idle": {"events_per_s": idle, "ingest_target": asked},
        "ingest_max_idle": {"events_per_s": 150_000.0},
        "web": {"events_per_s": web, "dropped": dropped, "load": {"latency": lat}},
    }


def test_no_regression_is_judged_against_the_rate_offered() -> None:
    """An idle window that took more than was asked (the sender catching up on its lead-in)
    is not the bar: the web phase must keep the asked rate, and drop nothing."""
    assert verdict(phases(54_800.0, 50_000.0, 49_990.0, {}), at_size=True)["no_ingest_regression"]
    assert verdict(phases(54_800.0, 50_000.0, 49_990.0, {}), at_size=True)["ingest_with_web_ratio"] == 1.0
    assert not verdict(phases(54_800.0, 50_000.0, 48_000.0, {}), at_size=True)["no_ingest_regression"]
    assert not verdict(phases(50_000.0, 50_000.0, 50_000.0, {"udp": 50}), at_size=True)[
        "no_ingest_regression"
    ]
    # An idle window below the asked rate stays the bar.
    assert verdict(phases(40_000.0, 50_000.0, 39_500.0, {}), at_size=True)["no_ingest_regression"]
