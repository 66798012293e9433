"""Tiers for any rating model: ADR's §6.1/§6.3 rules applied to the model's own ratings.

ADR has tiers (§6); Elo, Glicko-2 and TrueSkill do not. To compare tier stability and the
match of tier shares to the targets p_k (§10.3), a model without tiers gets the tiers ADR would
give its ratings, minus the §6.4 hysteresis:

* §6.1 placement: a player is placed once it has ``n_min`` events (kills, deaths and match
  placements all count). The §6.1 uncertainty condition is not applied: the models' uncertainties
  are on different scales, and under §9's γ = 100 ADR's own σ condition is met after one event
  anyway (docs/adr.md).
* §6.3 calibration: every ``interval`` seconds of event time, if at least ``p_min`` players are
  active (§2.3: ``n_active`` events in the last ``t_active`` days), the boundaries become the
  (1 − q_k) quantiles of the active players' ratings — outright the first time, then smoothed
  with ``beta``. Until the first calibration nobody is placed (a model has no scale-free
  equivalent of ADR's initial boundaries).
* A placed player's tier is re-evaluated at its own events (like ADR, whose tiers move only at a
  player's events) against the current boundaries, with no accumulator: a move across two tiers
  counts as two tier changes (ADR would need two moves for it).

The same rules applied to ADR's ratings (``quantile`` tiers) separate what ADR's ratings do from
what its §6.4 accumulators add; ADR's own tiers are read from its engine.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from arenad.core.engine import Engine
from arenad.core.params import TIER_COUNT, TIER_NAMES, ADRParams


@dataclass(frozen=True, slots=True)
class TierRules:
    """The §6 numbers the quantile tiers use (defaults: §9 via ``ADRParams``)."""

    proportions: tuple[float, ...]
    n_min: int
    n_active: int
    t_active: float  # seconds
    p_min: int
    beta: float
    interval: float  # seconds between calibrations

    @classmethod
    def from_params(cls, params: ADRParams, interval: float = 3600.0) -> TierRules:
        return cls(
            proportions=params.tier_proportions,
            n_min=params.n_min,
            n_active=params.n_active,
            t_active=params.t_active * params.day_seconds,
            p_min=params.p_min,
            beta=params.beta,
            interval=interval,
        )


class QuantileTiers:
    """Tier labels for one model's ratings, updated as the stream goes (see the module docstring)."""

    def __init__(self, rules: TierRules) -> None:
        self.rules = rules
        self.tier: dict[str, int] = {}  # placed players: 1..15
        self.events: dict[str, int] = {}
        self._recent: dict[str, deque[float]] = {}
        self._neg_bounds: list[float] | None = None  # -B_1 < -B_2 < ... (ascending)
        self._next = -math.inf
        self.calibrations = 0
        self.changes = 0
        self.player_events = 0
        q = np.cumsum(np.asarray(rules.proportions, dtype=np.float64))[: len(rules.proportions) - 1]
        self._quantiles = np.clip(1.0 - q, 0.0, 1.0)

    def active(self, t: float) -> list[str]:
        """§2.3 active players at ``t``: ``n_active`` events in (t − t_active, t]."""
        horizon = t - self.rules.t_active
        need = self.rules.n_active
        return [p for p, times in self._recent.items() if len(times) >= need and times[0] > horizon]

    def observe(self, players: Sequence[str], t: float, rating: Callable[[str], float]) -> None:
        """After the model learnt an event at ``t`` that involved ``players``."""
        if t >= self._next:
            self._calibrate(t, rating)
        need = self.rules.n_active
        for player in players:
            self.player_events += 1
            n = self.events.get(player, 0) + 1
            self.events[player] = n
            times = self._recent.get(player)
            if times is None:
                times = self._recent[player] = deque(maxlen=need)
            times.append(t)
            if self._neg_bounds is None:
                continue
            k = 1 + bisect_left(self._neg_bounds, -rating(player))
            old = self.tier.get(player)
            if old is None:
                if n >= self.rules.n_min:
                    self.tier[player] = k
            elif k != old:
                self.changes += abs(k - old)
                self.tier[player] = k

    def _calibrate(self, t: float, rating: Callable[[str], float]) -> None:
        self._next = t + self.rules.interval
        active = self.active(t)
        if len(active) < self.rules.p_min:
            return
        values = np.asarray([rating(p) for p in active], dtype=np.float64)
        target = np.quantile(values, self._quantiles, method="inverted_cdf")
        if self._neg_bounds is None:
            bounds = target
        else:
            old = -np.asarray(self._neg_bounds)
            bounds = (1.0 - self.rules.beta) * old + self.rules.beta * target
        self._neg_bounds = sorted((-bounds).tolist())
        self.calibrations += 1

    def shares(self, t: float) -> list[float] | None:
        """Share of the active placed players in each tier at ``t``; None when nobody is placed."""
        counts = [0] * len(self.rules.proportions)
        for player in self.active(t):
            k = self.tier.get(player)
            if k is not None:
                counts[k - 1] += 1
        total = sum(counts)
        return [c / total for c in counts] if total else None


def engine_of(model: object) -> Engine | None:
    """The ADR engine behind a model (``adr`` and its variants), or None for any other model."""
    engine = getattr(model, "engine", None)
    return engine if isinstance(engine, Engine) else None


def engine_shares(engine: Engine) -> list[float] | None:
    """Share of ADR's active placed players in each of its own tiers (§6); None when nobody is."""
    counts = [0] * TIER_COUNT
    for i in range(len(engine)):
        view = engine.view(i)
        if view.active and view.tier is not None:
            counts[TIER_NAMES.index(view.tier)] += 1
    total = sum(counts)
    return [c / total for c in counts] if total else None
