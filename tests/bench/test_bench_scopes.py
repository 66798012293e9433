"""`python -m bench.scopes` stays runnable: both parts finish on a tiny input and print their JSON.

Speed is measured by the benchmark itself, never asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_scopes_benchmark() -> None:
    proc = subprocess.run(
        [
            sys.executable, "-m", "bench.scopes", "--players", "1000", "--events", "8000",
            "--recompute-events", "20000", "--recompute-players", "500", "--segments", "4", "--json",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "Recompute: 20,000 kills" in proc.stdout

    feeds = {r["setup"]: r for r in out["feed"]}
    assert set(feeds) == {"engine", "1", "3", "10"}
    for setup, engines in (("engine", 1), ("1", 1), ("3", 3), ("10", 10)):
        r = feeds[setup]
        assert r["engines"] == engines
        assert r["engine_feeds"] == engines * 8000  # every kill reached every scope
        assert r["events_per_s"] > 0 and r["latency"]["p99_us"] > 0
        assert r["tracked_per_engine"] == [1000] * engines
        recal = r["recalibration_kills"]
        assert recal["count"] == recal["global_recalibrations"] > 0
    # The same stream everywhere: the global ladder decides every kill the same way.
    assert len({json.dumps(r["global"]) for r in feeds.values()}) == 1

    rec = out["recompute"]
    assert rec["state"]["segments"] == 4 and rec["state"]["segments_archived"] == 3
    assert 0 < rec["state"]["archive_bytes"] < rec["state"]["archived_raw_bytes"]
    assert rec["decode"]["records"] == 20000
    kinds = [r["kinds"] for r in rec["rebuilds"]]
    assert kinds == [["global"], ["global", "server"]]
    for r in rec["rebuilds"]:
        g = r["global"]
        assert g["applied"] + g["filtered"] + g["rejected"] == 20000
        assert r["partial"]["base_seq"] == 10000 and r["partial"]["records"] == 10000
        assert r["partial"]["identical_to_full"] is True
