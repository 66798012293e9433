"""`python -m bench.web_framing` stays runnable and both framings produce the same answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.web_framing import PLAYER, with_h11, with_llhttp

ROOT = Path(__file__).resolve().parents[2]


def test_both_frame_the_same_answer() -> None:
    body = b'{"player":"somebody123"}'
    a, b = with_h11()(PLAYER, body), with_llhttp()(PLAYER, body)
    assert a.split(b"\r\n\r\n", 1)[1] == b.split(b"\r\n\r\n", 1)[1] == body
    assert a.startswith(b"HTTP/1.1 200 ") and b.startswith(b"HTTP/1.1 200 ")


def test_runs_tiny() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.web_framing", "--requests", "20", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(v["h11"] > 0 and v["llhttp"] > 0 for v in report["us"].values())
