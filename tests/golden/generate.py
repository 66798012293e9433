"""Write tests/golden/vectors.json from the plain reference implementation (tests/reference_adr.py).

Run from the repository root::

    .venv/bin/python tests/golden/generate.py           # (re)write vectors.json
    .venv/bin/python tests/golden/generate.py --check   # exit 1 if vectors.json is stale

Each vector holds the parameter overrides (``[adr]`` TOML keys), the steps (a kill
``[attacker, victim, t]`` or a ``recalibrate`` time) and, after every step, the expected outcome,
the visible state of every tracked player (mu, sigma, streak, trend, pool, n, tier) and the
visible tier boundaries B_1..B_14. Applied kills also carry the reference's intermediate
quantities (``trace``) so that a human can follow them.

Hand derivation of scenario (a), ``a_first_kill`` (default §9 parameters; alice kills bob at t=0)
---------------------------------------------------------------------------------------------------
Both players are new: mu = mu0 = 1000, sigma = sigma0 = 350, streak 0, trend 0, pool 0, n 0.
Nobody is active, so the §5 target is the mean of all tracked players (1000), but n = 0 means
there is no decay and neither player is returning.

* §3.2  D = theta + lambda * mean sigma = 400 + 0.5 * 350 = 575.
* §3.1  P_ab = 1/2 + atan((1000 - 1000)/575)/pi = 0.5.
* §8.1  base = eta_min + (eta_max - eta_min) * 2 sigma sigma_peak / (sigma^2 + sigma_peak^2)
              = 4 + 36 * (2*350*200) / (350^2 + 200^2) = 4 + 36 * 140000/162500
              = 4 + 36 * 0.861538... = 35.015384615...
  streak factor 1 + 0.15*0 = 1, volatility 1/(1 + 0.3*0/20) = 1, trend 1 + 0.3*max(0, 0) = 1, so
  eta_a = 35.015384615..., eta_b = c_loss * 35.015384615... = 0.8 * ... = 28.012307692...
* §4.2  (corrected victim rule) delta_a = eta_a (1 - P) = 17.507692307...,
        delta_b = -eta_b (1 - P) = -14.006153846...; no pool, |delta| < delta_max = 60, no clip.
        mu_a = 1017.507692307..., mu_b = 985.993846153...
* §4.3  sigma_a = 1 / sqrt(1/(350^2 + 17.5077^2) + 1/100^2) = 96.16145...,
        sigma_b = 1 / sqrt(1/(350^2 + 14.0062^2) + 1/100^2) = 96.15820...
* §4.4  trend_a = 0.8*0 + 0.2*(1 - 0.5) = 0.1, trend_b = 0.8*0 + 0.2*(0.5 - 1) = -0.1.
* §4.5  streak_a = 1, streak_b = 0, n = 1 each; no tier (n < n_min = 15).

tests/core/test_golden.py recomputes these numbers in closed form and checks them against the
vector, so the reference itself is pinned to this derivation.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for reference_adr

from reference_adr import APPLIED, ReferenceADR

from arenad.core.params import ADRParams

DAY = 86400.0
OUT = Path(__file__).with_name("vectors.json")

Step = tuple[str, str, float] | float  # a kill, or a recalibration time
Scenario = tuple[str, str, dict[str, Any], list[Step]]


def _alternating(a: str, b: str, start: float, count: int, spacing: float = 120.0) -> list[Step]:
    """``count`` kills between a and b, a first, ``spacing`` seconds apart (outside the cooldown)."""
    out: list[Step] = []
    for k in range(count):
        killer, victim = (a, b) if k % 2 == 0 else (b, a)
        out.append((killer, victim, start + k * spacing))
    return out


def scenarios() -> list[Scenario]:
    """(name, description, [adr] overrides, steps)."""
    return [
        (
            "a_first_kill",
            "(a) one kill between two new players, default parameters; see the module docstring",
            {},
            [("alice", "bob", 0.0)],
        ),
        (
            "b_decay",
            "(b) alice and bob play once; carol and dave become active (6 events within 7 days); "
            "after 10 days alice kills carol: alice decays towards the active mean of carol and dave",
            {},
            [
                ("alice", "bob", 0.0),
                *_alternating("carol", "dave", 9 * DAY, 6),
                ("alice", "carol", 10 * DAY),
            ],
        ),
        (
            "c_returning",
            "(c) alice and bob meet again after 61 days (> t_return = 60): both decay, both are "
            "returning; §8.2 weight and §8.3 pool (transfer release) for the next events",
            {},
            [
                ("alice", "bob", 0.0),
                ("alice", "bob", 61 * DAY),
                ("bob", "alice", 61 * DAY + 120),
                ("alice", "bob", 61 * DAY + 240),
            ],
        ),
        (
            "c2_returning_pool_drain",
            "(c) returning phase of 2 events (return_events = 2), then the pool drains at "
            "lambda_pool per event until the remainder drops under 0.01 and is released whole",
            {"return_events": 2},
            [("alice", "bob", 0.0), *_alternating("alice", "bob", 61 * DAY, 34)],
        ),
        (
            "c3_returning_literal_pool",
            "(c) pool_release = literal: while returning the pool is never drained; after the "
            "returning phase (return_events = 2) it stays frozen",
            {"return_events": 2, "pool_release": "literal"},
            [("alice", "bob", 0.0), *_alternating("alice", "bob", 61 * DAY, 5)],
        ),
        (
            "d_capped",
            "(d) eta_max = 500: both raw changes exceed delta_max = 60 and are capped (§8.4)",
            {"eta_max": 500.0},
            [("alice", "bob", 0.0), ("alice", "bob", 120.0)],
        ),
        (
            "d2_clipped_at_mu_max",
            "(d) eta_max = 500 and mu_max = 1030: capped to +60, then clipped to mu_max (§4.2)",
            {"eta_max": 500.0, "mu_max": 1030.0},
            [("alice", "bob", 0.0), ("alice", "bob", 120.0)],
        ),
        (
            "e_cooldown",
            "(e) repeat kills of the same ordered pair inside t_cooldown = 60 s after the last "
            "*counted* kill are filtered and change nothing; the reverse pair is not affected",
            {},
            [
                ("alice", "bob", 0.0),
                ("alice", "bob", 30.0),
                ("bob", "alice", 45.0),
                ("alice", "bob", 59.0),
                ("alice", "bob", 60.0),
                ("alice", "bob", 90.0),
                ("alice", "bob", 119.0),
                ("alice", "bob", 120.0),
            ],
        ),
        (
            "f_printed_loser_rule",
            "(f) loser_rule = printed: the victim loses eta_b * P_ab (differs from the corrected "
            "rule once P_ab != 1/2)",
            {"loser_rule": "printed"},
            [("alice", "bob", 0.0), ("alice", "bob", 120.0), ("bob", "alice", 240.0)],
        ),
        (
            "g_rejections",
            "self-kill (nobody joins), a kill 3 s late (applied at the clock, so bob does not "
            "decay), a kill 6 s late (out of order, > late_tolerance = 5 s)",
            {},
            [
                ("alice", "alice", 0.0),
                ("alice", "bob", 100.0),
                ("bob", "carol", 97.0),
                ("carol", "bob", 94.0),
                ("carol", "alice", 200.0),
            ],
        ),
        (
            "h_placement_and_tiers",
            "§6.1 placement after n_min = 3 events (sigma_place = 400) against the initial "
            "boundaries, then §6.4 accumulators (h_req = 15) promote alice and demote bob",
            {"n_min": 3, "sigma_place": 400.0, "h_req": 15.0},
            [("alice", "bob", 120.0 * k) for k in range(12)],
        ),
        (
            "i_anchor_then_placement",
            "the scale anchor at a recalibration (no calibration: p_min = 20) shifts every "
            "rating and every boundary so that the active mean is mu0 (c_loss = 0.5 lets the "
            "mean drift up first); players placed afterwards get the tiers they would have had "
            "without the shift (dave 3H, erin 3L)",
            {"n_min": 2, "sigma_place": 400.0, "n_active": 1, "h_req": 5.0, "c_loss": 0.5},
            [
                ("alice", "bob", 0.0),
                ("alice", "bob", 120.0),
                ("alice", "carol", 240.0),
                300.0,
                ("dave", "erin", 400.0),
                ("dave", "erin", 520.0),
                ("alice", "bob", 640.0),
            ],
        ),
        (
            "j_calibration",
            "§6.3 calibration without the anchor: the first calibration sets B_k to the "
            "inverted-CDF quantiles of the active ratings, the second smooths with beta = 0.2",
            {"p_min": 3, "n_active": 1, "anchor": False, "n_min": 2, "sigma_place": 400.0},
            [
                ("alice", "bob", 0.0),
                ("carol", "alice", 120.0),
                ("bob", "carol", 240.0),
                300.0,
                ("alice", "bob", 400.0),
                ("alice", "carol", 520.0),
                600.0,
                ("bob", "alice", 700.0),
            ],
        ),
        (
            "j2_calibration_with_anchor",
            "§6.3 calibration with the anchor: shift ratings and boundaries, then quantiles of "
            "the shifted active ratings; the second calibration smooths from the shifted "
            "previous boundaries",
            {"p_min": 3, "n_active": 1, "n_min": 2, "sigma_place": 400.0},
            [
                ("alice", "bob", 0.0),
                ("carol", "alice", 120.0),
                ("bob", "carol", 240.0),
                300.0,
                ("alice", "bob", 400.0),
                ("alice", "carol", 520.0),
                600.0,
                ("bob", "alice", 700.0),
            ],
        ),
        (
            "k_recalibration_keeps_history",
            "a recalibration at t = 300 (as Engine.feed runs it before the repeat kill at 300, "
            "which is then filtered) does not move time forward: carol's kill of dave at 294 is "
            "59 s after the counted one at 235 and is filtered (§2.1)",
            {},
            [
                ("carol", "dave", 235.0),
                ("alice", "bob", 290.0),
                300.0,
                ("alice", "bob", 300.0),
                ("carol", "dave", 294.0),
            ],
        ),
    ]


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x!r} cannot be written to JSON")
    return x


def run(name: str, description: str, overrides: dict[str, Any], steps: list[Step]) -> dict[str, Any]:
    ref = ReferenceADR(ADRParams.from_mapping({"preset": "paper", **overrides}))
    out_steps: list[dict[str, Any]] = []
    for step in steps:
        entry: dict[str, Any]
        if isinstance(step, tuple):
            attacker, victim, t = step
            outcome = ref.apply(attacker, victim, t)
            entry = {"kill": [attacker, victim, t], "outcome": outcome}
            if outcome == APPLIED:
                assert ref.trace is not None
                entry["trace"] = asdict(ref.trace)
        else:
            ref.recalibrate(step)
            entry = {"recalibrate": step}
        entry["players"] = {n: ref.state(n) for n in ref.players}
        entry["boundaries"] = [_finite(b) for b in ref.boundaries]
        out_steps.append(entry)
    return {"name": name, "description": description, "params": overrides, "steps": out_steps}


def build() -> dict[str, Any]:
    return {
        "comment": "Generated by tests/golden/generate.py from tests/reference_adr.py; do not edit.",
        "vectors": [run(*s) for s in scenarios()],
    }


def render() -> str:
    return json.dumps(build(), indent=1, allow_nan=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if vectors.json is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date; run tests/golden/generate.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
