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
from arenad.core.events import PlacementEvent
from arenad.core.params import TIER_COUNT, TIER_NAMES, ADRParams
from arenad.evaluation.truth import Absence, Burst, Farming, Jump, SkillChange, Truth

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
    #: Total background kills, spread evenly over the days; None: ``kills_per_player_day`` decides.
    events: int | None = None

    def skills(self) -> list[float]:
        rng = random.Random(self.seed)
        # A two-component mixture: a casual majority and a stronger regular group.
        return [
            rng.gauss(0.0, 1.0) if rng.random() < 0.7 else rng.gauss(1.2, 0.6) for _ in range(self.players)
        ]


def event_stream(pop: Population) -> list[tuple[str, str, float]]:
    """Kills in time order: each day a random subset plays; winners drawn from hidden skills."""
    return simulate_stream(pop, NO_SCENARIOS).events


# ---------------------------------------------------------------------------- §10.4 scenarios
#: The injected scenarios of §10.4 item 3 (and §10.3's farming and repeated kills), by name.
SCENARIOS: tuple[str, ...] = ("jump", "absence", "farming", "bursts")

#: Fewest players a stream needs before scenarios can pick distinct players for their roles.
MIN_SCENARIO_PLAYERS = 10


@dataclass(frozen=True, slots=True)
class ScenarioPlan:
    """Which §10.4 scenarios to inject into a simulated stream, and how big each one is.

    * ``jump``: the player nearest the 20th skill percentile jumps to the 80th percentile's skill
      at ``jump_day`` (default: the middle of the stream).
    * ``absence``: the player nearest the 40th percentile plays every day until a quarter of the
      way into the room the absence leaves, is away ``absence_days`` (more than §9's
      T_return = 60 days by default), comes back with the 90th percentile's skill and kills
      ``return_kills`` strong players (top quarter) in a row, 61 s apart.
    * ``farming``: at 60 % of the stream, the player nearest the 75th percentile kills the weakest
      player ``farming_kills`` times, every ``farming_gap`` seconds (past the §2.1 cooldown, so
      every kill counts); the next player nearest the 75th percentile makes as many kills on
      varied opponents, interleaved, as the control.
    * ``bursts``: ``bursts`` times, a random attacker kills the same victim ``burst_size`` times,
      ``burst_gap`` seconds apart (inside the cooldown).

    Injected kills are forced outcomes; the rest of the stream is drawn from the hidden skills.
    A scenario that does not fit the stream (too few days or players) is skipped and recorded in
    ``Truth.skipped``, or refused with ``ValueError`` when ``strict``.
    """

    scenarios: tuple[str, ...] = SCENARIOS
    jump_day: float | None = None
    absence_days: float = 61.0
    return_kills: int = 20
    farming_kills: int = 40
    farming_gap: float = 90.0
    bursts: int = 20
    burst_size: int = 5
    burst_gap: float = 10.0
    strict: bool = False

    def __post_init__(self) -> None:
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown:
            raise ValueError(f"scenarios: unknown {unknown!r} (known: {', '.join(SCENARIOS)})")
        checks = (
            ("absence_days", self.absence_days, self.absence_days > 0),
            ("return_kills", self.return_kills, self.return_kills >= 1),
            ("farming_kills", self.farming_kills, self.farming_kills >= 1),
            ("farming_gap", self.farming_gap, self.farming_gap > 0),
            ("bursts", self.bursts, self.bursts >= 1),
            ("burst_size", self.burst_size, self.burst_size >= 2),
            ("burst_gap", self.burst_gap, self.burst_gap > 0),
        )
        for name, value, ok in checks:
            if not (ok and math.isfinite(value)):
                raise ValueError(f"{name} = {value!r} is out of range")
        if self.jump_day is not None and not (math.isfinite(self.jump_day) and self.jump_day > 0):
            raise ValueError(f"jump_day = {self.jump_day!r} must be a positive number of days")


#: A plan that injects nothing: the plain §10.4 items 1-2 stream.
NO_SCENARIOS = ScenarioPlan(scenarios=())


@dataclass(frozen=True, slots=True)
class SimulatedStream:
    """A simulated stream and what a model should find in it."""

    events: list[tuple[str, str, float]]
    truth: Truth
    players: int
    days: int


_T0 = 1_700_000_000.0


def simulate_stream(pop: Population, plan: ScenarioPlan = NO_SCENARIOS) -> SimulatedStream:
    """§10.4: hidden skills from a Gaussian mixture, kills drawn from them, scenarios injected.

    Each day a random subset of players is online; kills pick two online players at random and
    the winner with the logistic of their hidden-skill difference (``pop.skill_scale`` slope).
    With no scenarios and ``pop.events`` unset this is exactly the stream of :func:`event_stream`
    (same seed, same draws): scenarios change outcomes and add kills, and draw their own random
    numbers from a separate generator.
    """
    rng = random.Random(pop.seed + 1)
    inject_rng = random.Random(pop.seed + 2)
    skill = pop.skills()
    names = [f"p{i:04d}" for i in range(pop.players)]
    truth_skills = dict(zip(names, skill, strict=True))
    order = sorted(range(pop.players), key=lambda i: (skill[i], i))
    used: set[int] = set()
    skipped: dict[str, str] = {}

    def fits(name: str, ok: bool, why: str) -> bool:
        if name not in plan.scenarios:
            return False
        if not ok:
            if plan.strict:
                raise ValueError(f"scenario {name!r} does not fit: {why}")
            skipped[name] = why
        return ok

    def pick(q: float) -> int:
        target = round(q * (pop.players - 1))
        for off in range(pop.players):
            for pos in (target - off, target + off):
                if 0 <= pos < pop.players and order[pos] not in used:
                    used.add(order[pos])
                    return order[pos]
        raise AssertionError("no player left to pick")  # callers check the player count first

    def skill_q(q: float) -> float:
        return skill[order[round(q * (pop.players - 1))]]

    enough = pop.players >= MIN_SCENARIO_PLAYERS
    few = f"needs at least {MIN_SCENARIO_PLAYERS} players, the stream has {pop.players}"
    changes: list[SkillChange] = []
    # (time, kind, attacker, victim) of every injected kill; kind tags it for the truth.
    injected: list[tuple[float, str, int, int]] = []

    jumper: int | None = None
    t_jump = 0.0
    if fits("jump", enough and pop.days >= 2, few if not enough else "needs at least 2 days"):
        day = plan.jump_day if plan.jump_day is not None else pop.days / 2.0
        if day >= pop.days:
            if plan.strict:
                raise ValueError(f"jump_day = {day!r} is not inside the {pop.days} simulated days")
            skipped["jump"] = f"jump_day {day} is not inside the {pop.days} days"
        else:
            jumper = pick(0.2)
            t_jump = _T0 + day * DAY
            changes.append(SkillChange(names[jumper], t_jump, skill_q(0.8)))

    returner: int | None = None
    left_day = back_day = 0
    t_back = t_back_end = 0.0
    away = math.ceil(plan.absence_days)
    need = away + 4
    why = few if not enough else f"needs at least {need} days for a {plan.absence_days}-day absence"
    if fits("absence", enough and pop.days >= need, why):
        returner = pick(0.4)
        left_day = 2 + int(0.25 * (pop.days - need))
        back_day = left_day + away
        t_back = _T0 + back_day * DAY + 60.0
        t_back_end = t_back + 61.0 * plan.return_kills
        changes.append(SkillChange(names[returner], t_back, skill_q(0.9)))
        strong = [i for i in order[(3 * pop.players) // 4 :] if i != returner]
        for k in range(plan.return_kills):
            if k % len(strong) == 0:
                inject_rng.shuffle(strong)
            injected.append((t_back + 61.0 * k, "return", returner, strong[k % len(strong)]))

    if fits("farming", enough and pop.days >= 2, few if not enough else "needs at least 2 days"):
        farmer = pick(0.75)
        control = pick(0.75)
        victim = pick(0.0)
        t_farm = _T0 + min(pop.days - 1, int(0.6 * pop.days)) * DAY + 12 * 3600.0
        varied = [i for i in range(pop.players) if i not in (farmer, control, victim, returner)]
        for k in range(plan.farming_kills):
            if k % len(varied) == 0:
                inject_rng.shuffle(varied)
            t = t_farm + k * plan.farming_gap
            injected.append((t, "farming", farmer, victim))
            injected.append((t + plan.farming_gap / 2.0, "control", control, varied[k % len(varied)]))

    if fits("bursts", enough, few):
        others = [i for i in range(pop.players) if i not in used and i != returner]
        span = max(0.0, pop.days * DAY - DAY / 2.0 - 3600.0)
        for k in range(plan.bursts):
            a, b = inject_rng.sample(others, 2)
            t = _T0 + DAY / 2.0 + inject_rng.uniform(0.0, span)
            for j in range(plan.burst_size):
                injected.append((t + j * plan.burst_gap, f"burst{k}", a, b))

    def skill_at(i: int, t: float) -> float:
        if i == jumper and t >= t_jump:
            return skill_q(0.8)
        if i == returner and t >= t_back:
            return skill_q(0.9)
        return skill[i]

    base: list[tuple[str, str, float]] = []
    carry = 0
    for day in range(pop.days):
        online = [i for i in range(pop.players) if rng.random() < pop.play_probability]
        if returner is not None:
            # Plays every day before the absence (so it has a history), none during it.
            if day < left_day and returner not in online:
                online.append(returner)
            elif left_day <= day < back_day and returner in online:
                online.remove(returner)
        quota = None
        if pop.events is not None:
            quota = pop.events * (day + 1) // pop.days - pop.events * day // pop.days + carry
        if len(online) < 2:
            carry = quota or 0
            continue
        carry = 0
        n = int(len(online) * pop.kills_per_player_day / 2) if quota is None else quota
        times = sorted(rng.uniform(0.0, DAY) for _ in range(n))
        for dt in times:
            a, b = rng.sample(online, 2)
            t = _T0 + day * DAY + dt
            p_a = 1.0 / (1.0 + math.exp(-pop.skill_scale * (skill_at(a, t) - skill_at(b, t))))
            if rng.random() >= p_a:
                a, b = b, a
            if returner in (a, b) and t < t_back_end and day == back_day:
                continue  # the return run comes first
            base.append((names[a], names[b], t))

    # Merge by time; at equal times the background kill comes first.
    tagged: list[tuple[float, int, str, str, str]] = [(t, 0, a, b, "") for a, b, t in base]
    tagged += [(t, 1, names[a], names[b], kind) for t, kind, a, b in injected]
    tagged.sort(key=lambda e: (e[0], e[1]))
    events = [(a, b, t) for t, _, a, b, _ in tagged]
    where: dict[str, list[int]] = {}
    for index, (_, _, _, _, kind) in enumerate(tagged):
        if kind:
            where.setdefault(kind, []).append(index)

    jump = None
    if jumper is not None:
        jump = Jump(names[jumper], t_jump, skill[jumper], skill_q(0.8))
    absence = None
    if returner is not None:
        name = names[returner]
        left = max((t for a, b, t in events if t < t_back and name in (a, b)), default=_T0)
        absence = Absence(name, left, t_back, skill_q(0.9), tuple(where["return"]))
    farming = None
    if "farming" in where:
        first = events[where["farming"][0]]
        control_name = events[where["control"][0]][0]
        farming = Farming(first[0], first[1], control_name, tuple(where["farming"]), tuple(where["control"]))
    bursts = tuple(
        Burst(events[where[f"burst{k}"][0]][0], events[where[f"burst{k}"][0]][1], tuple(where[f"burst{k}"]))
        for k in range(plan.bursts)
        if f"burst{k}" in where
    )
    truth = Truth(truth_skills, tuple(changes), jump, absence, farming, bursts, skipped)
    return SimulatedStream(events, truth, pop.players, pop.days)


def placements_from_kills(
    events: Sequence[tuple[str, str, float]], match_seconds: float
) -> list[tuple[str, str, float] | PlacementEvent]:
    """The kills with a match-placement event after every ``match_seconds`` of event time.

    Each match's final scoreboard ranks the players who took part by kills minus deaths in it,
    best first, players with equal scores tied (one group) — what an FFA server reports at match
    end. A window with fewer than two players has no placement event.
    """
    if not (math.isfinite(match_seconds) and match_seconds > 0):
        raise ValueError(f"match_seconds = {match_seconds!r} must be a positive number")
    out: list[tuple[str, str, float] | PlacementEvent] = []
    score: dict[str, int] = {}
    end: float | None = None

    def close(at: float) -> None:
        if len(score) >= 2:
            by_score: dict[int, list[str]] = {}
            for player, s in score.items():
                by_score.setdefault(s, []).append(player)
            groups = tuple(tuple(by_score[s]) for s in sorted(by_score, reverse=True))
            out.append(PlacementEvent(at, groups, "sim-1"))
        score.clear()

    for a, b, t in events:
        if end is None:
            end = t + match_seconds
        while t >= end:
            close(end)
            end += match_seconds
        score[a] = score.get(a, 0) + 1
        score[b] = score.get(b, 0) - 1
        out.append((a, b, t))
    if end is not None:
        close(end)
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
