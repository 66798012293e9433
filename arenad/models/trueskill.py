"""TrueSkill for pairwise kills (``trueskill``) and FFA placements (``trueskill-ffa``).

Herbrich, Minka & Graepel 2006; seed 002, "TrueSkill" and "多队伍比赛与因子图推断".

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

Match placements (``trueskill-ffa``, ``rate_match``): every player of an N-player match is a
team of one. The factor graph of Herbrich et al. (Fig. 1; seed 002, "TrueSkill 的联合概率分解"):
skill s_i ~ N(μ_i, σ_i² + τ²) → performance p_i = s_i + N(0, β²) → differences of neighbours
in placement order d_k = p_k − p_{k+1} → a comparison factor on each d_k: 1(d_k > ε) when k
placed above k+1, 1(|d_k| ≤ ε) when the two tied (one group). The comparison factors cut the
Gaussian messages; expectation propagation replaces each truncated d_k by the Gaussian with the
same two moments (v, w above for a win; ``v_w_draw`` for a draw) and the messages run along
the chain until they stop changing (``rate_match``). Two players and no tie: one comparison,
exact, and the update equals the pairwise formulas above with the same ε.

ε comes from ``match_draw_probability`` p (default 0.10, the reference package's default):
ε = Φ⁻¹((p + 1)/2)·√2·β, two players per comparison. It applies to every comparison of the
match, wins included (d > ε), as the model requires. A tie needs ε > 0 (|d| ≤ 0 has
probability 0), so with p = 0 a match without ties is rated and one with a tie refused. Kills
keep ``draw_margin`` (0 by default): a kill is never a draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from arenad.models.base import MuSigmaState, ranked_players, require

_SQRT1_2 = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
# Below this x, N(x) and Φ(x) near the end of the normal float range; the asymptotic Mills-ratio
# series (terms up to x⁻¹⁰) is then accurate to about 1e-15.
_TAIL = -37.0


@dataclass(frozen=True, slots=True)
class TrueSkillParams:
    """The usual TrueSkill defaults: μ0 = 25, σ0 = μ0/3, β = σ0/2, τ = σ0/100, no draws.

    ``draw_margin`` is the ε of a kill (0: a kill is never a draw). ``match_draw_probability``
    gives the ε of every comparison in a match placement (``trueskill-ffa`` only): the chance
    that two neighbouring players of equal skill tie, 0.10 as in the reference package.
    """

    mu0: float = 25.0
    sigma0: float = 25.0 / 3.0
    beta: float = 25.0 / 6.0
    tau: float = 25.0 / 300.0
    draw_margin: float = 0.0
    match_draw_probability: float = 0.10

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
                (
                    _finite(self.match_draw_probability) and 0.0 <= self.match_draw_probability < 1.0,
                    "match_draw_probability",
                    self.match_draw_probability,
                    "must lie in [0, 1)",
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


def _laplace(y: float) -> tuple[float, float, float, float]:
    """D₀ … D₃ of Laplace's continued fraction for y ≥ 5: Φ(−y)/N(y) = 1/D₀.

    D_j = y + (j + 1)/D_{j+1}; 40 terms reach full precision from y = 5 on, 20 from y = 10 on.
    Unlike Φ(−y)/N(y) from ``erfc`` and ``exp`` (which lose about y²/2 units in the last place
    to the rounding of exp's argument), nothing here loses digits.
    """
    d = d1 = d2 = d3 = y
    for j in range(40 if y < 10.0 else 20, 0, -1):
        if j == 3:
            d3 = d
        d = y + j / d
        if j == 3:
            d2 = d
        elif j == 2:
            d1 = d
    return d, d1, d2, d3


def _mills(x: float) -> float:
    """Φ(x)/N(x) for x < 0, to full precision also where both underflow."""
    if x > -5.0:
        return cdf(x) / (_INV_SQRT_2PI * math.exp(-0.5 * x * x))
    return 1.0 / _laplace(-x)[0]


def v_w_draw(t: float, e: float) -> tuple[float, float]:
    """v and w of a draw |d| ≤ ε, with t = μ_d/σ_d and e = ε/σ_d > 0 (seed 002, draws).

    The truncated Gaussian's mean is t + v and its variance 1 − w (standardised): with
    a = e − |t|, b = −e − |t| and Z = Φ(a) − Φ(b), v = sign(t)·(N(b) − N(a))/Z and
    w = v² + (a·N(a) − b·N(b))/Z. Deep in the tail (a < −5) Z loses its digits; dividing
    through by N(a) (r = N(b)/N(a) = exp(−2e|t|) and the Mills ratios Φ/N) keeps them. Far
    out (|t| in the hundreds) 1 − w itself cancels: w is then good to about t²·1e-16.
    """
    u = t if t >= 0.0 else -t
    a = e - u
    b = -e - u
    if a > -5.0:
        n_a = _INV_SQRT_2PI * math.exp(-0.5 * a * a)
        n_b = _INV_SQRT_2PI * math.exp(-0.5 * b * b)
        z = cdf(a) - cdf(b)
        v = (n_b - n_a) / z
        w = v * v + (a * n_a - b * n_b) / z
    else:
        r = math.exp(-2.0 * e * u)
        den = _mills(a) - r * _mills(b)
        v = math.expm1(-2.0 * e * u) / den
        w = v * v + (a - b * r) / den
    if t < 0.0:
        v = -v
    # 0 < w < 1 exactly (an interval cut narrows the Gaussian); keep rounding inside.
    if w > 1.0:
        w = 1.0
    elif w < 0.0:
        w = 0.0
    return v, w


def _cut_win(x: float) -> tuple[float, float, float]:
    """v, w and 1 − w of a win, x = (μ_d − ε)/σ_d; 1 − w without cancellation in the tail.

    Far below zero (a big upset) w = v(v + x) → 1 and 1 − w, the variance left after the cut,
    loses its digits to cancellation (at x = −33 only about half of them survive), which is
    noise in every message of the match. There, with y = −x and Laplace's D_j (``_laplace``):
    v = D₀, v + x = 1/D₁, w = D₀/D₁ and 1 − w = (y + 4/D₂ − 3/D₃)/(D₁²·D₂), nothing subtracted.
    """
    if x > -5.0:
        v, w = v_w(x)
        return v, w, 1.0 - w
    y = -x
    d0, d1, d2, d3 = _laplace(y)
    return d0, d0 / d1, (y + 4.0 / d2 - 3.0 / d3) / (d1 * d1 * d2)


#: A cut d_k with w this close to 1 would send an infinitely precise message; only reachable
#: for a standardised difference beyond ~1e6, where rounding decides anyway.
_W_MAX = 1.0 - 1e-12
#: ``rate_match`` stops when no comparison's Gaussian (mean, standard deviation) moves more than
#: this (μ scale) in a sweep. Rounding leaves ~1e-11 of noise, more after a draw hundreds of σ
#: from where the two players were expected (see ``v_w_draw``).
MATCH_TOLERANCE = 1e-9
#: Sweeps ``rate_match`` makes at most: typical matches converge in 4-8 (256 players included);
#: the cap only bounds the cost of a match whose noise floor lies above the tolerance.
MATCH_MAX_SWEEPS = 50


def rate_match(
    ratings: Sequence[tuple[float, float]],
    ties: Sequence[bool],
    *,
    beta: float,
    tau: float,
    margin: float,
    tolerance: float = MATCH_TOLERANCE,
    max_sweeps: int = MATCH_MAX_SWEEPS,
) -> list[tuple[float, float]]:
    """Ratings (μ, σ) after one FFA match: expectation propagation on the TrueSkill factor graph.

    ``ratings`` are in placement order, best first; ``ties[k]`` says that players k and k + 1
    tied (``len(ties) == len(ratings) − 1``). ``margin`` is ε. Returns the new (μ, σ) in the same
    order. Herbrich et al. 2006, §2 and Fig. 1; messages in natural parameters (precision π and
    precision-adjusted mean η = μπ), as seed 002 ("近似消息传递") writes them.

    Schedule (Herbrich et al.'s, also the reference package's): the prior → performance
    messages once; then sweeps along the chain of differences, down from the first to the last
    comparison (each sends its new message to the right-hand performance) and back up (to the
    left-hand one), until no comparison's Gaussian moves by more than ``tolerance``; then the
    two chain ends and performance → skill.
    """
    n = len(ratings)
    if len(ties) != max(n - 1, 0):
        raise ValueError(f"ties has {len(ties)} entries, expected {max(n - 1, 0)} for {n} players")
    if margin <= 0.0 and any(ties):
        raise ValueError(f"a tie needs a draw margin > 0, got margin={margin!r}")
    if n < 2:
        return list(ratings)
    beta2 = beta * beta
    tau2 = tau * tau
    # Prior factor (with the dynamics τ²) and performance factor (β²): the message into p_i.
    skill_var = [sigma * sigma + tau2 for _, sigma in ratings]
    pi0 = [1.0 / (v + beta2) for v in skill_var]
    eta0 = [mu * pi for (mu, _), pi in zip(ratings, pi0, strict=True)]
    last = n - 2  # comparisons are k = 0 .. last, between p_k and p_{k+1}
    # Messages of difference factor k to its left performance p_k and right one p_{k+1}.
    left_pi = [0.0] * (n - 1)
    left_eta = [0.0] * (n - 1)
    right_pi = [0.0] * (n - 1)
    right_eta = [0.0] * (n - 1)
    # The comparison factor's message to d_k as (mean, variance); variance inf = no information.
    cut_mean = [0.0] * (n - 1)
    cut_var = [math.inf] * (n - 1)
    # d_k's current Gaussian (mean, standard deviation), to see the sweeps converge.
    d_mean = [0.0] * (n - 1)
    d_sd = [0.0] * (n - 1)
    inf = math.inf

    def compare(k: int) -> tuple[float, float, float, float, float]:
        """Difference factor k down, the comparison factor's moment match; returns its change.

        Also returns the two performances' cavities (mean, variance) for the message back up.
        """
        a_pi = pi0[k] + right_pi[k - 1] if k > 0 else pi0[k]
        a_eta = eta0[k] + right_eta[k - 1] if k > 0 else eta0[k]
        b_pi = pi0[k + 1] + left_pi[k + 1] if k < last else pi0[k + 1]
        b_eta = eta0[k + 1] + left_eta[k + 1] if k < last else eta0[k + 1]
        a_mean = a_eta / a_pi
        b_mean = b_eta / b_pi
        a_var = 1.0 / a_pi
        b_var = 1.0 / b_pi
        mean = a_mean - b_mean
        var = a_var + b_var
        sd = math.sqrt(var)
        if ties[k]:
            v, w = v_w_draw(mean / sd, margin / sd)
            one_minus_w = 1.0 - w
        else:
            v, w, one_minus_w = _cut_win((mean - margin) / sd)
        if one_minus_w < 1.0 - _W_MAX:
            w = _W_MAX
            one_minus_w = 1.0 - _W_MAX
        new_mean = mean + sd * v
        new_sd = sd * math.sqrt(one_minus_w)
        change = max(abs(new_mean - d_mean[k]), abs(new_sd - d_sd[k]))
        d_mean[k] = new_mean
        d_sd[k] = new_sd
        # The message is the new Gaussian divided by the cavity: precision w/(var(1 − w)) and
        # mean (mean·w + sd·v)/w, written so that nothing cancels.
        if w > 0.0:
            cut_mean[k] = mean + sd * v / w
            cut_var[k] = var * one_minus_w / w
        else:
            cut_mean[k] = 0.0
            cut_var[k] = inf
        return change, a_mean, a_var, b_mean, b_var

    def send_right(k: int, a_mean: float, a_var: float) -> None:
        """p_{k+1} = p_k − d_k."""
        var = a_var + cut_var[k]
        if var == inf:
            right_pi[k] = right_eta[k] = 0.0
        else:
            right_pi[k] = 1.0 / var
            right_eta[k] = (a_mean - cut_mean[k]) / var

    def send_left(k: int, b_mean: float, b_var: float) -> None:
        """p_k = d_k + p_{k+1}."""
        var = b_var + cut_var[k]
        if var == inf:
            left_pi[k] = left_eta[k] = 0.0
        else:
            left_pi[k] = 1.0 / var
            left_eta[k] = (cut_mean[k] + b_mean) / var

    if last == 0:
        # One comparison: its cut is exact, nothing to iterate.
        _, a_mean, a_var, b_mean, b_var = compare(0)
        send_left(0, b_mean, b_var)
        send_right(0, a_mean, a_var)
    else:
        for _ in range(max_sweeps):
            delta = 0.0
            for k in range(last):
                change, a_mean, a_var, _, _ = compare(k)
                send_right(k, a_mean, a_var)
                if change > delta:
                    delta = change
            for k in range(last, 0, -1):
                change, _, _, b_mean, b_var = compare(k)
                send_left(k, b_mean, b_var)
                if change > delta:
                    delta = change
            if delta <= tolerance:
                break
        # The chain ends: the left message of the first comparison, the right one of the last.
        _, a_mean, a_var, b_mean, b_var = compare(0)
        send_left(0, b_mean, b_var)
        _, a_mean, a_var, b_mean, b_var = compare(last)
        send_right(last, a_mean, a_var)
    out: list[tuple[float, float]] = []
    for i, (mu, _) in enumerate(ratings):
        # Everything the match says about p_i, then back through the performance factor (+β²).
        m_pi = (left_pi[i] if i <= last else 0.0) + (right_pi[i - 1] if i > 0 else 0.0)
        m_eta = (left_eta[i] if i <= last else 0.0) + (right_eta[i - 1] if i > 0 else 0.0)
        shrink = 1.0 / (1.0 + beta2 * m_pi)
        post_pi = 1.0 / skill_var[i] + shrink * m_pi
        post_eta = mu / skill_var[i] + shrink * m_eta
        out.append((post_eta / post_pi, math.sqrt(1.0 / post_pi)))
    return out


class TrueSkill(MuSigmaState):
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


class TrueSkillFFA(TrueSkill):
    """TrueSkill that also rates FFA match placements (``update_match``): kills as ``trueskill``."""

    kind = "trueskill-ffa"

    def __init__(self, params: TrueSkillParams | None = None, name: str = "trueskill-ffa") -> None:
        super().__init__(params, name)
        p = self.params
        # FFA: every comparison is between two teams of one player, so "players" is 2.
        self._match_margin = draw_margin(p.match_draw_probability, p.beta, players=2)

    def update_match(self, placements: Sequence[Sequence[str]], t: float) -> None:
        """Rate one match: groups of players best first, a group tied (``rate_match``).

        The players of a tied group are chained in the order given (a draw factor between each
        two neighbours, as in Herbrich et al. and the reference package), so their order inside
        the group matters a little: in [[a], [b, c], [d]], b is compared with a and c with d.
        """
        order, place = ranked_players(placements)
        # Between each two neighbours in the chain: a draw when they share a group.
        ties = [place[i] == place[i - 1] for i in range(1, len(order))]
        if len(order) < 2:
            return  # nobody to compare with: nothing learnt
        if self._match_margin <= 0.0 and any(ties):
            raise ValueError(
                f"placements with a tie need match_draw_probability > 0, "
                f"got {self.params.match_draw_probability!r}"
            )
        p = self.params
        s = self._state
        prior = self._prior
        new = rate_match(
            [s.get(player, prior) for player in order],
            ties,
            beta=p.beta,
            tau=p.tau,
            margin=self._match_margin,
        )
        for player, rating in zip(order, new, strict=True):
            s[player] = rating


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
