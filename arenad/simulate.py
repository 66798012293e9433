"""The paper's experiments (§10.4, §10.6) on simulated servers, as data; the CLI prints them.

Deterministic for a given seed. No I/O here: functions return rows, ``format_table`` renders them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from arenad.core.engine import Engine, Outcome
from arenad.core.params import TIER_COUNT, TIER_NAMES, ADRParams

DAY = 86400.0


# ---------------------------------------------------------------------------- §10.6 returning
def simulate_returning(
    params: ADRParams,
    kills: int = 50,
    absence_days: float = 61.0,
    opponent_mu: float = 2000.0,
    returning_kills: bool = True,
) -> list[dict[str, Any]]:
    """§10.6: a 1000-rated player, back after ``absence_days``, kills a 2000-rated one ``kills`` times.

    §8.2 applies to a last event *more than* T_return (60) days ago, so the default absence is 61
    days: the paper's "absent for 60 days" taken as just past the threshold.

    A background of 40 active players around mu0 keeps the §5 decay target at mu0; the two kills
    are 61 s apart so the §2.1 cooldown never filters them. One row per kill.
    """
    eng = Engine(params)
    rng = random.Random(7)
    t0 = 1_700_000_000.0
    back = t0 + absence_days * DAY
    bg = [f"bg{i:02d}" for i in range(40)]
    for name in bg:
        eng.seed_player(name, mu=params.mu0 + rng.gauss(0.0, 100.0), sigma=60.0, n=200, last_t=back - 3600.0)
    eng.seed_player("returning", mu=1000.0, sigma=60.0, n=200, last_t=t0)
    eng.seed_player("champion", mu=opponent_mu, sigma=60.0, n=200, last_t=back - 3600.0)
    ret = eng.ids["returning"]
    champ = eng.ids["champion"]
    rows: list[dict[str, Any]] = []
    t = back
    prev_mu = eng.mu(ret)
    for k in range(1, kills + 1):
        p_before = eng.predict(ret, champ)
        if returning_kills:
            outcome = eng.apply("returning", "champion", t)
        else:
            outcome = eng.apply("champion", "returning", t)
        if outcome is not Outcome.APPLIED:
            raise RuntimeError(f"kill {k} was not applied: {outcome.name}")
        mu = eng.mu(ret)
        v = eng.view(ret)
        rows.append(
            {
                "kill": k,
                "p_kill": round(p_before, 4),
                "delta_mu": round(mu - prev_mu, 3),
                "mu": round(mu, 2),
                "pool": round(v.pool, 3),
                "sigma": round(v.sigma, 2),
                "returning_left": v.returning_left,
                "champion_mu": round(eng.mu(champ), 2),
            }
        )
        prev_mu = mu
        t += 61.0
    return rows


# ---------------------------------------------------------------------------- §10.4 tiers
@dataclass(frozen=True, slots=True)
class Population:
    """A simulated server network (§10.4): hidden skills from a Gaussian mixture."""

    players: int = 500
    days: int = 28
    kills_per_player_day: float = 30.0
    play_probability: float = 0.7
    skill_scale: float = 1.0  # logistic slope on the hidden-skill difference
    seed: int = 1

    def skills(self) -> list[float]:
        rng = random.Random(self.seed)
        # A two-component mixture: a casual majority and a stronger regular group.
        return [
            rng.gauss(0.0, 1.0) if rng.random() < 0.7 else rng.gauss(1.2, 0.6) for _ in range(self.players)
        ]


def event_stream(pop: Population) -> list[tuple[str, str, float]]:
    """Kills in time order: each day a random subset plays; winners drawn from hidden skills."""
    rng = random.Random(pop.seed + 1)
    skill = pop.skills()
    names = [f"p{i:04d}" for i in range(pop.players)]
    t0 = 1_700_000_000.0
    out: list[tuple[str, str, float]] = []
    for day in range(pop.days):
        online = [i for i in range(pop.players) if rng.random() < pop.play_probability]
        if len(online) < 2:
            continue
        n = int(len(online) * pop.kills_per_player_day / 2)
        times = sorted(rng.uniform(0.0, DAY) for _ in range(n))
        for dt in times:
            a, b = rng.sample(online, 2)
            p_a = 1.0 / (1.0 + math.exp(-pop.skill_scale * (skill[a] - skill[b])))
            if rng.random() >= p_a:
                a, b = b, a
            out.append((names[a], names[b], t0 + day * DAY + dt))
    return out


def simulate_tiers(
    params: ADRParams, pop: Population | None = None, reports: int = 8
) -> tuple[list[dict[str, Any]], Engine]:
    """Run the population; return one row per report point (mean mu, spread, tier shares...)."""
    pop = pop or Population()
    events = event_stream(pop)
    skill = dict(zip((f"p{i:04d}" for i in range(pop.players)), pop.skills(), strict=True))
    eng = Engine(params)
    rows: list[dict[str, Any]] = []
    every = max(1, len(events) // reports)
    last_changes = 0
    last_applied = 0
    max_step = 0.0
    for k, (a, b, t) in enumerate(events, start=1):
        if eng.feed(a, b, t) is Outcome.APPLIED:
            # §8.4 bounds the visible change of an update (decay before it is not an update).
            max_step = max(max_step, abs(eng.last_delta_attacker), abs(eng.last_delta_victim))
        if (k % every == 0 and len(rows) < reports - 1) or k == len(events):
            row = _population_row(eng, skill, t, pop)
            row["events"] = k
            applied = eng.applied - last_applied
            row["tier_changes_per_1k_player_events"] = round(
                1000.0 * (eng.tier_changes - last_changes) / max(1, 2 * applied), 3
            )
            row["max_abs_update"] = round(max_step, 3)
            last_changes = eng.tier_changes
            last_applied = eng.applied
            rows.append(row)
    return rows, eng


def _population_row(eng: Engine, skill: dict[str, float], t: float, pop: Population) -> dict[str, Any]:
    ids = range(len(eng))
    mus = np.array([eng.mu(i) for i in ids])
    views = [eng.view(i) for i in ids]
    placed_active = [v for v in views if v.active and v.tier is not None]
    shares = [0.0] * TIER_COUNT
    for v in placed_active:
        shares[TIER_NAMES.index(v.tier or "")] += 1.0
    total = max(1, len(placed_active))
    shares = [s / total for s in shares]
    target = eng.params.tier_proportions
    true = np.array([skill[eng.names[i]] for i in ids])
    return {
        "day": round((t - 1_700_000_000.0) / DAY, 2),
        "active": eng.active_count,
        "placed_active": len(placed_active),
        "mean_mu": round(float(np.mean(mus)), 1),
        "active_mean_mu": round(eng.active_mean(), 1),
        "sd_mu": round(float(np.std(mus)), 1),
        "at_bounds": int(np.sum((mus <= eng.params.mu_min) | (mus >= eng.params.mu_max))),
        "spearman": round(_spearman(mus, true), 3),
        "max_share_error": round(max(abs(s - p) for s, p in zip(shares, target, strict=True)), 4),
        "shares": [round(s, 4) for s in shares],
    }


def _spearman(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> float:
    if len(x) < 3:
        return float("nan")
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    return float(np.corrcoef(rx, ry)[0, 1])


def compare_variants(
    params: ADRParams, variants: dict[str, dict[str, Any]], pop: Population | None = None
) -> list[dict[str, Any]]:
    """The last report row of ``simulate_tiers`` for each named parameter variant."""
    out = []
    for name, overrides in variants.items():
        rows, _ = simulate_tiers(replace(params, **overrides), pop, reports=1)
        last = rows[-1]
        last = {"variant": name, **{k: v for k, v in last.items() if k != "shares"}}
        out.append(last)
    return out


# ---------------------------------------------------------------------------- rendering
def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[j]) for row in cells)) for j, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _fmt(v: object) -> str:
    if isinstance(v, list):
        return " ".join(f"{x * 100:.1f}" if isinstance(x, float) else str(x) for x in v)
    return "-" if v is None else str(v)
