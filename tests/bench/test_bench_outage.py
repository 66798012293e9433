"""`python -m bench.outage` stays runnable: a 6-second broker outage under a QoS 1 load loses
nothing, journals nothing twice, and shows in the MQTT metrics.

The soak itself (minutes of outage) is run by hand; see bench/README.md "Broker outage soak".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_outage_soak_short() -> None:
    if shutil.which("mosquitto") is None and not os.access("/usr/sbin/mosquitto", os.X_OK):
        pytest.fail("mosquitto is not installed (apt-get install mosquitto)", pytrace=False)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.outage", "--minutes", "0.1", "--before", "2", "--after", "2",
         "--rate", "100", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["ok"] is True and all(r["checks"].values()), r["checks"]
    assert r["events"] == r["published"] == r["journal_seq"] == r["journaled_records"] == 1000
    assert r["queued_while_broker_down"] > 0  # the outage really held messages back
    assert r["journaled_twice"] == r["published_missing"] == 0
    assert r["mqtt_disconnects_total"] >= 1
    assert 5.0 <= r["mqtt_disconnected_seconds_growth"] <= 6.0 + 2.0 + 2.0
