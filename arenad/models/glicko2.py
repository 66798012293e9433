"""Glickman's Glicko-2 (seed 001 §1): per kill (``glicko2``), in rating periods (``glicko2-period``)
and for match placements with fractional weights (``glicko2-mp``, seed 001 §2).

State per player on the Glicko-2 scale: μ = (r − 1500)/173.7178, φ = RD/173.7178 and the
volatility σ. One rating period (``rate_period``, seed 001 §1.2 and Glickman's "Example of the
Glicko-2 system"):

1. v = [Σ g(φ_j)² E_j (1 − E_j)]⁻¹ and Δ = v Σ g(φ_j)(s_j − E_j), with g(φ) = 1/√(1 + 3φ²/π²)
   and E_j = 1/(1 + exp(−g(φ_j)(μ − μ_j)));
2. σ' by the Illinois (regula falsi) iteration on f(x), x = ln σ'², to within ε = 1e-6;
3. φ* = √(φ² + σ'²), φ' = 1/√(1/φ*² + 1/v), μ' = μ + φ'² Σ g(φ_j)(s_j − E_j).

A player with no game in a period keeps μ and σ and gets φ' = φ* = √(φ² + σ²).

Kills as games: the attacker scores 1 against the victim, the victim 0 against the attacker.
``glicko2`` makes every kill a rating period of its own for both players (no time-based RD
growth); ``glicko2-period`` collects outcomes in periods of ``period_seconds`` of event time and
applies them at each boundary, against the opponents' ratings at the start of the period.

Prediction for a pair: E = 1/(1 + exp(−g(√(φ_a² + φ_b²))(μ_a − μ_b))), so p(a, b) + p(b, a) = 1.

Scale: r = 1500 + 173.7178 μ. Display: the conservative rating r − 3·RD (seed 001 §1.2 step 5).

``glicko2-mp`` (seed 001 §2): an N-player match is one rating period for each of its players,
who plays every other one as a pairwise game (score 1 against those placed below, ½ against
those tied, 0 against those above) of weight w = 1/(N − 1) (§2.2). The weighted sums (§2.3)
v_w = [Σ w g(φ_j)² E_j(1 − E_j)]⁻¹ and Δ_w = v_w Σ w g(φ_j)(s_j − E_j) go through the same
Illinois volatility step and φ', μ' as above, so a match is worth one game whatever N (§2.1:
N − 1 unweighted games would shrink φ as if N − 1 games had been played). Opponents are taken
at their pre-match values. N = 2 gives w = 1: a kill is the match [[attacker], [victim]] and
rates exactly as ``glicko2`` does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from arenad.models.base import check_state, ranked_players, require, state_envelope

#: r = 1500 + SCALE·μ and RD = SCALE·φ (Glickman).
SCALE = 173.7178
R0 = 1500.0
_3_OVER_PI2 = 3.0 / (math.pi * math.pi)
_MAX_ITERATIONS = 200  # only bounds a stall: the Illinois iteration converges long before


@dataclass(frozen=True, slots=True)
class Glicko2Params:
    """Prior (r, RD, σ on the public scale), τ, the volatility tolerance ε and the period length.

    ``rd_max`` bounds the RD growth of players idle for many periods (``glicko2-period`` only):
    Glicko-2 itself lets φ grow without limit; capping it at the prior RD is Glickman's Glicko-1
    rule, and keeps a long-absent player at "unknown" instead of beyond it.
    """

    r0: float = R0
    rd0: float = 350.0
    sigma0: float = 0.06
    tau: float = 0.5
    epsilon: float = 1e-6
    period_seconds: float = 3600.0
    rd_max: float = 350.0

    def __post_init__(self) -> None:
        pos = "must be a finite number > 0"
        require(
            "models.glicko2",
            [
                (_finite(self.r0), "r0", self.r0, "must be finite"),
                (_finite(self.rd0) and self.rd0 > 0, "rd0", self.rd0, pos),
                (_finite(self.sigma0) and self.sigma0 > 0, "sigma0", self.sigma0, pos),
                (_finite(self.tau) and self.tau > 0, "tau", self.tau, pos),
                (_finite(self.epsilon) and self.epsilon > 0, "epsilon", self.epsilon, pos),
                (
                    _finite(self.period_seconds) and self.period_seconds > 0,
                    "period_seconds",
                    self.period_seconds,
                    pos,
                ),
                (_finite(self.rd_max) and self.rd_max > 0, "rd_max", self.rd_max, pos),
            ],
        )


@dataclass(frozen=True, slots=True)
class Glicko2Rating:
    """One player's (μ, φ, σ) on the Glicko-2 scale."""

    mu: float
    phi: float
    sigma: float

    @classmethod
    def from_public(cls, r: float, rd: float, sigma: float) -> Glicko2Rating:
        """From the public scale (r = 1500 ± ..., RD)."""
        return cls((r - R0) / SCALE, rd / SCALE, sigma)

    @property
    def r(self) -> float:
        return R0 + SCALE * self.mu

    @property
    def rd(self) -> float:
        return SCALE * self.phi


def g(phi: float) -> float:
    """Glickman's g(φ) = 1/√(1 + 3φ²/π²)."""
    return 1.0 / math.sqrt(1.0 + _3_OVER_PI2 * phi * phi)


def expected(mu: float, mu_j: float, phi_j: float) -> float:
    """E(μ, μ_j, φ_j) = 1/(1 + exp(−g(φ_j)(μ − μ_j)))."""
    return _logistic(g(phi_j) * (mu - mu_j))


def volatility(phi: float, sigma: float, delta: float, v: float, *, tau: float, epsilon: float) -> float:
    """σ' by Glickman's step 5: the Illinois iteration on f(x) = 0, x = ln σ'²."""
    a = math.log(sigma * sigma)
    phi2 = phi * phi
    d2 = delta * delta
    inv_tau2 = 1.0 / (tau * tau)

    def f(x: float) -> float:
        ex = math.exp(x)
        s = phi2 + v + ex
        return ex * (d2 - phi2 - v - ex) / (2.0 * s * s) - (x - a) * inv_tau2

    lo = a
    if d2 > phi2 + v:
        hi = math.log(d2 - phi2 - v)
    else:
        k = 1
        while f(a - k * tau) < 0.0:
            k += 1
        hi = a - k * tau
    f_lo = f(lo)
    f_hi = f(hi)
    for _ in range(_MAX_ITERATIONS):
        if abs(hi - lo) <= epsilon:
            break
        c = lo + (lo - hi) * f_lo / (f_hi - f_lo)
        f_c = f(c)
        if f_c * f_hi <= 0.0:
            lo, f_lo = hi, f_hi
        else:
            f_lo /= 2.0  # the Illinois step: halve the kept end's value
        hi, f_hi = c, f_c
    return math.exp(lo / 2.0)


def _apply(
    mu: float, phi: float, sigma: float, info: float, gain: float, *, tau: float, epsilon: float
) -> tuple[float, float, float]:
    """Steps 3-8 from the period sums info = Σ g²E(1−E) and gain = Σ g(s − E)."""
    if info <= 0.0:
        # No information (no games, or only certain results in floating point): idle period.
        return mu, math.sqrt(phi * phi + sigma * sigma), sigma
    v = 1.0 / info
    sigma2 = volatility(phi, sigma, v * gain, v, tau=tau, epsilon=epsilon)
    phi2 = 1.0 / math.sqrt(1.0 / (phi * phi + sigma2 * sigma2) + info)
    return mu + phi2 * phi2 * gain, phi2, sigma2


def rate_period(
    player: Glicko2Rating, results: Iterable[tuple[Glicko2Rating, float]], tau: float, epsilon: float = 1e-6
) -> Glicko2Rating:
    """One Glicko-2 rating period: ``player`` after games (opponent at period start, score)."""
    info = 0.0
    gain = 0.0
    for opp, score in results:
        gj = g(opp.phi)
        e = _logistic(gj * (player.mu - opp.mu))
        info += gj * gj * e * (1.0 - e)
        gain += gj * (score - e)
    return Glicko2Rating(*_apply(player.mu, player.phi, player.sigma, info, gain, tau=tau, epsilon=epsilon))


def pair_expected(mu_a: float, phi_a: float, mu_b: float, phi_b: float) -> float:
    """P(a beats b) with both uncertainties: E with g(√(φ_a² + φ_b²))."""
    return _logistic(g(math.sqrt(phi_a * phi_a + phi_b * phi_b)) * (mu_a - mu_b))


class Glicko2:
    """Glicko-2 where every kill is one rating period for the two players involved."""

    kind = "glicko2"

    def __init__(self, params: Glicko2Params | None = None, name: str = "glicko2") -> None:
        self.name = name
        self.params = p = params if params is not None else Glicko2Params()
        self._prior = ((p.r0 - R0) / SCALE, p.rd0 / SCALE, p.sigma0)
        self._state: dict[str, tuple[float, float, float]] = {}  # player -> (μ, φ, σ)

    def predict(self, a: str, b: str, t: float) -> float:
        s = self._state
        mu_a, phi_a, _ = s.get(a, self._prior)
        mu_b, phi_b, _ = s.get(b, self._prior)
        return pair_expected(mu_a, phi_a, mu_b, phi_b)

    def update(self, attacker: str, victim: str, t: float) -> None:
        if attacker == victim:
            return
        s = self._state
        mu_a, phi_a, sig_a = s.get(attacker, self._prior)
        mu_b, phi_b, sig_b = s.get(victim, self._prior)
        tau = self.params.tau
        eps = self.params.epsilon
        # Both sides are rated against the other's pre-kill values (one simultaneous period).
        g_b = g(phi_b)
        e_a = _logistic(g_b * (mu_a - mu_b))
        g_a = g(phi_a)
        e_b = _logistic(g_a * (mu_b - mu_a))
        s[attacker] = _apply(
            mu_a, phi_a, sig_a, g_b * g_b * e_a * (1.0 - e_a), g_b * (1.0 - e_a), tau=tau, epsilon=eps
        )
        s[victim] = _apply(
            mu_b, phi_b, sig_b, g_a * g_a * e_b * (1.0 - e_b), -g_a * e_b, tau=tau, epsilon=eps
        )

    def state_of(self, player: str) -> Glicko2Rating:
        """(μ, φ, σ) of ``player`` (the prior when unknown)."""
        return Glicko2Rating(*self._state.get(player, self._prior))

    def rating(self, player: str) -> float:
        return R0 + SCALE * self._state.get(player, self._prior)[0]

    def display(self, player: str) -> float:
        mu, phi, _ = self._state.get(player, self._prior)
        return R0 + SCALE * (mu - 3.0 * phi)

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
        self._state = {str(p): _triple(v) for p, v in state["players"].items()}


class Glicko2MP(Glicko2):
    """Glicko-2 MP-weighted (seed 001 §2): a match is one period, each pair a game of 1/(N − 1).

    A kill is the two-player match [[attacker], [victim]], of weight 1/(2 − 1) = 1: the
    ``glicko2`` per-kill period, whose ``update`` this class keeps.
    """

    kind = "glicko2-mp"

    def __init__(self, params: Glicko2Params | None = None, name: str = "glicko2-mp") -> None:
        super().__init__(params, name)

    def update_match(self, placements: Sequence[Sequence[str]], t: float) -> None:
        """Rate one match: groups of players best first, players of a group tied."""
        order, place = ranked_players(placements)
        n = len(order)
        if n < 2:
            return  # nobody to play against: nothing learnt
        weight = 1.0 / (n - 1)  # §2.2: the N − 1 games of a player add up to one
        s = self._state
        prior = self._prior
        before = [s.get(player, prior) for player in order]
        gs = [g(phi) for _, phi, _ in before]
        tau = self.params.tau
        eps = self.params.epsilon
        after: list[tuple[float, float, float]] = []
        for i, (mu, phi, sigma) in enumerate(before):
            info = 0.0  # Σ g² E (1 − E)
            gain = 0.0  # Σ g (s − E)
            place_i = place[i]
            for j, (mu_j, _, _) in enumerate(before):
                if j == i:
                    continue
                g_j = gs[j]
                e = _logistic(g_j * (mu - mu_j))
                score = 1.0 if place_i < place[j] else 0.0 if place_i > place[j] else 0.5
                info += g_j * g_j * e * (1.0 - e)
                gain += g_j * (score - e)
            # §2.3: w multiplies both sums (the same w for every opponent of the match).
            after.append(_apply(mu, phi, sigma, weight * info, weight * gain, tau=tau, epsilon=eps))
        for player, rating in zip(order, after, strict=True):
            s[player] = rating


class Glicko2Period:
    """Glicko-2 in rating periods of ``period_seconds``: outcomes collected, applied at boundaries.

    Period k is [k·period_seconds, (k+1)·period_seconds). Ratings only change when an event (or
    a prediction) at a later period closes the open one. An event older than the open period is
    counted in the open period. Idle periods are applied lazily: a player last rated at the end
    of period ℓ enters period k with φ² + (k − 1 − ℓ)σ², capped at ``rd_max`` (see
    ``Glicko2Params``), which is what k − 1 − ℓ idle updates φ ← √(φ² + σ²) would give.
    """

    kind = "glicko2-period"

    def __init__(self, params: Glicko2Params | None = None, name: str = "glicko2-period") -> None:
        self.name = name
        self.params = p = params if params is not None else Glicko2Params()
        self._prior = ((p.r0 - R0) / SCALE, p.rd0 / SCALE, p.sigma0)
        self._phi_max = p.rd_max / SCALE
        # player -> [μ, φ, σ, last period whose update is included]
        self._state: dict[str, list[float]] = {}
        # player -> [Σ g²E(1−E), Σ g(s−E)] over the open period
        self._pending: dict[str, list[float]] = {}
        self._period: int | None = None

    # -- time ----------------------------------------------------------------------------
    def _advance(self, t: float) -> int:
        """Close the open period if ``t`` lies beyond it; return the period to count in."""
        if not math.isfinite(t):
            raise ValueError(f"event time t={t!r} is not finite")
        k = math.floor(t / self.params.period_seconds)
        open_k = self._period
        if open_k is None:
            self._period = k
            return k
        if k <= open_k:
            return open_k
        self._close(open_k)
        self._period = k
        return k

    def _close(self, k: int) -> None:
        tau = self.params.tau
        eps = self.params.epsilon
        state = self._state
        for player, (info, gain) in self._pending.items():
            st = state[player]
            mu, phi, sigma = _apply(st[0], self._phi_at(st, k), st[2], info, gain, tau=tau, epsilon=eps)
            st[0] = mu
            st[1] = phi
            st[2] = sigma
            st[3] = k
        self._pending = {}

    def _phi_at(self, st: list[float], k: int) -> float:
        """φ at the start of period ``k`` after the idle periods since the last update."""
        idle = k - 1 - st[3]
        phi = st[1]
        if idle <= 0:
            return phi
        grown = math.sqrt(phi * phi + idle * st[2] * st[2])
        if grown > self._phi_max:
            return phi if phi > self._phi_max else self._phi_max
        return grown

    def _entry(self, player: str, k: int) -> list[float]:
        st = self._state.get(player)
        if st is None:
            mu, phi, sigma = self._prior
            st = self._state[player] = [mu, phi, sigma, k - 1]
        return st

    # -- the protocol ----------------------------------------------------------------------
    def predict(self, a: str, b: str, t: float) -> float:
        k = self._advance(t)
        mu_a, phi_a = self._current(a, k)
        mu_b, phi_b = self._current(b, k)
        return pair_expected(mu_a, phi_a, mu_b, phi_b)

    def update(self, attacker: str, victim: str, t: float) -> None:
        if attacker == victim:
            return
        k = self._advance(t)
        sa = self._entry(attacker, k)
        sb = self._entry(victim, k)
        mu_a = sa[0]
        mu_b = sb[0]
        g_a = g(self._phi_at(sa, k))
        g_b = g(self._phi_at(sb, k))
        e_a = _logistic(g_b * (mu_a - mu_b))
        e_b = _logistic(g_a * (mu_b - mu_a))
        pending = self._pending
        acc = pending.get(attacker)
        if acc is None:
            acc = pending[attacker] = [0.0, 0.0]
        acc[0] += g_b * g_b * e_a * (1.0 - e_a)
        acc[1] += g_b * (1.0 - e_a)
        acc = pending.get(victim)
        if acc is None:
            acc = pending[victim] = [0.0, 0.0]
        acc[0] += g_a * g_a * e_b * (1.0 - e_b)
        acc[1] -= g_a * e_b

    def _current(self, player: str, k: int) -> tuple[float, float]:
        """(μ, φ) in effect during the open period ``k``."""
        st = self._state.get(player)
        if st is None:
            return self._prior[0], self._prior[1]
        return st[0], self._phi_at(st, k)

    def state_of(self, player: str) -> Glicko2Rating:
        """(μ, φ, σ) of ``player`` in effect now (idle growth up to the open period included)."""
        st = self._state.get(player)
        if st is None:
            return Glicko2Rating(*self._prior)
        k = self._period if self._period is not None else int(st[3]) + 1
        return Glicko2Rating(st[0], self._phi_at(st, k), st[2])

    def rating(self, player: str) -> float:
        st = self._state.get(player)
        return R0 + SCALE * (self._prior[0] if st is None else st[0])

    def display(self, player: str) -> float:
        s = self.state_of(player)
        return R0 + SCALE * (s.mu - 3.0 * s.phi)

    def players(self) -> list[str]:
        return list(self._state)

    def export_state(self) -> dict[str, Any]:
        return state_envelope(
            self.kind,
            params=asdict(self.params),
            period=self._period,
            players={p: list(v) for p, v in self._state.items()},
            pending={p: list(v) for p, v in self._pending.items()},
        )

    def import_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        period = state["period"]
        self._period = None if period is None else int(period)
        self._state = {
            str(p): [float(v[0]), float(v[1]), float(v[2]), int(v[3])] for p, v in state["players"].items()
        }
        self._pending = {str(p): [float(v[0]), float(v[1])] for p, v in state["pending"].items()}


def _logistic(x: float) -> float:
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _triple(v: Any) -> tuple[float, float, float]:
    return float(v[0]), float(v[1]), float(v[2])


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
