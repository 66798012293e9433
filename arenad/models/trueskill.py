"""TrueSkill for pairwise kills (Herbrich, Minka & Graepel 2006; seed 002, "TrueSkill").

Each player's skill is N(μ, σ²); a game's performance adds N(0, β²). Before each game the
dynamics noise τ² is added to both variances. With σ_a², σ_b² after that step (seed 002):

    c² = 2β² + σ_a² + σ_b²,   x = (μ_a − μ_b − ε)/c,
    v(x) = N(x)/Φ(x),         w(x) = v(x)(v(x) + x),
    μ_a' = μ_a + (σ_a²/c) v,  μ_b' = μ_b − (σ_b²/c) v,
    σ_a'² = σ_a² (1 − (σ_a²/c²) w),  σ_b'² = σ_b² (1 − (σ_b²/c²) w).

A kill cannot be a draw, so the draw margin ε is 0 by default; ``draw_margin`` converts a draw
probability into ε for the general two-player case (the reference ``trueskill`` package uses a
draw probability of 0.10).

Prediction: P(a kills b) = Φ((μ_a − μ_b)/c) with the same c as the update, that is including
the τ² the update adds before the game, so p(a, b) + p(b, a) = 1.

Scale: μ (μ0 = 25). Display: the conservative rating μ − 3σ (seed 002, k = 3).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

from arenad.models.base import check_state, require, state_envelope

_SQRT1_2 = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
# Below this x, N(x) and Φ(x) near the end of the normal float range; the asymptotic Mills-ratio
# series (terms up to x⁻¹⁰) is then accurate to about 1e-15.
_TAIL = -37.0


@dataclass(frozen=True, slots=True)
class TrueSkillParams:
    """The usual TrueSkill defaults: μ0 = 25, σ0 = μ0/3, β = σ0/2, τ = σ0/100, no draws."""

    mu0: float = 25.0
    sigma0: float = 25.0 / 3.0
    beta: float = 25.0 / 6.0
    tau: float = 25.0 / 300.0
    draw_margin: float = 0.0

    def __post_init__(self) -> None:
        pos = "must be a finite number > 0"
        require(
            "models.trueskill",
            [
                (_finite(self.mu0), "mu0", self.mu0, "must be finite"),
                (_finite(self.sigma0) and self.sigma0 > 0, "sigma0", self.sigma0, pos),
                (_finite(self.beta) and self.beta > 0, "beta", self.beta, pos),
                (_finite(self.tau) and self.tau >= 0, "tau", self.tau, "must be a finite number >= 0"),
                (
                    _finite(self.draw_margin) and self.draw_margin >= 0,
                    "draw_margin",
                    self.draw_margin,
                    "must be a finite number >= 0",
                ),
            ],
        )


def draw_margin(draw_probability: float, beta: float, players: int = 2) -> float:
    """ε for a given draw probability: Φ⁻¹((p + 1)/2) · √players · β (Herbrich et al.)."""
    if not 0.0 <= draw_probability < 1.0:
        raise ValueError(f"draw_probability={draw_probability!r} must lie in [0, 1)")
    return NormalDist().inv_cdf((draw_probability + 1.0) / 2.0) * math.sqrt(players) * beta


def cdf(x: float) -> float:
    """Φ(x), accurate in both tails."""
    return 0.5 * math.erfc(-x * _SQRT1_2)


def v_w(x: float) -> tuple[float, float]:
    """v(x) = N(x)/Φ(x) and w(x) = v(v + x) of a win with the margin already in ``x``."""
    if x < _TAIL:
        # Φ(x)/N(x) = (1 − 1/x² + 3/x⁴ − 15/x⁶ + 105/x⁸ − 945/x¹⁰ ...)/|x|; w → 1 from below.
        u = 1.0 / (x * x)
        v = -x / (1.0 + u * (-1.0 + u * (3.0 + u * (-15.0 + u * (105.0 - 945.0 * u)))))
    else:
        v = _INV_SQRT_2PI * math.exp(-0.5 * x * x) / cdf(x)
    w = v * (v + x)
    # 0 < w < 1 exactly; rounding in v + x must not take σ'² to zero or below.
    if w > 1.0:
        w = 1.0
    elif w < 0.0:
        w = 0.0
    return v, w


class TrueSkill:
    """Two-player TrueSkill, one kill = one game the attacker won."""

    kind = "trueskill"

    def __init__(self, params: TrueSkillParams | None = None, name: str = "trueskill") -> None:
        self.name = name
        self.params = p = params if params is not None else TrueSkillParams()
        self._prior = (p.mu0, p.sigma0)
        self._tau2 = p.tau * p.tau
        self._2beta2 = 2.0 * p.beta * p.beta
        self._state: dict[str, tuple[float, float]] = {}  # player -> (μ, σ)

    def predict(self, a: str, b: str, t: float) -> float:
        s = self._state
        mu_a, sig_a = s.get(a, self._prior)
        mu_b, sig_b = s.get(b, self._prior)
        c2 = self._2beta2 + sig_a * sig_a + sig_b * sig_b + 2.0 * self._tau2
        return cdf((mu_a - mu_b) / math.sqrt(c2))

    def update(self, attacker: str, victim: str, t: float) -> None:
        if attacker == victim:
            return
        s = self._state
        mu_a, sig_a = s.get(attacker, self._prior)
        mu_b, sig_b = s.get(victim, self._prior)
        var_a = sig_a * sig_a + self._tau2
        var_b = sig_b * sig_b + self._tau2
        c2 = self._2beta2 + var_a + var_b
        c = math.sqrt(c2)
        v, w = v_w((mu_a - mu_b - self.params.draw_margin) / c)
        s[attacker] = (mu_a + var_a / c * v, math.sqrt(var_a * (1.0 - var_a / c2 * w)))
        s[victim] = (mu_b - var_b / c * v, math.sqrt(var_b * (1.0 - var_b / c2 * w)))

    def state_of(self, player: str) -> tuple[float, float]:
        """(μ, σ) of ``player`` (the prior when unknown)."""
        return self._state.get(player, self._prior)

    def rating(self, player: str) -> float:
        return self._state.get(player, self._prior)[0]

    def display(self, player: str) -> float:
        mu, sigma = self._state.get(player, self._prior)
        return mu - 3.0 * sigma

    def players(self) -> list[str]:
        return list(self._state)

    def export_state(self) -> dict[str, Any]:
        return state_envelope(
            self.kind,
            params=asdict(self.params),
            players={p: list(v) for p, v in self._state.items()},
        )

    def import_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._state = {str(p): (float(v[0]), float(v[1])) for p, v in state["players"].items()}


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
