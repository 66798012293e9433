"""Replay the golden vectors (tests/golden/vectors.json) through ``arenad.core.engine.Engine``.

The vectors are written by tests/golden/generate.py from the plain reference implementation
(tests/reference_adr.py). After every step the engine's outcome, the visible state of every
tracked player and the visible tier boundaries must equal the vector (floats to 1e-9 absolute).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arenad.core.engine import Engine
from arenad.core.params import ADRParams

TESTS = Path(__file__).resolve().parents[1]
GOLDEN = TESTS / "golden"
ABS_TOL = 1e-9
FLOAT_FIELDS = ("mu", "sigma", "trend", "pool")
EXACT_FIELDS = ("streak", "n", "tier")


def _load() -> dict[str, dict[str, Any]]:
    data = json.loads((GOLDEN / "vectors.json").read_text(encoding="utf-8"))
    return {v["name"]: v for v in data["vectors"]}


VECTORS = _load()


def _close(actual: float, expected: float) -> bool:
    return math.isclose(actual, expected, rel_tol=0.0, abs_tol=ABS_TOL)


def mismatches(vector: dict[str, Any]) -> list[str]:
    """Replay ``vector`` through a fresh Engine; one line per field that differs."""
    engine = Engine(ADRParams.from_mapping({"preset": "paper", **vector["params"]}))
    out: list[str] = []
    for number, step in enumerate(vector["steps"], start=1):
        if "kill" in step:
            attacker, victim, t = step["kill"]
            outcome = engine.apply(attacker, victim, float(t))
            where = f"step {number} kill {attacker}->{victim} at t={t}"
            if outcome.name.lower() != step["outcome"]:
                out.append(f"{where}: outcome {outcome.name.lower()} != {step['outcome']}")
        else:
            engine.recalibrate(float(step["recalibrate"]))
            where = f"step {number} recalibrate at t={step['recalibrate']}"
        expected_players: dict[str, dict[str, Any]] = step["players"]
        if sorted(engine.names) != sorted(expected_players):
            out.append(f"{where}: players {sorted(engine.names)} != {sorted(expected_players)}")
        for name, want in expected_players.items():
            if name not in engine.ids:
                continue
            view = engine.view(engine.ids[name])
            for f in FLOAT_FIELDS:
                got = getattr(view, f)
                if not _close(got, want[f]):
                    out.append(f"{where}: {name}.{f} = {got!r}, expected {want[f]!r}")
            for f in EXACT_FIELDS:
                got = getattr(view, f)
                if got != want[f]:
                    out.append(f"{where}: {name}.{f} = {got!r}, expected {want[f]!r}")
        bounds = engine.tier_info().boundaries
        if len(bounds) != len(step["boundaries"]) or not all(
            _close(g, w) for g, w in zip(bounds, step["boundaries"], strict=False)
        ):
            out.append(f"{where}: boundaries {list(bounds)} != {step['boundaries']}")
    return out


def assert_replays(name: str) -> None:
    vector = VECTORS[name]
    assert vector["steps"], f"vector {name} has no steps"
    problems = mismatches(vector)
    assert not problems, f"{name}: {len(problems)} mismatches:\n" + "\n".join(problems[:25])


class TestFirstKill:
    """(a) One kill between two new players equals the hand derivation and the engine."""

    def test_engine_matches_vector(self) -> None:
        assert_replays("a_first_kill")

    def test_vector_matches_hand_derivation(self) -> None:
        # The closed form of the generator's docstring, from the §9 defaults.
        p = ADRParams.paper()
        step = VECTORS["a_first_kill"]["steps"][0]
        trace = step["trace"]
        d = p.theta + p.lambda_ * p.sigma0  # §3.2 with two players at sigma0
        prob = 0.5  # §3.1 with equal ratings
        eta_a = p.eta_min + (p.eta_max - p.eta_min) * (2 * p.sigma0 * p.sigma_peak) / (
            p.sigma0**2 + p.sigma_peak**2
        )
        eta_b = p.c_loss * eta_a
        assert d == 575.0
        assert math.isclose(eta_a, 4 + 36 * 140000 / 162500, abs_tol=1e-12)
        assert math.isclose(trace["D"], d, abs_tol=1e-12)
        assert math.isclose(trace["P_ab"], prob, abs_tol=1e-12)
        assert math.isclose(trace["eta_a"], eta_a, abs_tol=1e-12)
        assert math.isclose(trace["eta_b"], eta_b, abs_tol=1e-12)
        alice = step["players"]["alice"]
        bob = step["players"]["bob"]
        d_a = eta_a * (1 - prob)
        d_b = -eta_b * (1 - prob)
        assert math.isclose(alice["mu"], 1000 + d_a, abs_tol=1e-9)
        assert math.isclose(bob["mu"], 1000 + d_b, abs_tol=1e-9)
        for who, change in ((alice, d_a), (bob, d_b)):
            sigma = 1 / math.sqrt(1 / (350**2 + change**2) + 1 / 100**2)
            assert math.isclose(who["sigma"], sigma, abs_tol=1e-9)
            assert who["n"] == 1
            assert who["pool"] == 0.0
            assert who["tier"] is None
        assert (alice["streak"], bob["streak"]) == (1, 0)
        assert math.isclose(alice["trend"], 0.1, abs_tol=1e-12)
        assert math.isclose(bob["trend"], -0.1, abs_tol=1e-12)


class TestDecay:
    """(b) A player back after 10 days decays towards the mean of the active players."""

    def test_engine_matches_vector(self) -> None:
        assert_replays("b_decay")

    def test_vector_decays_alice_towards_active_mean(self) -> None:
        last = VECTORS["b_decay"]["steps"][-1]
        before = VECTORS["b_decay"]["steps"][-2]["players"]
        trace = last["trace"]
        mean = (before["carol"]["mu"] + before["dave"]["mu"]) / 2  # only carol and dave are active
        assert math.isclose(trace["mean_active"], mean, abs_tol=1e-9)
        alice = before["alice"]
        assert math.isclose(trace["mu_a"], mean + (alice["mu"] - mean) * math.exp(-10 / 30), abs_tol=1e-9)
        assert math.isclose(trace["sigma_a"], alice["sigma"] + 5 * 10, abs_tol=1e-9)


class TestReturning:
    """(c) Players absent for more than t_return days go through the §8.2 weight and §8.3 pool."""

    def test_engine_matches_vector(self) -> None:
        assert_replays("c_returning")

    def test_engine_matches_pool_drain_after_returning_phase(self) -> None:
        assert_replays("c2_returning_pool_drain")

    def test_engine_matches_literal_pool(self) -> None:
        assert_replays("c3_returning_literal_pool")

    def test_vector_pools_the_returning_kill(self) -> None:
        step = VECTORS["c_returning"]["steps"][1]
        trace = step["trace"]
        assert trace["returning_a"] and trace["returning_b"]
        r = 350 / (trace["sigma_a"] + 350)  # §8.2
        eff = trace["raw_a"] * r
        assert math.isclose(step["players"]["alice"]["pool"], 0.7 * eff, abs_tol=1e-9)
        assert math.isclose(trace["visible_a"], 0.3 * eff, abs_tol=1e-9)


class TestCap:
    """(d) The visible change is capped at delta_max (§8.4), then clipped to mu_max (§4.2)."""

    def test_engine_matches_cap(self) -> None:
        assert_replays("d_capped")

    def test_engine_matches_clip_at_mu_max(self) -> None:
        assert_replays("d2_clipped_at_mu_max")

    def test_vector_hits_the_cap(self) -> None:
        players = VECTORS["d_capped"]["steps"][0]["players"]
        assert players["alice"]["mu"] == 1060.0
        assert players["bob"]["mu"] == 940.0
        assert VECTORS["d2_clipped_at_mu_max"]["steps"][0]["players"]["alice"]["mu"] == 1030.0


class TestCooldown:
    """(e) A repeat kill inside the cooldown of the last counted kill is filtered and changes nothing."""

    def test_engine_matches_vector(self) -> None:
        assert_replays("e_cooldown")

    def test_vector_filters_only_inside_cooldown(self) -> None:
        outcomes = [s["outcome"] for s in VECTORS["e_cooldown"]["steps"]]
        assert outcomes == [
            "applied",
            "filtered",
            "applied",
            "filtered",
            "applied",
            "filtered",
            "filtered",
            "applied",
        ]


class TestPrintedLoserRule:
    """(f) With loser_rule "printed" the victim loses eta_b * P_ab."""

    def test_engine_matches_vector(self) -> None:
        assert_replays("f_printed_loser_rule")

    def test_vector_uses_printed_rule(self) -> None:
        trace = VECTORS["f_printed_loser_rule"]["steps"][1]["trace"]
        assert trace["P_ab"] > 0.5
        assert math.isclose(trace["raw_b"], -trace["eta_b"] * trace["P_ab"], abs_tol=1e-12)


class TestRejections:
    """Self-kills and events older than late_tolerance are rejected; slightly late ones apply at the clock."""

    def test_engine_matches_vector(self) -> None:
        assert_replays("g_rejections")


class TestTiers:
    """§6.1 placement, §6.4 accumulators, the scale anchor and §6.3 calibration match the reference."""

    def test_engine_matches_placement_and_accumulators(self) -> None:
        assert_replays("h_placement_and_tiers")

    def test_engine_matches_anchor_then_placement(self) -> None:
        assert_replays("i_anchor_then_placement")

    def test_engine_matches_calibration(self) -> None:
        assert_replays("j_calibration")

    def test_engine_matches_calibration_with_anchor(self) -> None:
        assert_replays("j2_calibration_with_anchor")


class TestRecalibration:
    """A recalibration at a time after the clock forgets nothing an earlier event still needs."""

    def test_engine_matches_cooldown_after_recalibration(self) -> None:
        assert_replays("k_recalibration_keeps_history")


class TestVectorsFile:
    """vectors.json is complete and exactly what tests/golden/generate.py writes today."""

    @pytest.mark.parametrize(
        "name",
        ["a_first_kill", "b_decay", "c_returning", "d_capped", "e_cooldown", "f_printed_loser_rule"],
    )
    def test_required_scenario_present(self, name: str) -> None:
        assert name in VECTORS

    def test_every_vector_is_replayed_by_a_test(self) -> None:
        source = Path(__file__).read_text(encoding="utf-8")
        assert all(f'assert_replays("{name}")' in source for name in VECTORS)

    def test_generator_output_is_up_to_date(self) -> None:
        result = subprocess.run(
            [sys.executable, str(GOLDEN / "generate.py"), "--check"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
