"""`python -m bench.models` stays runnable: a tiny run covers every model and both packages.

Speed is measured by the benchmark itself, never asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from arenad.models import BUILTIN_MODELS, rates_matches

ROOT = Path(__file__).resolve().parents[2]


class TestModelsBenchmark:
    """A tiny run prints the table and a JSON line with a row for every model and package."""

    def test_tiny_run(self) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.models", "--quick", "--kills", "600", "--matches", "30",
             "--players", "200"],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = proc.stdout.strip().splitlines()
        report = json.loads(lines[-1])
        assert (report["kills"], report["matches"], report["repeat"]) == (600, 30, 1)
        kills, matches = report["results"]["kills"], report["results"]["matches"]
        packages = {"openskill package: PlackettLuce().rate", "trueskill package: rate_1vs1"}
        assert set(kills) == set(BUILTIN_MODELS) | packages
        assert all(row["updates_per_s"] > 0 for row in kills.values())
        match_models = {n for n, f in BUILTIN_MODELS.items() if rates_matches(f())}
        assert set(matches) == match_models | {
            "openskill package: PlackettLuce().rate",
            "trueskill package: TrueSkill().rate",
        }
        assert all(row["matches_per_s"] > 0 for row in matches.values())
        # The arenad openskill model calls the package: the very same ratings.
        assert kills["openskill package: PlackettLuce().rate"]["largest_mu_gap"] == 0.0
        assert matches["openskill package: PlackettLuce().rate"]["largest_mu_gap"] == 0.0
        # The trueskill package differs by its approximate erfc and early stop only.
        assert kills["trueskill package: rate_1vs1"]["largest_mu_gap"] < 1e-3
        assert matches["trueskill package: TrueSkill().rate"]["largest_mu_gap"] < 1e-3
        assert "| model | updates/s |" in proc.stdout
