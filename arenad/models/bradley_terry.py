"""Bradley–Terry: one penalised maximum-likelihood fit over every kill (``bradley-terry``, offline).

Seed 002 ("Bradley–Terry 模型", "从比赛结果到最大似然估计"): each player has one strength θ and
P(A beats B) = σ(θ_A − θ_B). Elo is that model fitted by one stochastic-gradient step per game;
Bradley–Terry maximises the log-likelihood ℓ(θ) = Σ_t [y_t log p_t + (1 − y_t) log(1 − p_t)] of
the whole history at once. That is the Arena's reason for leaving online Elo: with the full
record and static players, the order of the games carries no information. Here a kill is a win
of the attacker over the victim. Players whose skill drifts are the Whole-History Rating's job
(``arenad.models.whr``). This model is the "best static fit" reference.

**Scale.** Ratings are on the Elo scale, like Arena Scores (seed 002, "Arena Score 为什么看起来像
Elo"): R = initial + θ · scale / ln 10, so P(A beats B) = 1 / (1 + 10^((R_B − R_A)/scale)). Only
differences R_A − R_B carry meaning.

**Prior.** Every player gets a Gaussian prior N(initial, prior_sd²), i.e. an L2 penalty
(θ²/2)/prior_sd² in natural units, so the fit is a MAP estimate. The default is weak (1000 Elo)
and does two jobs. It makes the optimum unique: the likelihood alone does not change when every
θ is shifted by the same amount. It also keeps a player who only won, or only lost, at a finite
rating, where the plain MLE runs off to ±∞. The likelihood's gradient always sums to zero over
the players, since each kill adds y − p to one player and takes it from the other. At the
optimum the prior's gradient must then sum to zero too, and as every player shares the prior
mean, the mean rating of the rated players is exactly ``initial``. That is the anchor.

**Fit.** Newton's method on the log posterior, with a backtracking (Armijo) line search so that
players who only won cannot make it overshoot. The Hessian is the weighted graph Laplacian of
the kill graph, Σ n_ij p_ij (1 − p_ij) (e_i − e_j)(e_i − e_j)ᵀ, plus the prior precision on the
diagonal. Up to ``dense_max`` players each Newton step solves it directly. Above that it uses
conjugate gradients with Hessian-vector products and a Jacobi preconditioner, so the cost grows
with the number of distinct pairs, not with P². Kills are first aggregated into (pair, wins)
counts. The fit stops when the largest Newton step is below ``tolerance`` Elo, or when a step's
gain is too small for the log posterior to resolve in floating point (:func:`converged`).

**Uncertainty.** The Laplace approximation: θ ≈ N(θ̂, H⁻¹) with H the negative Hessian at θ̂,
i.e. the observed Fisher information plus the prior precision. As with the Arena's ``±``
(seed 002, "Arena Score 后面的置信区间"), this is the sampling error of the estimate, not a skill
distribution. The data do not fix the common shift, and the ratings are reported with their mean
anchored. So the reported covariance is that of the anchored ratings: H⁻¹ with the common-shift
direction projected out. That direction is an eigenvector of H with eigenvalue 1/prior_sd², since
every player has the same prior. Otherwise the prior's vague knowledge of the absolute level,
prior_sd²/P, would be added to every interval. ``rank_spread`` samples ratings from this Gaussian
and reports percentiles of each player's rank, like the Arena's Rank Spread next to the raw rank
(seed 002, "从 Score 到 Rank Spread"). Both need the dense inverse of H, computed once per fit and
only when asked for: O(P³) time, O(P²) memory.

**Display.** The lower bound of the 95% interval, R − 1.96·SE. It is conservative the way
Glicko-2's r − 3·RD is: a player with few kills shows low until the data pin the rating down.

**Refit rule.** The model is offline (``offline = True``). ``update`` only appends the kill to the
history. Whatever is read is computed from a fit, and a fit is redone lazily:

* ``rating``, ``display``, ``confidence_intervals``, ``rank_spread``, ``leaderboard``,
  ``export_state`` and ``fit()`` refit whenever any kill arrived since the last fit, so what they
  report is always the fit of the whole history;
* ``predict``, the per-event call of a walk-forward evaluation, refits only once the kills added
  since the last fit reach ``refit_every`` or reach the number of kills in that fit. Until then it
  predicts with the last fit, and a player who is new since then is rated at the prior. Early in
  a stream the fit therefore follows closely (refits after 1, 2, 4, 8, ... kills). Later it lags
  by fewer than ``refit_every`` kills. A stream of n kills costs about n / refit_every +
  log₂(refit_every) fits, not n.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from arenad.models.base import check_state, require, state_envelope
from arenad.models.elo import logistic

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

LN10 = math.log(10.0)
#: z of the two-sided 95% interval: the display rule R − Z95·SE.
Z95 = NormalDist().inv_cdf(0.975)
ARMIJO = 1e-4  # sufficient-increase constant of the line search (the textbook value)
MIN_STEP = 2.0**-30  # the line search gives up (and the fit stops) below this step fraction
#: A log posterior's increase below this fraction of its size is lost in rounding (the sum runs
#: over up to ~10⁵ terms): the line search cannot see it, so Newton stops there (``converged``).
RESOLUTION = 1e-12
_CG_RTOL = 1e-10  # conjugate gradients: residual relative to the gradient


@dataclass(frozen=True, slots=True)
class BradleyTerryParams:
    """Scale and prior (Elo points), the refit rule and the solver's stopping rule.

    ``prior_sd`` is the standard deviation of every player's Gaussian prior around ``initial``.
    ``refit_every`` bounds how many kills ``predict`` may lag behind the history. ``tolerance``
    is the largest Newton step, in Elo, at which the fit stops. ``dense_max`` is the largest
    number of players whose Newton steps are solved with the dense Hessian.
    """

    initial: float = 1500.0
    scale: float = 400.0
    prior_sd: float = 1000.0
    refit_every: int = 1000
    tolerance: float = 1e-6
    max_iterations: int = 100
    dense_max: int = 500

    def __post_init__(self) -> None:
        pos = "must be a finite number > 0"
        require(
            "models.bradley-terry",
            [
                (_finite(self.initial), "initial", self.initial, "must be finite"),
                (_finite(self.scale) and self.scale > 0, "scale", self.scale, pos),
                (_finite(self.prior_sd) and self.prior_sd > 0, "prior_sd", self.prior_sd, pos),
                (_count(self.refit_every, 1), "refit_every", self.refit_every, "must be an integer >= 1"),
                (_finite(self.tolerance) and self.tolerance > 0, "tolerance", self.tolerance, pos),
                (
                    _count(self.max_iterations, 1),
                    "max_iterations",
                    self.max_iterations,
                    "must be an integer >= 1",
                ),
                (_count(self.dense_max, 0), "dense_max", self.dense_max, "must be an integer >= 0"),
            ],
        )


class PairCounts(NamedTuple):
    """Kills aggregated per unordered pair ``i < j``: ``n`` kills between them, ``wins`` by ``i``."""

    i: IntArray
    j: IntArray
    n: FloatArray
    wins: FloatArray


class LeaderboardRow(NamedTuple):
    """One leaderboard line: raw rank by rating, the interval and the rank spread (seed 002)."""

    rank: int
    player: str
    rating: float
    lower: float
    upper: float
    rank_low: int
    rank_median: int
    rank_high: int
    kills: int
    deaths: int


# -------------------------------------------------------------------------------- the maths
def pair_counts(winners: npt.ArrayLike, losers: npt.ArrayLike, n_players: int) -> PairCounts:
    """Aggregate (winner, loser) index pairs into per-pair totals; self-pairs must be filtered out."""
    w = np.asarray(winners, dtype=np.int64)
    l_ = np.asarray(losers, dtype=np.int64)
    lo = np.minimum(w, l_)
    key = lo * n_players + np.maximum(w, l_)
    keys, inverse = np.unique(key, return_inverse=True)
    n = np.bincount(inverse, minlength=len(keys)).astype(np.float64)
    wins = weighted_count(inverse, (w == lo).astype(np.float64), len(keys))
    return PairCounts(keys // n_players, keys % n_players, n, wins)


def weighted_count(index: IntArray, weights: FloatArray, size: int) -> FloatArray:
    """Σ of ``weights`` per value of ``index`` in 0..size−1 (``numpy.bincount``, typed as floats)."""
    return np.asarray(np.bincount(index, weights, size), dtype=np.float64)


def sigmoid(x: FloatArray) -> FloatArray:
    """σ(x) = 1/(1 + e^−x) elementwise, without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    out: FloatArray = np.where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))
    return out


def log_sigmoid(x: FloatArray) -> FloatArray:
    """log σ(x) elementwise, without overflow."""
    out: FloatArray = -np.logaddexp(0.0, -x)
    return out


def log_posterior(theta: FloatArray, pairs: PairCounts, precision: float) -> float:
    """Σ_pairs [wins log σ(θ_i − θ_j) + losses log σ(θ_j − θ_i)] − (precision/2) Σ θ² (natural units)."""
    d = theta[pairs.i] - theta[pairs.j]
    ll = pairs.wins @ log_sigmoid(d) + (pairs.n - pairs.wins) @ log_sigmoid(-d)
    return float(ll - 0.5 * precision * (theta @ theta))


def gradient(theta: FloatArray, pairs: PairCounts, precision: float) -> tuple[FloatArray, FloatArray]:
    """The gradient of :func:`log_posterior` and the per-pair Hessian weights n p (1 − p)."""
    p = sigmoid(theta[pairs.i] - theta[pairs.j])
    resid = pairs.wins - pairs.n * p  # seed 002: ∂ℓ/∂θ_A = y − p, summed over the pair's games
    size = len(theta)
    g = weighted_count(pairs.i, resid, size) - weighted_count(pairs.j, resid, size) - precision * theta
    return g, pairs.n * p * (1.0 - p)


def hessian(pairs: PairCounts, weights: FloatArray, size: int, precision: float) -> FloatArray:
    """The negative Hessian H = Σ w_ij (e_i − e_j)(e_i − e_j)ᵀ + precision·I, dense."""
    h = np.zeros((size, size))
    h[pairs.i, pairs.j] = -weights  # each unordered pair occurs once, so plain assignment
    h[pairs.j, pairs.i] = -weights
    diag = weighted_count(pairs.i, weights, size) + weighted_count(pairs.j, weights, size) + precision
    h[np.diag_indices(size)] = diag
    return h


def conjugate_gradient(
    matvec: Callable[[FloatArray], FloatArray],
    b: FloatArray,
    precondition: Callable[[FloatArray], FloatArray],
    max_iterations: int,
    rtol: float = _CG_RTOL,
) -> FloatArray:
    """Solve A x = b for a symmetric positive definite A given as ``matvec``, preconditioned."""
    x = np.zeros_like(b)
    r = b.copy()
    stop = rtol * float(np.linalg.norm(b))
    if stop == 0.0:
        return x
    z = precondition(r)
    p = z.copy()
    rz = float(r @ z)
    for _ in range(max_iterations):
        ap = matvec(p)
        alpha = rz / float(p @ ap)
        x += alpha * p
        r -= alpha * ap
        if float(np.linalg.norm(r)) <= stop:
            break
        z = precondition(r)
        rz_next = float(r @ z)
        p = z + (rz_next / rz) * p
        rz = rz_next
    return x


def forcing_term(g: FloatArray) -> float:
    """CG's relative tolerance for one Newton step: loose far from the optimum, tight near it.

    The inexact-Newton forcing term η = min(0.1, ‖g‖) (Dembo, Eisenstat and Steihaug) keeps
    Newton's quadratic convergence, while early steps, which the next iteration corrects anyway,
    take only a few CG iterations.
    """
    return max(_CG_RTOL, min(0.1, float(np.linalg.norm(g))))


def newton_direction(
    theta: FloatArray, pairs: PairCounts, precision: float, dense_max: int
) -> tuple[FloatArray, FloatArray]:
    """The gradient g and the Newton step δ = H⁻¹ g (dense solve or preconditioned CG)."""
    g, w = gradient(theta, pairs, precision)
    size = len(theta)
    if size <= dense_max:
        return g, np.asarray(np.linalg.solve(hessian(pairs, w, size, precision), g), dtype=np.float64)
    diag = weighted_count(pairs.i, w, size) + weighted_count(pairs.j, w, size) + precision
    i, j = pairs.i, pairs.j

    def matvec(v: FloatArray) -> FloatArray:
        edge = w * (v[i] - v[j])
        out: FloatArray = precision * v + weighted_count(i, edge, size) - weighted_count(j, edge, size)
        return out

    return g, conjugate_gradient(
        matvec, g, lambda r: r / diag, max_iterations=max(10, 2 * size), rtol=forcing_term(g)
    )


def converged(delta: FloatArray, slope: float, value: float, tolerance: float) -> bool:
    """Whether a Newton step ends the fit: all of it below ``tolerance``, or no visible gain.

    The second case is the Newton decrement g·δ falling below what the log posterior ``value``
    can resolve in floating point. Past it, the line search can no longer tell better from worse
    and would crawl. The full step is still taken, and so close to the optimum its error is
    second order.
    """
    return float(np.max(np.abs(delta), initial=0.0)) < tolerance or slope <= RESOLUTION * max(1.0, abs(value))


def fit_map(
    pairs: PairCounts,
    theta0: FloatArray,
    precision: float,
    *,
    tolerance: float,
    max_iterations: int,
    dense_max: int,
) -> tuple[FloatArray, int]:
    """The MAP θ by Newton's method with an Armijo line search; returns θ and the iterations run.

    ``tolerance`` is on the natural scale: the fit stops once the largest component of a full
    Newton step is below it (the step is still taken), which is quadratic convergence's last mile.
    """
    theta = theta0.astype(np.float64, copy=True)
    value = log_posterior(theta, pairs, precision)
    for iteration in range(1, max_iterations + 1):
        g, delta = newton_direction(theta, pairs, precision, dense_max)
        slope = float(g @ delta)  # > 0: H is positive definite
        if converged(delta, slope, value, tolerance):
            return theta + delta, iteration
        step = 1.0
        while True:
            candidate = theta + step * delta
            cand_value = log_posterior(candidate, pairs, precision)
            if cand_value >= value + ARMIJO * step * slope:
                break
            step *= 0.5
            if step < MIN_STEP:  # no progress left in floating point: θ is the optimum
                return theta, iteration
        theta, value = candidate, cand_value
    return theta, max_iterations


# -------------------------------------------------------------------------------- the model
class OfflineHistory:
    """What the offline models share: players numbered in first-seen order, every kill kept as
    (attacker, victim) numbers, and the lazy refit rule (module docstring, "Refit rule")."""

    params: Any  # has ``refit_every``
    _index: dict[str, int]
    _names: list[str]
    _attackers: list[int]
    _fit_kills: int  # kills covered by the last fit

    def fit(self) -> None:
        raise NotImplementedError

    def _player(self, name: str) -> int:
        i = self._index.get(name)
        if i is None:
            i = self._index[name] = len(self._names)
            self._names.append(name)
        return i

    def _pending(self) -> int:
        return len(self._attackers) - self._fit_kills

    def _refresh(self, *, lag: bool) -> None:
        """Refit if kills are pending; with ``lag``, only once they reach the refit rule's bound."""
        pending = self._pending()
        if pending == 0:
            return
        if lag and pending < min(self.params.refit_every, max(1, self._fit_kills)):
            return
        self.fit()

    def players(self) -> list[str]:
        return list(self._names)


class BradleyTerry(OfflineHistory):
    """Bradley–Terry MAP over the whole kill history, refitted lazily (see the module docstring)."""

    kind = "bradley-terry"
    offline = True
    params: BradleyTerryParams

    def __init__(self, params: BradleyTerryParams | None = None, name: str = "bradley-terry") -> None:
        self.name = name
        self.params = p = params if params is not None else BradleyTerryParams()
        self._to_elo = p.scale / LN10  # R − initial = θ · scale / ln 10
        self._precision = (self._to_elo / p.prior_sd) ** 2  # 1 / prior_sd² in natural units
        self._index: dict[str, int] = {}
        self._names: list[str] = []
        self._attackers: list[int] = []
        self._victims: list[int] = []
        # The last fit: θ (natural units) of the first len(_theta) players, from the first
        # _fit_kills kills of the history.
        self._theta: FloatArray = np.zeros(0)
        self._fit_kills = 0
        self._cov: FloatArray | None = None  # anchored covariance of θ for the current fit
        #: Newton iterations of the last fit and fits done so far (to watch the refit rule).
        self.iterations = 0
        self.fits = 0

    # -- history and fitting -------------------------------------------------------------------
    def fit(self) -> None:
        """Refit over the whole history now if any kill arrived since the last fit."""
        if self._pending() == 0:
            return
        p = self.params
        size = len(self._names)
        pairs = pair_counts(self._attackers, self._victims, size)
        theta0 = np.zeros(size)
        theta0[: len(self._theta)] = self._theta  # warm start from the last fit
        self._theta, self.iterations = fit_map(
            pairs,
            theta0,
            self._precision,
            tolerance=p.tolerance / self._to_elo,
            max_iterations=p.max_iterations,
            dense_max=p.dense_max,
        )
        self._fit_kills = len(self._attackers)
        self._cov = None
        self.fits += 1

    def _theta_of(self, player: str) -> float:
        i = self._index.get(player)
        if i is None or i >= len(self._theta):
            return 0.0
        return float(self._theta[i])

    def _covariance(self) -> FloatArray:
        """Cov(θ̂) of the anchored ratings: H⁻¹ with the common-shift direction projected out."""
        cov = self._cov
        if cov is None:
            size = len(self._theta)
            fitted = self._fit_kills
            pairs = pair_counts(self._attackers[:fitted], self._victims[:fitted], size)
            _, w = gradient(self._theta, pairs, self._precision)
            cov = np.asarray(np.linalg.inv(hessian(pairs, w, size, self._precision)), dtype=np.float64)
            # 1/√P is an eigenvector of H with eigenvalue `precision`: remove its (1/precision)/P.
            cov -= 1.0 / (self._precision * size)
            self._cov = cov
        return cov

    # -- the protocol --------------------------------------------------------------------------
    def predict(self, a: str, b: str, t: float) -> float:
        self._refresh(lag=True)
        return logistic(self._theta_of(a) - self._theta_of(b))

    def update(self, attacker: str, victim: str, t: float) -> None:
        if attacker == victim:
            return
        self._attackers.append(self._player(attacker))
        self._victims.append(self._player(victim))

    def rating(self, player: str) -> float:
        self._refresh(lag=False)
        return self.params.initial + self._to_elo * self._theta_of(player)

    def standard_error(self, player: str) -> float:
        """The standard error of ``player``'s rating in Elo (``prior_sd`` when unrated)."""
        self._refresh(lag=False)
        i = self._index.get(player)
        if i is None:
            return self.params.prior_sd
        var = float(self._covariance()[i, i])
        return self._to_elo * math.sqrt(var) if var > 0.0 else 0.0

    def display(self, player: str) -> float:
        return self.rating(player) - Z95 * self.standard_error(player)

    # -- the Arena's leaderboard (seed 002) ----------------------------------------------------
    def confidence_intervals(self, level: float = 0.95) -> dict[str, tuple[float, float]]:
        """Each rated player's interval R ± z·SE at ``level`` (Laplace approximation)."""
        if not 0.0 < level < 1.0:
            raise ValueError(f"level={level!r} must lie strictly between 0 and 1")
        self._refresh(lag=False)
        z = NormalDist().inv_cdf(0.5 + level / 2.0)
        out: dict[str, tuple[float, float]] = {}
        for player in self.players():
            r = self.rating(player)
            half = z * self.standard_error(player)
            out[player] = (r - half, r + half)
        return out

    def rank_spread(
        self, samples: int = 1000, seed: int = 0, level: float = 0.95
    ) -> dict[str, tuple[int, int, int]]:
        """Each player's rank (1 = best) at the (1 − level)/2, 50% and (1 + level)/2 percentiles.

        Ratings are drawn ``samples`` times from N(θ̂, Cov) and ranked within each draw, as the
        Arena's Rank Spread (seed 002) reads its confidence intervals.
        """
        if samples < 1:
            raise ValueError(f"samples={samples!r} must be >= 1")
        if not 0.0 < level < 1.0:
            raise ValueError(f"level={level!r} must lie strictly between 0 and 1")
        self._refresh(lag=False)
        size = len(self._theta)
        if size == 0:
            return {}
        # The anchored covariance is singular along the common shift, so draw from the full H⁻¹
        # (positive definite) and centre each draw: the same projection, applied to the noise.
        chol = np.linalg.cholesky(self._covariance() + 1.0 / (self._precision * size))
        rng = np.random.default_rng(seed)
        noise = rng.standard_normal((samples, size)) @ chol.T
        draws = self._theta + (noise - noise.mean(axis=1, keepdims=True))
        # Rank 1 is the highest rating: the rank of each column within each row.
        order = np.argsort(-draws, axis=1, kind="stable")
        ranks = np.empty_like(order)
        np.put_along_axis(ranks, order, np.arange(1, size + 1)[None, :], axis=1)
        qs = np.quantile(
            ranks, [(1.0 - level) / 2.0, 0.5, (1.0 + level) / 2.0], axis=0, method="inverted_cdf"
        )
        return {name: (int(qs[0, k]), int(qs[1, k]), int(qs[2, k])) for k, name in enumerate(self._names)}

    def leaderboard(self, level: float = 0.95, samples: int = 1000, seed: int = 0) -> list[LeaderboardRow]:
        """Rows by rating, best first: raw rank, interval, rank spread, kills and deaths."""
        intervals = self.confidence_intervals(level)
        spread = self.rank_spread(samples, seed, level)
        size = len(self._names)
        kills = np.bincount(np.asarray(self._attackers, dtype=np.int64), minlength=size)
        deaths = np.bincount(np.asarray(self._victims, dtype=np.int64), minlength=size)
        ranked = sorted(range(size), key=lambda k: (-self._theta[k], k))
        rows = []
        for rank, k in enumerate(ranked, start=1):
            name = self._names[k]
            low, median, high = spread[name]
            rows.append(
                LeaderboardRow(
                    rank,
                    name,
                    self.rating(name),
                    intervals[name][0],
                    intervals[name][1],
                    low,
                    median,
                    high,
                    int(kills[k]),
                    int(deaths[k]),
                )
            )
        return rows

    # -- state ---------------------------------------------------------------------------------
    def export_state(self) -> dict[str, Any]:
        self._refresh(lag=False)
        return state_envelope(
            self.kind,
            players=list(self._names),
            kills=[[a, v] for a, v in zip(self._attackers, self._victims, strict=True)],
            fit_kills=self._fit_kills,
            fit=self._theta.tolist(),
        )

    def import_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        names = [str(p) for p in state["players"]]
        kills = [(int(a), int(v)) for a, v in state["kills"]]
        fit = [float(x) for x in state["fit"]]
        fit_kills = int(state["fit_kills"])
        _check_history(names, kills, fit_kills, len(fit))
        self._names = names
        self._index = {p: i for i, p in enumerate(names)}
        self._attackers = [a for a, _ in kills]
        self._victims = [v for _, v in kills]
        self._theta = np.asarray(fit, dtype=np.float64)
        self._fit_kills = fit_kills
        self._cov = None


def _check_history(names: list[str], kills: list[tuple[int, int]], fit_kills: int, fitted: int) -> None:
    """Refuse a state whose kills, fit or players do not fit together (names the bad field)."""
    if len(set(names)) != len(names):
        raise ValueError("state players are not unique")
    size = len(names)
    for a, v in kills:
        if not (0 <= a < size and 0 <= v < size) or a == v:
            raise ValueError(f"state kill [{a}, {v}] is not a pair of two players of {size}")
    if not 0 <= fit_kills <= len(kills):
        raise ValueError(f"state fit_kills={fit_kills} is outside 0..{len(kills)}")
    if fitted > size:
        raise ValueError(f"state fit has {fitted} ratings for {size} players")


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _count(x: int, least: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= least
