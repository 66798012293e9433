"""§10.6, the returning-player toy, for any rating model.

The paper: "A player with an initial rating of 1000 is absent for 60 days and then returns to
defeat the same high-skill opponent (rating 2000) for 50 consecutive events. [...] Figure 1
reports the standardized rating change from each system's own initial value." and "After 50
consecutive kills, the standardized increases were 1197.93 for ADR, 1166.94 for Elo, 1077.40 for
Glicko-2, and 31.52 for TrueSkill."

What "standardized increase" means can be read off the Elo figure: Elo with K = 32, a returning
player at 1000 and an opponent held at 2000 gains exactly 1166.94 points in 50 wins
(``returning_toy(Elo(EloParams(k=32)), fixed_opponent=True)``). So the paper's number is the rise
of the returning player's rating *on each system's own scale*, from its value at the return —
not a z-score (TrueSkill's 31.52 is in TrueSkill's own μ units, which is why the paper calls the
numbers "not directly comparable across systems"). This module reports that number as
``increase``, and two numbers that *are* comparable across models: ``increase_z`` (the rise in
standard deviations of the background population's ratings) and ``increase_gap`` (the rise as a
share of the initial gap to the opponent, times 1000, so it reads on the paper's 1000-point gap).

Setting up "a 1000-rated player" and "a 2000-rated one" needs each model's state. For the models
whose state layout is known the players are seeded directly, on a common public scale r (ADR's
μ, Elo points; 1000 = ADR's μ0, the active mean), every player with an established record
(uncertainty 60 points, 200 events), 40 background players at r = 1000 ± 100 active until an
hour before the return, the opponent too, the returning player last seen ``absence_days`` before:

* ADR (``adr`` and variants): ``Engine.seed_player`` with μ = r, σ = 60, n = 200 (as
  ``arenad simulate returning``);
* Elo, dynamic-K Elo: rating r (and 200 events);
* Glicko-2 (``glicko2``, ``glicko2-mp``, ``glicko2-period``): r with RD 60, the model's prior
  volatility; ``glicko2-period`` also knows when each player last played, so it grows the
  returning player's RD over the idle periods as it would have;
* TrueSkill (``trueskill``, ``trueskill-ffa``): μ = μ0 + (r − 1000)·k, σ = 60·k, where
  k = √2·β·ln 10 / (1600·φ(0)) converts Elo points to TrueSkill units so that both predict the
  same probability for a small rating difference (k ≈ 0.0213 with β = 25/6);
* OpenSkill (Plackett–Luce, P = logistic((μ_a − μ_b)/c) with c ≈ √2·β): the same with
  k = √2·β·ln 10 / 400 (≈ 0.0339).

Any other model (``seeding = "history"``) learns the two players from play instead: the
background, the returning player and the opponent play 1,260 kills drawn from those r on the Elo
logistic (scale 400), then the returning player leaves and the others play on, 10 kills a day.
Its ``increase`` is then on its own scale from wherever that history put the player; the
comparable numbers still mean the same.

Models with no notion of time (Elo, Glicko-2 per kill, TrueSkill) do not see the absence at
all; ADR applies §5 decay, σ drift and the §8 safeguards; ``glicko2-period`` grows the RD.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from arenad.evaluation.tiers import engine_of
from arenad.models.base import RatingModel
from arenad.models.glicko2 import R0, SCALE

DAY = 86400.0
#: The established uncertainty every seeded player gets, in public rating points (ADR's σ).
ESTABLISHED = 60.0
#: Background players of the toy.
BACKGROUND = 40
_T0 = 1_700_000_000.0
_RETURNING = "returning"
_OPPONENT = "champion"


@dataclass(frozen=True, slots=True)
class ReturningResult:
    """One model's §10.6 run: the returning player's rating after each kill."""

    model: str
    seeding: str  # "adr", "state" or "history"
    fixed_opponent: bool
    initial: float  # rating of the returning player just before its first kill back
    initial_display: float
    opponent: float  # the opponent's rating then
    spread: float  # standard deviation of the background players' ratings then
    ratings: tuple[float, ...]
    displays: tuple[float, ...]

    @property
    def increase(self) -> float:
        """The paper's "standardized increase": final rating minus the rating at the return."""
        return self.ratings[-1] - self.initial if self.ratings else math.nan

    @property
    def increase_z(self) -> float:
        return self.increase / self.spread if self.spread > 0 else math.nan

    @property
    def increase_gap(self) -> float:
        gap = self.opponent - self.initial
        return 1000.0 * self.increase / gap if gap > 0 else math.nan

    @property
    def steps(self) -> list[float]:
        """Rating change at each kill (the first includes any decay applied at the return)."""
        values = [self.initial, *self.ratings]
        return [b - a for a, b in itertools.pairwise(values)]

    @property
    def display_steps(self) -> list[float]:
        values = [self.initial_display, *self.displays]
        return [b - a for a, b in itertools.pairwise(values)]

    def row(self) -> dict[str, Any]:
        """The numbers of the report table."""
        steps = self.steps
        display_steps = self.display_steps
        return {
            "model": self.model,
            "seeding": self.seeding,
            "initial": self.initial,
            "opponent": self.opponent,
            "final": self.ratings[-1] if self.ratings else math.nan,
            "increase": self.increase,
            "increase_z": self.increase_z,
            "increase_gap": self.increase_gap,
            "first_step": steps[0] if steps else math.nan,
            "max_step": max(steps, key=abs) if steps else math.nan,
            "max_step_z": max(abs(s) for s in steps) / self.spread if steps and self.spread > 0 else math.nan,
            "max_display_step": max(display_steps, key=abs) if display_steps else math.nan,
            "max_display_step_z": (
                max(abs(s) for s in display_steps) / self.spread
                if display_steps and self.spread > 0
                else math.nan
            ),
        }


def returning_toy(
    model: RatingModel,
    *,
    kills: int = 50,
    absence_days: float = 61.0,
    returning: float = 1000.0,
    opponent: float = 2000.0,
    fixed_opponent: bool = False,
    seed: int = 7,
) -> ReturningResult | None:
    """Run §10.6 on a fresh ``model``. None when ``fixed_opponent`` is asked of a model whose
    opponent cannot be held (only the seeded ``state`` kinds can).

    The default absence is 61 days: §8.2 applies to a last event *more than* T_return = 60 days
    ago, so the paper's "absent for 60 days" is taken as just past the threshold. Kills are 61 s
    apart so the §2.1 cooldown never filters one.
    """
    if kills < 1:
        raise ValueError(f"kills must be at least 1, got {kills!r}")
    if not (math.isfinite(absence_days) and absence_days > 0):
        raise ValueError(f"absence_days must be a positive number, got {absence_days!r}")
    back = _T0 + absence_days * DAY
    rng = np.random.default_rng(seed)
    background = {
        f"bg{i:02d}": returning + float(x) for i, x in enumerate(rng.normal(0.0, 100.0, BACKGROUND))
    }
    public = {**background, _RETURNING: returning, _OPPONENT: opponent}
    last = dict.fromkeys(public, back - 3600.0)
    last[_RETURNING] = _T0
    seeding = _seed(model, public, last, back)
    if seeding is None:
        if fixed_opponent:
            return None
        seeding = "history"
        _history(model, public, back, rng)
    elif fixed_opponent and seeding != "state":
        return None
    held = model.export_state() if fixed_opponent else None
    initial = model.rating(_RETURNING)
    initial_display = model.display(_RETURNING)
    opponent_rating = model.rating(_OPPONENT)
    spread = float(np.std([model.rating(p) for p in background]))
    ratings: list[float] = []
    displays: list[float] = []
    t = back
    for _ in range(kills):
        model.update(_RETURNING, _OPPONENT, t)
        if held is not None:
            state = model.export_state()
            state["players" if "players" in state else "ratings"][_OPPONENT] = _entry_of(held, _OPPONENT)
            model.import_state(state)
        ratings.append(model.rating(_RETURNING))
        displays.append(model.display(_RETURNING))
        t += 61.0
    name = str(getattr(model, "name", type(model).__name__))
    return ReturningResult(
        name,
        seeding,
        fixed_opponent,
        initial,
        initial_display,
        opponent_rating,
        spread,
        tuple(ratings),
        tuple(displays),
    )


def _entry_of(state: dict[str, Any], player: str) -> Any:
    table = state["players"] if "players" in state else state["ratings"]
    return table[player]


def trueskill_points(beta: float) -> float:
    """TrueSkill μ units per Elo point: equal slopes of P(win) at an even match (see the docstring)."""
    return math.sqrt(2.0) * beta * math.log(10.0) / (1600.0 * 0.3989422804014327)


def openskill_points(beta: float) -> float:
    """OpenSkill (Plackett–Luce) μ units per Elo point: logistic slope 1/(4c) against ln 10 / 1600."""
    return math.sqrt(2.0) * beta * math.log(10.0) / 400.0


def _seed(model: RatingModel, public: dict[str, float], last: dict[str, float], back: float) -> str | None:
    """Put every player at its public rating; the way it was done, or None when the model is unknown."""
    engine = engine_of(model)
    if engine is not None:
        for player, r in public.items():
            engine.seed_player(player, mu=r, sigma=ESTABLISHED, n=200, last_t=last[player])
        return "adr"
    try:
        state = model.export_state()
    except Exception:  # a plugin may refuse to export an empty state; then it learns from history
        return None
    kind = state.get("kind")
    params = state.get("params", {})
    if kind == "elo" and "ratings" in state:
        state["ratings"] = dict(public)
    elif kind == "elo-dynamic" and "ratings" in state and "events" in state:
        state["ratings"] = dict(public)
        state["events"] = dict.fromkeys(public, 200)
    elif kind in ("glicko2", "glicko2-mp") and "players" in state:
        sigma = float(params.get("sigma0", 0.06))
        state["players"] = {p: [(r - R0) / SCALE, ESTABLISHED / SCALE, sigma] for p, r in public.items()}
    elif kind == "glicko2-period" and "players" in state and "period_seconds" in params:
        sigma = float(params.get("sigma0", 0.06))
        period = float(params["period_seconds"])
        state["players"] = {
            p: [(r - R0) / SCALE, ESTABLISHED / SCALE, sigma, math.floor(last[p] / period)]
            for p, r in public.items()
        }
        state["period"] = math.floor((back - 3600.0) / period)
        state["pending"] = {}
    elif kind in ("trueskill", "trueskill-ffa", "openskill") and "players" in state and "beta" in params:
        beta = float(params["beta"])
        k = openskill_points(beta) if kind == "openskill" else trueskill_points(beta)
        mu0 = float(params.get("mu0", 25.0))
        state["players"] = {p: [mu0 + (r - 1000.0) * k, ESTABLISHED * k] for p, r in public.items()}
    else:
        return None
    model.import_state(state)
    return "state"


def _history(model: RatingModel, public: dict[str, float], back: float, rng: np.random.Generator) -> None:
    """Let an unknown model learn the players from kills drawn on the Elo logistic of ``public``."""
    players = list(public)
    slope = math.log(10.0) / 400.0

    def play(pool: list[str], n: int, start: float, span: float) -> None:
        times = np.sort(rng.uniform(start, start + span, n))
        for t in times:
            i, j = rng.choice(len(pool), size=2, replace=False)
            a, b = pool[int(i)], pool[int(j)]
            if rng.random() >= 1.0 / (1.0 + math.exp(-slope * (public[a] - public[b]))):
                a, b = b, a
            model.update(a, b, float(t))

    play(players, 30 * len(players), _T0 - 2 * DAY, 2 * DAY - 60.0)
    stay = [p for p in players if p != _RETURNING]
    days = int((back - 3600.0 - _T0) // DAY)
    for d in range(days):
        play(stay, 10, _T0 + d * DAY, DAY)
