"""A deliberately plain reference implementation of ADR, for golden vectors and differential tests.

It follows the paper (/work/shared/seeds/000_00a5ce996f60b87c.txt, sections 2-9) and the order of
one update fixed by arenad (issue 2, repeated in the docstring of ``arenad.core.engine``). It is
written to be *read*, not to be fast:

* one dataclass per player, kept in a dict in first-seen order;
* the visible rating ``mu`` is stored directly (no internal offset);
* the §2.2 sliding window is a ``deque``;
* every population quantity (active set, active mean, mean sigma) is recomputed from scratch
  from the full per-player event history at every event;
* the §2.1 cooldown remembers the last counted kill of every ordered pair forever (no pruning).

Where the paper is silent or contradicts itself it follows arenad's documented choices
(docs/adr.md: the corrected victim rule, the returning phase of ``returning_events`` events, the
"transfer" pool, the scale anchor, late events applied at the clock, initial boundaries).

It deliberately shares no code with ``arenad.core.engine`` except ``initial_boundaries`` (the
arenad-chosen boundaries before the first calibration), so it is an independent second opinion.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from arenad.core.engine import initial_boundaries
from arenad.core.params import TIER_NAMES, ADRParams

# Outcome names; the same spelling as ``Outcome.<NAME>.name.lower()`` in the engine.
APPLIED = "applied"
FILTERED = "filtered"
SELF_KILL = "self_kill"
NON_FINITE_TIME = "non_finite_time"
OUT_OF_ORDER = "out_of_order"


TIER_COUNT = len(TIER_NAMES)  # §6.2: 15 tiers, 1H first


def clip(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


@dataclass
class RefPlayer:
    """§2.2 player state (plus the §6 tier state and the arenad returning-phase counter)."""

    name: str
    mu: float
    sigma: float
    streak: int = 0
    trend: float = 0.0
    pool: float = 0.0
    n: int = 0
    last_t: float | None = None  # time of the last counted event; None while n == 0
    window: deque[float] = field(default_factory=deque)  # §2.2 w_i, the last L |changes|
    event_times: list[float] = field(default_factory=list)  # every counted event, for §2.3
    returning_left: int = 0  # counted events still to spend under §8.2/§8.3
    tier: int = 0  # 0 = "No Tier" (§6.1), else k in 1..15 (§6.2)
    h_up: float = 0.0  # §6.4 promotion accumulator
    h_down: float = 0.0  # §6.4 demotion accumulator

    @property
    def tier_name(self) -> str | None:
        return TIER_NAMES[self.tier - 1] if self.tier else None


@dataclass(frozen=True)
class EventTrace:
    """Intermediate quantities of the last applied event, for hand checks."""

    t: float
    mean_active: float
    mu_a: float  # decayed
    mu_b: float
    sigma_a: float  # decayed
    sigma_b: float
    returning_a: bool
    returning_b: bool
    D: float
    P_ab: float
    eta_a: float
    eta_b: float  # already times c_loss
    raw_a: float
    raw_b: float
    visible_a: float  # after the §8.2/§8.3 pool, before the §8.4 cap
    visible_b: float
    change_a: float  # final change mu_new - mu_decayed
    change_b: float


class ReferenceADR:
    """The whole ADR state, updated one kill at a time, recomputing everything from scratch."""

    def __init__(self, params: ADRParams | None = None) -> None:
        self.params = params if params is not None else ADRParams.paper()
        self.players: dict[str, RefPlayer] = {}
        # B_1..B_14 on the visible scale; B_0 = +inf and B_15 = -inf are implied (§6.3).
        self.boundaries: list[float] = list(initial_boundaries(self.params))
        self.calibrations = 0
        self.clock = -math.inf  # latest time of a valid event or recalibration
        # §2.1: (attacker, victim) -> time of the last *counted* kill of that ordered pair.
        self.last_counted_kill: dict[tuple[str, str], float] = {}
        self.trace: EventTrace | None = None

    # ------------------------------------------------------------------ population helpers
    def is_active(self, pl: RefPlayer, t: float) -> bool:
        """§2.3: at least N_active counted events in (t - T_active days, t]."""
        p = self.params
        start = t - p.t_active * p.day_seconds
        return sum(1 for e in pl.event_times if start < e <= t) >= p.n_active

    def active_set(self, t: float) -> list[RefPlayer]:
        """§2.3 A(t), falling back to every tracked player when nobody is active."""
        active = [pl for pl in self.players.values() if self.is_active(pl, t)]
        return active if active else list(self.players.values())

    def active_mean(self, t: float) -> float:
        pop = self.active_set(t)
        return math.fsum(pl.mu for pl in pop) / len(pop) if pop else self.params.mu0

    # ------------------------------------------------------------------ one kill
    def apply(self, attacker: str, victim: str, t: float) -> str:
        """Rate one kill (``attacker`` killed ``victim`` at ``t`` seconds); returns the outcome."""
        p = self.params
        # Preprocessing (§2.1 and arenad's input rules).
        if attacker == victim:
            return SELF_KILL
        if not math.isfinite(t):
            return NON_FINITE_TIME
        if t < self.clock:
            if t < self.clock - p.late_tolerance:
                return OUT_OF_ORDER
            t = self.clock  # slightly late: applied at the engine clock
        self.clock = t  # every valid event moves the clock, a filtered one too
        last_kill = self.last_counted_kill.get((attacker, victim))
        if last_kill is not None and t - last_kill < p.t_cooldown:
            return FILTERED  # §2.1 repeat kill inside the cooldown: nothing changes

        # Step 1: newcomers join with the §2.2 initial state.
        for name in (attacker, victim):
            if name not in self.players:
                self.players[name] = RefPlayer(name=name, mu=p.mu0, sigma=p.sigma0)
        a = self.players[attacker]
        b = self.players[victim]
        self.last_counted_kill[(attacker, victim)] = t
        day = p.day_seconds

        # Step 2: returning players (§8.2/§8.3): previous counted event more than T_return days ago.
        for pl in (a, b):
            if pl.n > 0 and pl.last_t is not None and (t - pl.last_t) / day > p.t_return:
                pl.returning_left = p.returning_events
        returning_a = a.returning_left > 0
        returning_b = b.returning_left > 0

        # Step 3: one snapshot of the active mean (stored, un-decayed ratings), then §5 decay.
        mean = self.active_mean(t)
        mu_a, sigma_a = self.decayed(a, t, mean)
        mu_b, sigma_b = self.decayed(b, t, mean)

        # Step 4: §3.2 diffusion over all tracked players (a and b with their decayed sigma),
        # then the §3.1 kill probability from the decayed ratings.
        sigmas = [pl.sigma for pl in self.players.values() if pl is not a and pl is not b]
        sigmas += [sigma_a, sigma_b]
        diffusion = p.theta + p.lambda_ * math.fsum(sigmas) / len(sigmas)  # D(t)
        p_ab = 0.5 + math.atan((mu_a - mu_b) / diffusion) / math.pi  # P_ab(t)

        # Step 5: §4.1 learning rates with the §8.1 peak-shaped base; the victim's times c_loss.
        eta_a = self.learning_rate(a, sigma_a)
        eta_b = p.c_loss * self.learning_rate(b, sigma_b)

        # Step 6: §4.2 raw changes.
        raw_a = eta_a * (1.0 - p_ab)
        # "corrected" uses the prediction error 1 - P_ab; "printed" is §4.2 exactly as printed.
        raw_b = -eta_b * ((1.0 - p_ab) if p.loser_rule == "corrected" else p_ab)
        # §8.2 / §8.3 for players in their returning phase (and the arenad pool drain after it).
        visible_a = self.pooled(a, raw_a, sigma_a, returning_a)
        if returning_b and not p.pool_losses:
            visible_b = raw_b  # the victim's loss bypasses the safeguard
        else:
            visible_b = self.pooled(b, raw_b, sigma_b, returning_b)
        # §8.4 cap of the visible change, then the §4.2 clip to [mu_min, mu_max].
        mu_a_new = clip(mu_a + clip(visible_a, -p.delta_max, p.delta_max), p.mu_min, p.mu_max)
        mu_b_new = clip(mu_b + clip(visible_b, -p.delta_max, p.delta_max), p.mu_min, p.mu_max)
        change_a = mu_a_new - mu_a
        change_b = mu_b_new - mu_b

        # Step 7: §4.3 two-stage sigma from the final change.
        a.sigma = self.new_sigma(sigma_a, change_a)
        b.sigma = self.new_sigma(sigma_b, change_b)
        a.mu = mu_a_new
        b.mu = mu_b_new
        # §4.4 trend, with the same P_ab for both players.
        a.trend = clip((1.0 - p.lambda_phi) * a.trend + p.lambda_phi * (1.0 - p_ab), -1.0, 1.0)
        b.trend = clip((1.0 - p.lambda_phi) * b.trend + p.lambda_phi * (p_ab - 1.0), -1.0, 1.0)
        # §4.5 streak, window, count; the last event time.
        a.streak += 1
        b.streak = 0
        for pl, change in ((a, change_a), (b, change_b)):
            pl.window.append(abs(change))
            while len(pl.window) > p.window_len:
                pl.window.popleft()
            pl.n += 1
            pl.last_t = t
            pl.event_times.append(t)
            if pl.returning_left > 0:
                pl.returning_left -= 1
            # §6.1 placement or §6.4 accumulators.
            self.update_tier(pl)

        self.trace = EventTrace(
            t=t,
            mean_active=mean,
            mu_a=mu_a,
            mu_b=mu_b,
            sigma_a=sigma_a,
            sigma_b=sigma_b,
            returning_a=returning_a,
            returning_b=returning_b,
            D=diffusion,
            P_ab=p_ab,
            eta_a=eta_a,
            eta_b=eta_b,
            raw_a=raw_a,
            raw_b=raw_b,
            visible_a=visible_a,
            visible_b=visible_b,
            change_a=change_a,
            change_b=change_b,
        )
        return APPLIED

    def decayed(self, pl: RefPlayer, t: float, mean: float) -> tuple[float, float]:
        """§5 decay towards the active mean, from the player's own last counted event."""
        p = self.params
        if pl.n == 0 or pl.last_t is None or not t > pl.last_t:
            return pl.mu, pl.sigma
        dt = (t - pl.last_t) / p.day_seconds  # days
        mu = mean + (pl.mu - mean) * math.exp(-dt / p.tau)
        sigma = min(p.sigma_max, pl.sigma + p.sigma_drift * dt)
        return mu, sigma

    def learning_rate(self, pl: RefPlayer, sigma: float) -> float:
        """§4.1 eta = base * streak * volatility * trend, with the §8.1 base."""
        p = self.params
        peak = p.sigma_peak
        base = p.eta_min + (p.eta_max - p.eta_min) * 2.0 * sigma * peak / (sigma**2 + peak**2)
        streak = 1.0 + p.rho_s * min(pl.streak, p.s_max)
        wbar = math.fsum(pl.window) / len(pl.window) if pl.window else 0.0
        volatility = 1.0 / (1.0 + p.rho_v * wbar / p.w_ref)
        trend = 1.0 + p.gamma_phi * max(0.0, pl.trend)
        return base * streak * volatility * trend

    def pooled(self, pl: RefPlayer, delta: float, sigma: float, returning: bool) -> float:
        """§8.2 weight and §8.3 pool; returns the visible change before the §8.4 cap."""
        p = self.params
        nu = pl.pool
        lam = p.lambda_pool
        if returning:
            eff = delta * p.sigma0 / (sigma + p.sigma0)  # §8.2 r_i = sigma0 / (sigma + sigma0)
            if p.pool_release == "transfer":  # what is released leaves the pool
                pl.pool = clip(nu * (1.0 - lam) + p.alpha * eff, p.pool_low, p.pool_high)
            else:  # "literal": §8.3 exactly as printed
                pl.pool = clip(nu + p.alpha * eff, p.pool_low, p.pool_high)
            return (1.0 - p.alpha) * eff + lam * nu
        if nu == 0.0 or p.pool_release == "literal":
            return delta
        # Outside the returning phase the pool keeps draining at lambda_pool per counted event;
        # a remainder under 0.01 points is released whole.
        rest = nu - lam * nu
        if abs(rest) < 0.01:
            pl.pool = 0.0
            return delta + nu
        pl.pool = rest
        return delta + lam * nu

    def new_sigma(self, sigma: float, change: float) -> float:
        """§4.3: process noise from the final change, then the evidence-based decrease."""
        p = self.params
        mid2 = sigma**2 + change**2
        return clip(1.0 / math.sqrt(1.0 / mid2 + 1.0 / p.gamma**2), p.sigma_min, p.sigma_max)

    def update_tier(self, pl: RefPlayer) -> None:
        """§6.1 placement for an unplaced player, else §6.4 promotion/demotion accumulators."""
        p = self.params
        if pl.tier == 0:
            if pl.n >= p.n_min and pl.sigma <= p.sigma_place:
                pl.tier = self.tier_for(pl.mu)
                pl.h_up = 0.0
                pl.h_down = 0.0
            return
        k = pl.tier
        upper = self.boundary(k - 1)
        lower = self.boundary(k)
        if pl.mu >= upper:
            pl.h_up += pl.mu - upper
            pl.h_down = 0.0
            if pl.h_up >= p.h_req:
                pl.tier = k - 1
                pl.h_up = pl.h_down = 0.0
        elif pl.mu < lower:
            pl.h_down += lower - pl.mu
            pl.h_up = 0.0
            if pl.h_down >= p.h_req:
                pl.tier = k + 1
                pl.h_up = pl.h_down = 0.0
        else:
            pl.h_up = pl.h_down = 0.0

    def boundary(self, k: int) -> float:
        """B_k with the sentinels B_0 = +inf and B_15 = -inf."""
        if k <= 0:
            return math.inf
        if k >= TIER_COUNT:
            return -math.inf
        return self.boundaries[k - 1]

    def tier_for(self, mu: float) -> int:
        """§6.3: the k with B_k <= mu < B_{k-1}."""
        for k in range(1, TIER_COUNT + 1):
            if self.boundary(k) <= mu < self.boundary(k - 1):
                return k
        raise AssertionError(f"no tier for mu={mu}")  # unreachable: the sentinels cover R

    # ------------------------------------------------------------------ recalibration
    def recalibrate(self, t: float) -> None:
        """Scale anchor, then §6.3 boundaries, at time ``t`` (never earlier than the clock).

        Only the anchor and the calibration happen here; nothing about activity or the cooldown
        is forgotten, since both are recomputed from the full history at each event.
        """
        p = self.params
        now = max(t, self.clock)
        self.clock = now  # recalibrating at `now` means time has reached `now`
        if not self.players:
            return
        if p.anchor:
            # The scale anchor (arenad, docs/adr.md "The drifting scale"): shift every rating so
            # the active mean (fallback: all) is mu0, clamping onto [mu_min, mu_max]. The tier
            # boundaries move with the ratings ("shifts every rating and every boundary"), so the
            # shift is a change of scale that changes no tier decision.
            shift = p.mu0 - self.active_mean(now)
            for pl in self.players.values():
                pl.mu = clip(pl.mu + shift, p.mu_min, p.mu_max)
            self.boundaries = [b + shift for b in self.boundaries]
        active = self.active_set(now)
        if len(active) < p.p_min:
            return  # §6.3: thresholds are not updated
        q = 0.0
        levels: list[float] = []
        for k in range(TIER_COUNT - 1):
            q += p.tier_proportions[k]  # q_k, cumulative
            levels.append(clip(1.0 - q, 0.0, 1.0))
        mus = np.array([pl.mu for pl in active], dtype=np.float64)
        targets = [float(x) for x in np.quantile(mus, levels, method="inverted_cdf")]  # F^-1(1-q_k)
        if self.calibrations == 0:
            self.boundaries = targets
        else:
            self.boundaries = [
                (1.0 - p.beta) * old + p.beta * new for old, new in zip(self.boundaries, targets, strict=True)
            ]
        self.calibrations += 1

    # ------------------------------------------------------------------ queries
    def state(self, name: str) -> dict[str, float | int | str | None]:
        """The visible state compared against the engine."""
        pl = self.players[name]
        return {
            "mu": pl.mu,
            "sigma": pl.sigma,
            "streak": pl.streak,
            "trend": pl.trend,
            "pool": pl.pool,
            "n": pl.n,
            "tier": pl.tier_name,
        }
