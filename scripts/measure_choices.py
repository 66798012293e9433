"""Reproduce every measurement quoted in docs/adr.md.

Run:  .venv/bin/python scripts/measure_choices.py  (about a minute on one core)
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from arenad.core.params import ADRParams
from arenad.simulate import Population, compare_variants, format_table, simulate_returning, simulate_tiers

COLUMNS = [
    "variant",
    "day",
    "active_mean_mu",
    "sd_mu",
    "at_bounds",
    "spearman",
    "max_share_error",
    "tier_changes_per_1k_player_events",
    "max_abs_update",
]


def section(title: str) -> None:
    print()
    print(f"## {title}")


def returning_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "first": rows[0]["delta_mu"],
        "max_step": max(abs(r["delta_mu"]) for r in rows),
        "mu_after_5": rows[4]["mu"],
        "mu_after_10": rows[9]["mu"],
        "mu_after_20": rows[19]["mu"],
        "mu_after_50": rows[-1]["mu"],
        "pool_after_50": rows[-1]["pool"],
    }


def main() -> None:
    started = time.perf_counter()
    base = ADRParams()
    pop = Population(players=500, days=28, seed=1)
    narrow = Population(players=500, days=28, seed=1, skill_scale=0.35)

    section("Victim update (loser_rule), 500 players, 28 days")
    print(
        format_table(
            compare_variants(
                base,
                {
                    "corrected": {},
                    "printed": {"loser_rule": "printed"},
                    "corrected, no anchor": {"anchor": False},
                    "printed, no anchor": {"loser_rule": "printed", "anchor": False},
                },
                pop,
            ),
            COLUMNS,
        )
    )
    print("same, with a narrow true-skill spread (logistic slope 0.35):")
    print(
        format_table(
            compare_variants(base, {"corrected": {}, "printed": {"loser_rule": "printed"}}, narrow),
            COLUMNS,
        )
    )

    section("Scale anchor: active mean over time, 500 players, 28 days")
    for label, params in (("anchor = true", base), ("anchor = false", replace(base, anchor=False))):
        rows, _ = simulate_tiers(params, pop, reports=4)
        print(label)
        print(format_table(rows, ["day", "events", "active_mean_mu", "sd_mu", "at_bounds", "spearman"]))

    section("Returning player (§10.6), pool_release and the length of the returning phase")
    variants: dict[str, ADRParams] = {
        "no safeguards (alpha=0, never returning)": replace(base, alpha=0.0, t_return=1e6),
        "transfer, 15 events (default)": base,
        "literal, 15 events": replace(base, pool_release="literal"),
        "transfer, 1 event (literal reading)": replace(base, return_events=1),
        "literal, 1 event (literal reading)": replace(base, return_events=1, pool_release="literal"),
        "transfer, 5 events": replace(base, return_events=5),
        "transfer, 30 events": replace(base, return_events=30),
    }
    table = [{"variant": k, **returning_summary(simulate_returning(v))} for k, v in variants.items()]
    print(format_table(table))

    section("Returning victim: pool_losses (a returning player who is killed 10 times by a 1000-rated one)")
    # Mirror of §10.6: the returning player is the *victim*.
    for flag in (True, False):
        params = replace(base, pool_losses=flag)
        rows = simulate_returning(params, kills=10, opponent_mu=1000.0, returning_kills=False)
        print(f"pool_losses = {flag}: first kill's change {rows[0]['delta_mu']}, after 10: {rows[-1]['mu']}")

    section("Initial boundaries: a small server that never reaches P_min = 20 active players")
    small = Population(players=16, days=28, seed=2)
    for spread in (50.0, 150.0, 300.0):
        rows, _ = simulate_tiers(replace(base, initial_spread=spread), small, reports=4)
        print(
            f"initial_spread = {spread}: sd_mu by report {[r['sd_mu'] for r in rows]},",
            f"max share error {[r['max_share_error'] for r in rows]}",
        )
    big = Population(players=500, days=4)
    for spread in (50.0, 300.0):
        rows, _ = simulate_tiers(replace(base, initial_spread=spread), big, reports=4)
        print(
            f"500 players, initial_spread = {spread}: max share error {[r['max_share_error'] for r in rows]}"
        )

    section("H_req: tier stability against share accuracy, 500 players, 28 days")
    print(
        format_table(
            compare_variants(base, {f"h_req={h}": {"h_req": float(h)} for h in (0, 100, 400, 1600)}, pop),
            COLUMNS,
        )
    )
    print(f"\n(total {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
