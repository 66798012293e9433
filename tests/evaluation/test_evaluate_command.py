"""`arenad evaluate` end to end: report.json, report.md and PNG plots from a simulation, real logs, §10.6."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest

import arenad.cli
from arenad.cli import main

REALDATA = Path(__file__).resolve().parents[1] / "data" / "realdata"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PREDICTION_KEYS = ("log_loss", "auc", "brier", "ece", "accuracy")
PROBABILITY_LIKE = ("auc", "brier", "ece", "accuracy")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk of a valid PNG file."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    width, height = struct.unpack(">II", data[16:24])
    assert data[-12:-8] == b"\x00\x00\x00\x00" and data[-8:-4] == b"IEND"
    return width, height


def check_prediction_metrics(row: dict[str, Any]) -> None:
    for part in ("", "online_", "heldout_"):
        for key in PREDICTION_KEYS:
            value = row[part + key]
            if part == "heldout_" and row["heldout_n"] == 0:
                assert value is None
                continue
            assert value is not None and math.isfinite(value), (part + key, value)
            if key in PROBABILITY_LIKE:
                assert 0.0 <= value <= 1.0, (part + key, value)
            else:
                assert 0.0 < value < 5.0
    assert row["log_loss"] == row["online_log_loss"]
    assert row["n"] == row["online_n"]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("sim")
    args = [
        "evaluate", "--simulate", "--players", "12", "--days", "66", "--events", "1500", "--seed", "3",
        "--models", "adr,elo,glicko2,trueskill", "--block", "100", "--test-every", "3", "--out", str(out),
    ]  # fmt: skip
    assert main(args) == 0
    return out, json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


class TestSimulatedRun:
    """A tiny §10.4 run writes a sane report.json, a Markdown table and valid PNG plots."""

    def test_files(self, simulated: tuple[Path, dict[str, Any], str]) -> None:
        out, report, _ = simulated
        expected = {
            "rolling_log_loss.png", "block_auc.png", "calibration.png", "returning_player.png",
            "tier_shares.png", "convergence.png",
        }  # fmt: skip
        assert set(report["plots"]) == expected
        for name in expected:
            width, height = png_size(out / name)
            assert width >= 400 and height >= 300

    def test_counts_match_the_stream(self, simulated: tuple[Path, dict[str, Any], str]) -> None:
        _, report, _ = simulated
        # 1,500 background kills plus the injected ones: 20 back from the absence, 2 x 40 farming
        # and control kills, 20 bursts of 5; minus background kills of the returning player that
        # fell inside its return run.
        assert 1500 + 200 <= report["events"] <= 1500 + 220
        assert report["kills"] == report["events"] == report["predictions"]
        assert report["placements"] == report["pair_predictions"] == 0
        held = sum(((i // 100) + 1) % 3 == 0 for i in range(report["events"]))
        assert report["heldout_predictions"] == held
        for row in report["models"].values():
            assert row["n"] == report["events"]
            assert row["heldout_n"] == held

    def test_model_rows(self, simulated: tuple[Path, dict[str, Any], str]) -> None:
        _, report, _ = simulated
        assert set(report["models"]) == {"adr", "elo", "glicko2", "trueskill"}
        assert report["simulation"]["skipped"] == {}
        assert len(report["targets"]) == 15 and math.isclose(sum(report["targets"]), 1.0)
        for name, row in report["models"].items():
            check_prediction_metrics(row)
            assert row["auc"] > 0.6, name
            assert -1.0 <= row["spearman_end"] <= 1.0
            assert row["convergence_events"] is None or 0 < row["convergence_events"] <= report["events"]
            assert row["tier_changes_per_1k"] >= 0
            for key in ("farming_gain", "farming_control_gain", "absence_max_display_change"):
                assert math.isfinite(row[key]), (name, key)
            assert row["deferred_updates"] is False
        # ADR's §2.1 cooldown drops the repeats of every burst (what is left is the scale anchor's
        # shift when a recalibration falls on a repeat); the others learn them.
        assert abs(report["models"]["adr"]["burst_gain"]) < 1e-3
        assert report["models"]["elo"]["burst_gain"] > 0.05
        assert report["models"]["adr"]["tier_source"].startswith("ADR")

    def test_markdown(self, simulated: tuple[Path, dict[str, Any], str]) -> None:
        _, report, md = simulated
        assert md.startswith("# arenad evaluate")
        assert "| model | log loss | Brier | AUC | ECE |" in md
        for name in report["models"]:
            assert f"| {name} |" in md
        assert "## Scenarios" in md and "## Tiers" in md


class TestPlacementsAndOptions:
    """Simulated matches add pair predictions; plots are optional; bad combinations are refused."""

    def test_matches_add_placement_pairs(self, tmp_path: Path) -> None:
        args = [
            "evaluate", "--simulate", "--players", "12", "--days", "3", "--events", "600",
            "--scenarios", "none", "--matches", "120", "--models", "elo,trueskill",
            "--block", "100", "--test-every", "3", "--out", str(tmp_path), "--no-plots",
        ]  # fmt: skip
        assert main(args) == 0
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["kills"] == 600
        assert report["placements"] >= 30
        assert report["events"] == report["kills"] + report["placements"]
        assert report["predictions"] == report["kills"] + report["pair_predictions"]
        assert report["plots"] == []
        assert not list(tmp_path.glob("*.png"))
        for row in report["models"].values():
            assert row["n"] == report["predictions"]
        assert any("rate kills only" in note for note in report["notes"])

    def test_without_matplotlib_writes_json_and_md_and_says_so(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setattr(arenad.cli, "plots_available", lambda: False)
        args = [
            "evaluate", "--simulate", "--players", "10", "--days", "2", "--events", "300",
            "--models", "elo", "--out", str(tmp_path),
        ]  # fmt: skip
        assert main(args) == 0
        assert "pip install 'arenad[eval]'" in capsys.readouterr().out
        assert (tmp_path / "report.json").is_file() and (tmp_path / "report.md").is_file()
        assert not list(tmp_path.glob("*.png"))

    @pytest.mark.parametrize(
        "args",
        [
            ["--simulate", str(REALDATA / "openarena-1.log")],
            ["--scenarios", "jump,teleport"],
            ["--returning", str(REALDATA / "openarena-1.log")],
            ["--models", "elo,nope"],
        ],
    )
    def test_refused(self, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["evaluate", *args]) == 2
        assert capsys.readouterr().err.startswith("arenad evaluate:")


class TestRealLogs:
    """The real OpenArena logs: 1,291 + 696 player kills and the six final scoreboards of file 2."""

    def test_openarena(self, tmp_path: Path) -> None:
        files = [str(REALDATA / "openarena-1.log"), str(REALDATA / "openarena-2.log")]
        args = [
            "evaluate", "--format", "openarena", "--models", "adr,elo,glicko2,trueskill",
            "--block", "200", "--test-every", "4", "--out", str(tmp_path), "--no-plots", *files,
        ]  # fmt: skip
        assert main(args) == 0
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["kills"] == 1291 + 696
        assert report["placements"] == 6
        assert report["pair_predictions"] > 6 * 20  # 8 players a match, a few ties
        assert "simulation" not in report
        # File 2 starts before file 1 ends: read in time order. (Its own 6 late lines, a map clock
        # re-anchored behind the previous map's last kill, are kept in order by the feed now.)
        assert "1 events came earlier than the one before them; all were put in time order" in report["notes"]
        for name, row in report["models"].items():
            check_prediction_metrics(row)
            assert row["n"] == report["kills"] + report["pair_predictions"]
            assert row["auc"] > 0.75, name  # bots of skill 1-5: kills follow skill
            assert "convergence_events" not in row
        # 10 and 8 players: fewer than P_min = 20 active, so the quantile tiers never calibrate.
        assert report["models"]["elo"]["tier_changes_per_1k"] == 0.0
        assert report["models"]["elo"]["tier_share_error"] is None


class TestReturningCommand:
    """`arenad evaluate --returning` (§10.6) writes its table and plot."""

    def test_returning(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["evaluate", "--returning", "--models", "adr,elo,trueskill", "--out", str(tmp_path)]) == 0
        printed = capsys.readouterr().out
        assert "1166.94" in printed  # the paper's Elo figure, quoted next to ours
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["kills"] == 50 and report["fixed_opponent"] is False
        assert report["models"]["elo"]["initial"] == 1000.0
        assert report["models"]["adr"]["seeding"] == "adr"
        assert len(report["models"]["trueskill"]["ratings"]) == 50
        assert report["plots"] == ["returning_toy.png"]
        png_size(tmp_path / "returning_toy.png")

    def test_fixed_opponent_is_not_applicable_to_adr(self, tmp_path: Path) -> None:
        args = ["evaluate", "--returning", "--fixed-opponent", "--models", "adr,elo", "--out", str(tmp_path)]
        assert main([*args, "--no-plots"]) == 0
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["models"]["adr"] is None
        assert report["models"]["elo"]["increase"] == pytest.approx(1017.40, abs=0.01)  # K = 24
        assert "| adr | n/a |" in (tmp_path / "report.md").read_text()
