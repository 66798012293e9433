"""Logistic Elo, with a fixed K (``elo``) and with a FIDE-style K schedule (``elo-dynamic``).

Seed 002 ("Elo"): E_A = 1 / (1 + 10^((R_B − R_A)/400)) and R_A' = R_A + K(S_A − E_A),
R_B' = R_B − K(S_A − E_A), which is one step of stochastic gradient ascent on the Bernoulli
log-likelihood of the result, with K as the learning rate. A kill is a win for the attacker
(S = 1) and a loss for the victim.

Scale: Elo points (initial 1500). Display: the rating itself, since Elo keeps no uncertainty.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from arenad.models.base import check_state, require, state_envelope


@dataclass(frozen=True, slots=True)
class EloParams:
    """Fixed-K Elo: the K factor, the initial rating and the logistic scale (base 10)."""

    k: float = 24.0
    initial: float = 1500.0
    scale: float = 400.0

    def __post_init__(self) -> None:
        require(
            "models.elo",
            [
                (_finite(self.k) and self.k > 0, "k", self.k, "must be a finite number > 0"),
                (_finite(self.initial), "initial", self.initial, "must be finite"),
                (_finite(self.scale) and self.scale > 0, "scale", self.scale, "must be a finite number > 0"),
            ],
        )


@dataclass(frozen=True, slots=True)
class KSchedule:
    """Dynamic K: ``k_new`` for the first ``new_events`` events, then ``k``, ``k_high`` at the top.

    The ADR paper (seed 000) asks for "a dynamic-K Elo variant" among its §10.2 baselines and
    cites a dynamic-K study (its reference 9: "Balancing stability and flexibility: investigating
    a dynamic K value approach for the Elo rating system in adaptive learning environments",
    UMUAI 2025); seed 002 reads K as the learning rate of the online update, and Glicko's RD as
    the principled replacement for "a large K for new players, a small one for established
    players". Neither gives numbers: these are the FIDE schedule (FIDE Rating Regulations,
    handbook B.02, "development coefficient"): K = 40 until 30 games, then 20, and 10 for players
    at 2400 or above. One difference: FIDE keeps K = 10 for good once 2400 is reached; here K
    follows the current rating (as USCF-style schedules do), so the model needs no extra
    per-player state. Every kill counts as one event for both players.
    """

    k_new: float = 40.0
    new_events: int = 30
    k: float = 20.0
    k_high: float = 10.0
    high_rating: float = 2400.0

    def __post_init__(self) -> None:
        require(
            "models.elo-dynamic",
            [
                (_finite(self.k_new) and self.k_new > 0, "k_new", self.k_new, "must be a finite number > 0"),
                (self.new_events >= 0, "new_events", self.new_events, "must be >= 0"),
                (_finite(self.k) and self.k > 0, "k", self.k, "must be a finite number > 0"),
                (
                    _finite(self.k_high) and self.k_high > 0,
                    "k_high",
                    self.k_high,
                    "must be a finite number > 0",
                ),
                (_finite(self.high_rating), "high_rating", self.high_rating, "must be finite"),
            ],
        )

    def __call__(self, events: int, rating: float) -> float:
        """K for a player with ``events`` rated events so far and this rating, before the kill."""
        if events < self.new_events:
            return self.k_new
        return self.k_high if rating >= self.high_rating else self.k


class Elo:
    """Fixed-K logistic Elo over kills."""

    kind = "elo"

    def __init__(self, params: EloParams | None = None, name: str = "elo") -> None:
        self.name = name
        self.params = params if params is not None else EloParams()
        self._r: dict[str, float] = {}
        # 10^(d/scale) is computed as exp(d * slope).
        self._slope = math.log(10.0) / self.params.scale

    def predict(self, a: str, b: str, t: float) -> float:
        r = self._r
        r0 = self.params.initial
        return logistic((r.get(a, r0) - r.get(b, r0)) * self._slope)

    def update(self, attacker: str, victim: str, t: float) -> None:
        if attacker == victim:
            return
        r = self._r
        r0 = self.params.initial
        ra = r.get(attacker, r0)
        rb = r.get(victim, r0)
        step = self.params.k * (1.0 - logistic((ra - rb) * self._slope))
        r[attacker] = ra + step
        r[victim] = rb - step

    def rating(self, player: str) -> float:
        return self._r.get(player, self.params.initial)

    def display(self, player: str) -> float:
        return self.rating(player)

    def players(self) -> list[str]:
        return list(self._r)

    def export_state(self) -> dict[str, Any]:
        return state_envelope(
            self.kind,
            params=asdict(self.params),
            ratings=dict(self._r),
        )

    def import_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._r = {str(p): float(r) for p, r in state["ratings"].items()}


class DynamicElo:
    """Logistic Elo whose K follows a ``KSchedule`` (events played and rating, per player)."""

    kind = "elo-dynamic"

    def __init__(
        self,
        schedule: KSchedule | None = None,
        initial: float = 1500.0,
        scale: float = 400.0,
        name: str = "elo-dynamic",
    ) -> None:
        require(
            "models.elo-dynamic",
            [
                (_finite(initial), "initial", initial, "must be finite"),
                (_finite(scale) and scale > 0, "scale", scale, "must be a finite number > 0"),
            ],
        )
        self.name = name
        self.schedule = schedule if schedule is not None else KSchedule()
        self.initial = initial
        self.scale = scale
        self._slope = math.log(10.0) / scale
        self._r: dict[str, float] = {}
        self._n: dict[str, int] = {}

    def predict(self, a: str, b: str, t: float) -> float:
        r = self._r
        r0 = self.initial
        return logistic((r.get(a, r0) - r.get(b, r0)) * self._slope)

    def update(self, attacker: str, victim: str, t: float) -> None:
        if attacker == victim:
            return
        r = self._r
        n = self._n
        ra = r.get(attacker, self.initial)
        rb = r.get(victim, self.initial)
        na = n.get(attacker, 0)
        nb = n.get(victim, 0)
        # Each side moves by its own K, so the update is zero-sum only when the two Ks agree.
        miss = 1.0 - logistic((ra - rb) * self._slope)
        r[attacker] = ra + self.schedule(na, ra) * miss
        r[victim] = rb - self.schedule(nb, rb) * miss
        n[attacker] = na + 1
        n[victim] = nb + 1

    def events(self, player: str) -> int:
        """Rated events (kills and deaths) of ``player`` so far."""
        return self._n.get(player, 0)

    def rating(self, player: str) -> float:
        return self._r.get(player, self.initial)

    def display(self, player: str) -> float:
        return self.rating(player)

    def players(self) -> list[str]:
        return list(self._r)

    def export_state(self) -> dict[str, Any]:
        return state_envelope(
            self.kind,
            schedule=asdict(self.schedule),
            initial=self.initial,
            scale=self.scale,
            ratings=dict(self._r),
            events=dict(self._n),
        )

    def import_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._r = {str(p): float(r) for p, r in state["ratings"].items()}
        self._n = {str(p): int(k) for p, k in state["events"].items()}


def logistic(x: float) -> float:
    """1 / (1 + e^-x), without overflow for large |x|."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
