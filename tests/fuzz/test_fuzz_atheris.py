"""Every atheris target runs a bounded libFuzzer campaign cleanly, so CI fuzzes a little each run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TARGETS = ("msgpack", "json", "openarena", "source", "source_udp", "query")
SCRIPT = Path(__file__).resolve().parent / "atheris_targets.py"
RUNS = 2000


class TestAtherisTargets:
    """Each target: RUNS coverage-guided inputs from its seed corpus, exit code 0."""

    @pytest.mark.parametrize("target", TARGETS)
    def test_bounded_campaign(self, target: str, tmp_path: Path) -> None:
        pytest.importorskip("atheris")
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), target, "--runs", str(RUNS), "--new-corpus", str(tmp_path),
             f"-artifact_prefix={tmp_path}/", "-seed=1"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"Done {RUNS} runs" in proc.stderr
