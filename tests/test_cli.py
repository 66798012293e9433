"""The ``arenad`` command as a real process: replay, simulate, generate, check-config."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest


def arenad(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "arenad", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"arenad {args} failed ({proc.returncode}): {proc.stderr}")
    return proc


def read_state(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class TestReplay:
    """`arenad replay` rates a file, writes the ladder best first and a one-line summary."""

    def test_replay_of_a_generated_stream(self, tmp_path: Path) -> None:
        events = tmp_path / "events.jsonl"
        arenad("generate", "--players", "40", "--days", "3", "--out", events)
        lines = [json.loads(x) for x in events.read_text().splitlines()]
        n_lines = len(lines)
        players = {e["attacker"] for e in lines} | {e["victim"] for e in lines}
        out = tmp_path / "state.jsonl"
        summary = json.loads(arenad("replay", "--out", out, events).stdout)
        assert summary["events"] == n_lines
        assert summary["applied"] + summary["filtered"] + sum(summary["rejected"].values()) == n_lines
        assert summary["players"] == len(players)
        assert summary["events_per_s"] > 0
        rows = read_state(out)
        assert {r["player"] for r in rows} == players
        assert [r["rank"] for r in rows] == list(range(1, len(players) + 1))
        assert all(a["mu"] >= b["mu"] for a, b in itertools.pairwise(rows))
        required = {"player", "mu", "sigma", "n", "streak", "trend", "pool", "tier", "rank"}
        assert required <= rows[0].keys()
        assert any(r["tier"] is not None for r in rows)

    def test_invalid_lines_are_counted_never_fatal(self, tmp_path: Path) -> None:
        f = tmp_path / "mixed.jsonl"
        lines = [
            {"t": 100, "attacker": "a", "victim": "b"},
            "not json",
            {"t": 101, "attacker": "a"},
            {"t": 102, "attacker": "a", "victim": "a"},
            {"t": "soon", "attacker": "a", "victim": "b"},
            {"t": 110, "attacker": "a", "victim": "b"},  # inside the 60 s cooldown
            {"t": 50, "attacker": "c", "victim": "d"},  # far older than the clock
            {"t": 200, "attacker": "b", "victim": "a"},
        ]
        f.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
        out = tmp_path / "state.jsonl"
        summary = json.loads(arenad("replay", "--out", out, f).stdout)
        assert summary["applied"] == 2
        assert summary["filtered"] == 1
        assert summary["rejected"] == {
            "malformed": 1,
            "missing_field": 1,
            "self_kill": 1,
            "bad_type": 1,
            "out_of_order": 1,
        }
        assert {r["player"] for r in read_state(out)} == {"a", "b"}

    def test_several_files_in_order_and_msgpack(self, tmp_path: Path) -> None:
        one = tmp_path / "one.msgpack"
        two = tmp_path / "two.jsonl"
        one.write_bytes(
            b"".join(msgpack.packb({"t": 10 + k, "attacker": f"p{k}", "victim": "q"}) for k in range(5))
        )
        two.write_text(json.dumps({"t": 20, "attacker": "q", "victim": "p0"}) + "\n")
        out = tmp_path / "s.jsonl"
        summary = json.loads(arenad("replay", "--format", "arenad", "--out", out, one, two).stdout)
        assert summary["applied"] == 6
        assert len(read_state(out)) == 6

    def test_config_changes_the_result_and_a_bad_one_fails_with_the_key(self, tmp_path: Path) -> None:
        events = tmp_path / "e.jsonl"
        events.write_text(json.dumps({"t": 1, "attacker": "a", "victim": "b"}) + "\n")
        good = tmp_path / "good.toml"
        good.write_text("[adr]\neta_min = 10\neta_max = 10\nc_loss = 1.0\n")
        out = tmp_path / "s.jsonl"
        arenad("replay", "--config", good, "--out", out, events)
        assert read_state(out)[0]["mu"] == pytest.approx(1005.0)
        bad = tmp_path / "bad.toml"
        bad.write_text("[adr]\nc_loss = 2\nsigma_min = -1\nbogus = 1\n")
        proc = arenad("replay", "--config", bad, "--out", out, events, check=False)
        assert proc.returncode == 2
        assert "adr.bogus" in proc.stderr

    def test_missing_input_file(self, tmp_path: Path) -> None:
        proc = arenad("replay", "--out", tmp_path / "s.jsonl", tmp_path / "nope.jsonl", check=False)
        assert proc.returncode == 1
        assert "nope.jsonl" in proc.stderr


class TestCheckConfig:
    """`arenad check-config` lists every problem as key, value, message."""

    def test_every_problem_is_listed(self, tmp_path: Path) -> None:
        bad = tmp_path / "bad.toml"
        bad.write_text('[adr]\nc_loss = 2\nsigma_min = "x"\n[nope]\n')
        proc = arenad("check-config", bad, check=False)
        assert proc.returncode == 2
        for key in ("adr.c_loss", "adr.sigma_min", "nope"):
            assert key in proc.stderr

    def test_broken_toml(self, tmp_path: Path) -> None:
        bad = tmp_path / "bad.toml"
        bad.write_text("[adr\n")
        proc = arenad("check-config", bad, check=False)
        assert proc.returncode == 2
        assert "not valid TOML" in proc.stderr

    def test_shipped_config_is_valid(self) -> None:
        shipped = Path(__file__).parents[1] / "config" / "arenad.toml"
        assert "ok" in arenad("check-config", shipped).stdout


class TestSimulateCommands:
    """The experiments print their tables."""

    def test_simulate_returning_table(self) -> None:
        out = arenad("simulate", "returning", "--kills", "20").stdout
        assert "largest single visible change" in out
        assert len([ln for ln in out.splitlines() if ln.strip()[:2].strip().isdigit()]) == 20

    def test_simulate_tiers_json(self) -> None:
        out = json.loads(arenad("simulate", "tiers", "--players", "60", "--days", "3", "--json").stdout)
        assert set(out) == {"configured", "anchor flipped"}
        assert out["configured"][-1]["active_mean_mu"] == pytest.approx(1000.0, abs=2.0)


class TestFeedReplay:
    """`arenad replay --format <feed>` and `arenad plugins`."""

    def test_plugins_lists_models_and_feeds(self) -> None:
        out = json.loads(arenad("plugins").stdout)
        assert "adr" in out["models"]
        assert {"arenad", "source"} <= set(out["feeds"])
        assert out["errors"] == []

    def test_source_log_replay_counts_kills_and_suicides(self, tmp_path: Path) -> None:
        lines = []
        for k in range(40):
            sec = k % 60
            a, v = ("Alice<2><[U:1:1001]><CT>", "Bob<3><[U:1:1002]><TERRORIST>")
            if k % 3 == 2:
                a, v = v, a
            lines.append(f'L 11/30/2026 - 12:{k // 60 + 10:02d}:{sec:02d}: "{a}" killed "{v}" with "ak47"')
        lines.append(
            'L 11/30/2026 - 12:11:00: "Bob<3><[U:1:1002]><TERRORIST>" committed suicide with "world"'
        )
        lines.append("L garbage")
        log = tmp_path / "server.log"
        log.write_text("\n".join(lines) + "\n")
        out = tmp_path / "s.jsonl"
        summary = json.loads(arenad("replay", "--format", "source", "--out", out, log).stdout)
        assert summary["kills"] == 40
        assert summary["suicides"] == 1
        assert summary["lines"] == 42
        assert summary["rejected"].get("malformed") == 1
        assert summary["applied"] + summary["filtered"] == 40
        assert {r["player"] for r in read_state(out)} == {"steam:[U:1:1001]", "steam:[U:1:1002]"}

    def test_unknown_format(self, tmp_path: Path) -> None:
        f = tmp_path / "x.log"
        f.write_text("x\n")
        proc = arenad("replay", "--format", "nope", "--out", tmp_path / "s", f, check=False)
        assert proc.returncode == 2
        assert "unknown format" in proc.stderr


REALDATA = Path(__file__).parent / "data" / "realdata"


class TestOpenArenaReplay:
    """`arenad replay --format openarena` on the real captures: exact counts, counted independently."""

    @pytest.mark.parametrize("name", ["openarena-1.log", "openarena-2.log"])
    def test_counts_match_an_independent_count(self, tmp_path: Path, name: str) -> None:
        import re

        raw = (REALDATA / name).read_text(encoding="utf-8", errors="replace")
        kills = [m.groups() for m in re.finditer(r"^\s*\d+:\d\d Kill: (\d+) (\d+) \d+:", raw, re.M)]
        world = sum(1 for k, _ in kills if k == "1022")
        suicides = sum(1 for k, v in kills if k == v)
        players = {
            m.group(1) for m in re.finditer(r"ClientUserinfoChanged: \d+ n\\([^\\]*)\\", raw)
        }  # every player here is a bot with a unique name
        out = tmp_path / "s.jsonl"
        summary = json.loads(
            arenad(
                "replay",
                "--format",
                "openarena",
                "--feed-option",
                "timescale=4",
                "--out",
                out,
                REALDATA / name,
            ).stdout
        )
        assert summary["lines"] == len(raw.splitlines())
        assert summary["kills"] == len(kills) - world - suicides
        assert summary["world_kills"] == world
        assert summary["suicides"] == suicides
        assert summary["players"] == len(players)
        assert (
            summary["applied"] + summary["filtered"] + sum(summary["rejected"].values()) == summary["kills"]
        )
        assert {r["player"] for r in read_state(out)} == {f"bot:{p}" for p in players}


class TestEvaluate:
    """`arenad evaluate` scores every requested model on the same walk-forward stream."""

    def test_simulated_stream_report(self, tmp_path: Path) -> None:
        proc = arenad(
            "evaluate", "--models", "adr,elo,glicko2,trueskill", "--players", "30", "--days", "2",
            "--block", "100", "--test-every", "4", "--out", tmp_path,
        )  # fmt: skip
        assert "online_log_loss" in proc.stdout
        report = json.loads((tmp_path / "report.json").read_text())
        assert set(report["models"]) == {"adr", "elo", "glicko2", "trueskill"}
        for metrics in report["models"].values():
            assert 0.0 < metrics["online_log_loss"] < 1.5
            assert 0.0 <= metrics["online_auc"] <= 1.0
            assert metrics["heldout_n"] > 0

    def test_events_file_and_unknown_model(self, tmp_path: Path) -> None:
        events = tmp_path / "e.jsonl"
        arenad("generate", "--players", "20", "--days", "1", "--out", events)
        out = arenad("evaluate", "--models", "elo", "--block", "50", "--test-every", "3", events).stdout
        assert "elo" in out
        proc = arenad("evaluate", "--models", "nope", events, check=False)
        assert proc.returncode == 2
        assert "unknown model" in proc.stderr
