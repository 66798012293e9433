"""``--config FILE`` of ``arenad evaluate``, ``simulate`` and ``replay``: its ``[adr]`` is what rates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arenad.cli import main

#: A small simulated stream with a held-out block (20 players, 3 days: 840 kills).
STREAM = ["--players", "20", "--days", "3", "--block", "100", "--test-every", "3", "--no-plots"]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def evaluate(tmp_path: Path, *args: str | Path) -> dict[str, dict[str, Any]]:
    out = tmp_path / f"report-{len(list(tmp_path.iterdir()))}"
    assert main(["evaluate", *map(str, args), *STREAM, "--out", str(out)]) == 0
    models: dict[str, dict[str, Any]] = json.loads((out / "report.json").read_text())["models"]
    return models


def scores(row: dict[str, Any]) -> dict[str, Any]:
    """Every number a model row holds (the name-free part, comparable across models)."""
    return {k: v for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)}


class TestEvaluateConfig:
    """``arenad evaluate --config FILE`` scores FILE's ``[adr]`` as the model ``adr``."""

    def test_every_bad_key_is_named_and_the_exit_is_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        bad = write(tmp_path, "bad.toml", "[adr]\ntheta = 300\nbogus = 1\nc_loss = 3\n")
        assert main(["evaluate", "--config", str(bad), *STREAM]) == 2
        err = capsys.readouterr().err
        assert "adr.bogus" in err and "unknown key" in err
        assert "adr.c_loss" in err and "adr.theta" not in err

    def test_a_parameter_changes_the_result(self, tmp_path: Path) -> None:
        theta = write(tmp_path, "theta.toml", "[adr]\ntheta = 300\n")
        default = evaluate(tmp_path, "--models", "adr")["adr"]
        configured = evaluate(tmp_path, "--models", "adr", "--config", theta)["adr"]
        assert configured["heldout_log_loss"] != default["heldout_log_loss"]
        assert configured["online_log_loss"] != default["online_log_loss"]

    def test_preset_paper_is_the_model_adr_paper(self, tmp_path: Path) -> None:
        paper = write(tmp_path, "paper.toml", '[adr]\npreset = "paper"\n')
        rows = evaluate(tmp_path, "--models", "adr,adr-paper", "--config", paper)
        assert scores(rows["adr"]) == scores(rows["adr-paper"])
        default = evaluate(tmp_path, "--models", "adr")["adr"]
        assert scores(default) != scores(rows["adr"])

    def test_the_primary_variant_is_folded_in(self, tmp_path: Path) -> None:
        printed = write(tmp_path, "printed.toml", '[models]\nprimary = "adr-printed"\n')
        rows = evaluate(tmp_path, "--models", "adr,adr-printed", "--config", printed)
        assert scores(rows["adr"]) == scores(rows["adr-printed"])

    def test_without_adr_in_the_list_a_note_says_so(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        theta = write(tmp_path, "theta.toml", "[adr]\ntheta = 300\n")
        assert main(["evaluate", "--models", "elo", "--config", str(theta), *STREAM]) == 0
        assert "no adr in --models" in capsys.readouterr().out

    def test_help_says_what_the_config_replaces(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit):
            main(["evaluate", "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--config FILE" in text and "model named adr" in text


class TestSimulateAndReplayConfig:
    """``simulate`` and ``replay`` rate with ``--config``'s ``[adr]`` and refuse a bad one."""

    def test_simulate_refuses_a_bad_key(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        bad = write(tmp_path, "bad.toml", "[adr]\nbogus = 1\n")
        assert main(["simulate", "returning", "--config", str(bad), "--kills", "3"]) == 2
        assert "adr.bogus" in capsys.readouterr().err

    def test_simulate_rates_with_the_config(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        def run(*extra: str) -> list[dict[str, Any]]:
            assert main(["simulate", "returning", "--kills", "5", "--json", *extra]) == 0
            rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
            return rows

        # cap_decay (the default) caps the whole visible change of an event, decay included.
        capped = write(tmp_path, "capped.toml", "[adr]\ndelta_max = 20\n")
        configured = run("--config", str(capped))
        assert configured != run()
        assert max(abs(r["delta_mu"]) for r in configured) <= 20.0 + 1e-9

    def test_replay_with_preset_paper(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        events = tmp_path / "e.jsonl"
        events.write_text(
            "".join(json.dumps({"t": 100 + 61 * k, "attacker": "a", "victim": "b"}) + "\n" for k in range(5))
        )
        paper = write(tmp_path, "paper.toml", '[adr]\npreset = "paper"\n')

        def mu_of_a(*extra: str) -> float:
            out = tmp_path / "state.jsonl"
            assert main(["replay", *extra, "--out", str(out), str(events)]) == 0
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            return float(next(r["mu"] for r in rows if r["player"] == "a"))

        assert mu_of_a("--config", str(paper)) != mu_of_a()
