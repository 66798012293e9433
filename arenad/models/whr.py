"""Whole-History Rating (Coulom 2008; seed 001 §3): one rating per player per day played (``whr``).

Each player has a rating r_i(d) for every day d = ⌊t / 86400⌋ on which they killed or died, and
the days are tied together by a Wiener-process prior (seed 001 §3.1):
r_i(d₂) − r_i(d₁) ~ N(0, |d₂ − d₁|·w²). The likelihood is Bradley–Terry's (seed 001 §3.2): a kill
on day d is a win of the attacker's r(d) over the victim's r(d), with P = σ(r_a(d) − r_b(d)) in
natural units. The fit is the MAP of the whole history: every day of every player at once.

**w².** Seed 001 §3.1 calibrates w² = 0.002 per day, on the natural scale that its Glicko-2
section also uses (μ = (r − 1500)/173.7178, and 173.7178 = 400/ln 10). Here w² is in Elo² per
day, so the default is that value converted: 0.002 · (400/ln 10)² ≈ 60.36 Elo²/day, i.e. a drift
of about 7.8 Elo in one day and 148 Elo in a year.

**Anchor.** Without more, every player's ratings could shift together without changing the
likelihood. Coulom anchors each player's *first* day with a virtual draw against a virtual
player of rating 0, i.e. ``initial``. The GoShrine implementation (goshrine/whole_history_rating,
``player_day.rb``) counts that draw as one virtual win and one virtual loss, and so does
``virtual_games = 1``; ``virtual_games`` scales both. Near r = initial it acts like a Gaussian
prior of precision virtual_games / 2 in
natural units (log σ(x) + log σ(−x) = −log 4 − x²/4 + O(x⁴)), i.e. a standard deviation of
√(2/virtual_games) · 400/ln 10 ≈ 246 Elo for one virtual draw. That is also the σ of a player the
model has not seen.

**Newton's method, per player (seed 001 §3.3).** With everyone else held fixed, one player's
log posterior has a tridiagonal Hessian: the games of a day sit on the diagonal, and the
Wiener links −1/(w²·Δd) between consecutive days sit next to it. Coulom's Newton step for that
player solves it in O(days) by the Thomas algorithm (:func:`thomas`). Coulom cycles over the
players one at a time, a Gauss–Seidel pass per iteration: ``solver="coulom"`` does exactly that,
with a step-halving safeguard (a Python loop over the players: fine for hundreds of them, slow
for thousands). The default ``solver="newton"`` reaches the same MAP faster. It
takes Newton steps on *all* player-days jointly, with an Armijo line search, and solves each
step's system H δ = g by conjugate gradients, preconditioned with Coulom's per-player tridiagonal
blocks. One preconditioner application is every player's Coulom step computed at once, by a
Thomas sweep vectorised across players (:class:`HistoryGraph`). The kill graph's couplings
between players, which one Gauss–Seidel pass only propagates one player at a time, are what CG
adds. Both solvers stop once the largest change of any rating in one iteration is below
``tolerance`` Elo, or once an iteration's gain is too small for the log posterior to resolve in
floating point (``arenad.models.bradley_terry.converged``).

**Uncertainty and display.** σ per day is Coulom's: the square root of the diagonal of the inverse
of the player's own tridiagonal Hessian at the MAP, i.e. with the opponents held fixed. It is
computed in O(days) from the forward and backward Thomas pivots. The display rating is the
current rating minus two σ, r − 2σ (about a 97.7% one-sided lower bound): conservative like
Glicko-2's r − 3·RD, so a player seen on few days shows low until the data pin them down.

**Predictions.** ``predict(a, b, t)`` uses each player's rating on their latest fitted day ≤ ⌊t/86400⌋.
The Wiener prior's mean stays where the last day left it. Before a player's first day, it uses
the first day's rating; a player the fit has not seen gets the prior ``initial``.
``rating`` is the rating on the player's latest day.

**Refit rule.** It is Bradley–Terry's (``arenad.models.bradley_terry``). ``update`` appends the
kill. ``rating``, ``display``, ``history``, ``export_state`` and ``fit()`` refit whenever kills
arrived since the last fit. ``predict`` refits once the new kills reach ``refit_every`` or the
number of kills in the last fit, and otherwise predicts with the last fit.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from arenad.models.base import check_state, require, state_envelope
from arenad.models.bradley_terry import (
    ARMIJO,
    LN10,
    MIN_STEP,
    RESOLUTION,
    OfflineHistory,
    PairCounts,
    conjugate_gradient,
    converged,
    forcing_term,
    log_sigmoid,
    pair_counts,
    sigmoid,
    weighted_count,
)
from arenad.models.bradley_terry import gradient as pair_gradient
from arenad.models.elo import logistic

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Seed 001 §3.1's w² = 0.002 per day on the natural scale, in Elo² per day.
SEED_W2 = 0.002 * (400.0 / LN10) ** 2
DAY_SECONDS = 86400.0
SOLVERS = ("newton", "coulom")
MAX_SECONDS = 1e15


@dataclass(frozen=True, slots=True)
class WHRParams:
    """The Wiener variance ``w2`` (Elo²/day), the first-day anchor, scale, refit and solver rules.

    ``virtual_games`` is the weight of the first-day virtual draw, which counts as one win and one
    loss against a player rated ``initial``. ``refit_every`` is the refit rule, as in
    ``BradleyTerryParams``. ``tolerance`` (Elo) and ``max_iterations`` stop the
    solver. For ``solver="coulom"`` an iteration is one pass over every player.
    """

    w2: float = SEED_W2
    virtual_games: float = 1.0
    initial: float = 1500.0
    scale: float = 400.0
    day_seconds: float = DAY_SECONDS
    refit_every: int = 1000
    tolerance: float = 1e-6
    max_iterations: int = 100
    solver: str = "newton"

    def __post_init__(self) -> None:
        pos = "must be a finite number > 0"
        require(
            "models.whr",
            [
                (_finite(self.w2) and self.w2 > 0, "w2", self.w2, pos),
                (
                    _finite(self.virtual_games) and self.virtual_games > 0,
                    "virtual_games",
                    self.virtual_games,
                    pos,
                ),
                (_finite(self.initial), "initial", self.initial, "must be finite"),
                (_finite(self.scale) and self.scale > 0, "scale", self.scale, pos),
                (_finite(self.day_seconds) and self.day_seconds > 0, "day_seconds", self.day_seconds, pos),
                (_count(self.refit_every), "refit_every", self.refit_every, "must be an integer >= 1"),
                (_finite(self.tolerance) and self.tolerance > 0, "tolerance", self.tolerance, pos),
                (
                    _count(self.max_iterations),
                    "max_iterations",
                    self.max_iterations,
                    "must be an integer >= 1",
                ),
                (self.solver in SOLVERS, "solver", self.solver, f"must be one of {', '.join(SOLVERS)}"),
            ],
        )


def thomas(lower: npt.ArrayLike, diag: npt.ArrayLike, upper: npt.ArrayLike, rhs: npt.ArrayLike) -> FloatArray:
    """Solve the tridiagonal system A x = rhs by the Thomas algorithm (seed 001 §3.3).

    A has ``diag`` (n) on the diagonal, ``lower`` (n − 1) below it and ``upper`` (n − 1) above it.
    There is no pivoting, which is safe for the diagonally dominant or positive definite systems
    WHR produces: forward elimination, then back substitution, O(n).
    """
    a = np.asarray(lower, dtype=np.float64).tolist()
    b = np.asarray(diag, dtype=np.float64).tolist()
    c = np.asarray(upper, dtype=np.float64).tolist()
    d = np.asarray(rhs, dtype=np.float64).tolist()
    n = len(b)
    if not (len(a) == len(c) == max(n - 1, 0) and len(d) == n):
        raise ValueError(f"thomas: sizes lower={len(a)}, diag={n}, upper={len(c)}, rhs={len(d)} do not match")
    cp = [0.0] * n
    dp = [0.0] * n
    for i in range(n):
        denom = b[i] - (a[i - 1] * cp[i - 1] if i else 0.0)
        cp[i] = c[i] / denom if i < n - 1 else 0.0
        dp[i] = (d[i] - (a[i - 1] * dp[i - 1] if i else 0.0)) / denom
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        x[i] = dp[i] - (cp[i] * x[i + 1] if i < n - 1 else 0.0)
    return np.asarray(x, dtype=np.float64)


class HistoryGraph:
    """The WHR posterior over every (player, day) of a kill history, in natural units.

    Nodes are numbered by layers: node(p, k) = ``layer_start[k] + pos[p]``, where k counts p's
    days from 0, and ``pos`` orders the players by their number of days (most first). Layer k is
    then one contiguous slice, and its players' previous days are a prefix of layer k − 1. This
    lets the Thomas sweeps of all the per-player tridiagonal systems run vectorised across
    players, one layer at a time. Layer 0 holds every player's first day, where the virtual draw
    sits.
    """

    def __init__(
        self,
        attackers: npt.ArrayLike,
        victims: npt.ArrayLike,
        days: npt.ArrayLike,
        n_players: int,
        *,
        w2: float,
        virtual_games: float,
    ) -> None:
        """Kills as player indices 0..n_players−1 (every one in some kill) and integer days; w2 natural."""
        att = np.asarray(attackers, dtype=np.int64)
        vic = np.asarray(victims, dtype=np.int64)
        day = np.asarray(days, dtype=np.int64)
        n = len(att)
        side_player = np.concatenate([att, vic])
        side_day = np.concatenate([day, day])
        order = np.lexsort((side_day, side_player))
        sp = side_player[order]
        sd = side_day[order]
        new = np.ones(len(sp), dtype=bool)
        new[1:] = (sp[1:] != sp[:-1]) | (sd[1:] != sd[:-1])
        unique = np.cumsum(new) - 1
        up = sp[new]  # the distinct (player, day) pairs, sorted by player then day
        ud = sd[new]
        first = np.ones(len(up), dtype=bool)
        first[1:] = up[1:] != up[:-1]
        run_start = np.flatnonzero(first)
        counts = np.diff(np.append(run_start, len(up)))
        if len(counts) != n_players:
            raise ValueError(f"{len(counts)} players have kills, expected n_players={n_players}")
        k = np.arange(len(up)) - np.repeat(run_start, counts)
        by_days = np.argsort(-counts, kind="stable")
        pos = np.empty(n_players, dtype=np.int64)
        pos[by_days] = np.arange(n_players)
        max_days = int(counts.max()) if n_players else 0
        # layer_size[k] = how many players have more than k days
        at_least = np.cumsum(np.bincount(counts, minlength=max_days + 1)[::-1])[::-1]
        layer_size = at_least[1:].astype(np.int64)
        layer_start = np.concatenate([[0], np.cumsum(layer_size)[:-1]]).astype(np.int64)
        node = layer_start[k] + pos[up]

        self.n_players = n_players
        self.n_nodes = len(up)
        self.w2 = w2
        self.virtual_games = virtual_games
        self.days_played = counts
        self._layer_start = layer_start
        self.layer_start = layer_start.tolist()
        self.layer_size = layer_size.tolist()
        self.pos = pos
        #: Nodes in (player, day) order, with where each player's run starts in that order.
        self.sorted_nodes = node
        self.run_start = run_start
        self.node_player = np.empty(self.n_nodes, dtype=np.int64)
        self.node_player[node] = up
        self.node_day = np.empty(self.n_nodes, dtype=np.int64)
        self.node_day[node] = ud
        self.node_k = np.empty(self.n_nodes, dtype=np.int64)
        self.node_k[node] = k
        # Wiener links between a player's consecutive days: precision 1/(w²·Δd) (seed 001 §3.1).
        later = np.flatnonzero(~first)
        self.link_cur = node[later]
        self.link_prev = node[later - 1]
        self.link = 1.0 / (w2 * (ud[later] - ud[later - 1]).astype(np.float64))
        self.link_to_prev = np.zeros(self.n_nodes)
        self.link_to_prev[self.link_cur] = self.link
        self.link_to_next = np.zeros(self.n_nodes)
        self.link_to_next[self.link_prev] = self.link
        side_node = np.empty(2 * n, dtype=np.int64)
        side_node[order] = node[unique]
        self.pairs: PairCounts = pair_counts(side_node[:n], side_node[n:], max(self.n_nodes, 1))
        self._sides: tuple[IntArray, IntArray, FloatArray, FloatArray, IntArray] | None = None
        self._incidence_cache: tuple[FloatArray, IntArray, IntArray, FloatArray] | None = None

    # -- the posterior --------------------------------------------------------------------------
    def nodes_of(self, player: int) -> IntArray:
        """The nodes of ``player``'s days, earliest first."""
        out: IntArray = self._layer_start[: self.days_played[player]] + self.pos[player]
        return out

    def log_posterior(self, theta: FloatArray) -> float:
        """Games' log-likelihood + the first-day virtual draws + the Wiener prior (up to a constant)."""
        pairs = self.pairs
        d = theta[pairs.i] - theta[pairs.j]
        games = pairs.wins @ log_sigmoid(d) + (pairs.n - pairs.wins) @ log_sigmoid(-d)
        first = theta[: self.n_players]
        virtual = self.virtual_games * float(np.sum(log_sigmoid(first) + log_sigmoid(-first)))
        step = theta[self.link_cur] - theta[self.link_prev]
        return float(games + virtual - 0.5 * (self.link @ (step * step)))

    def gradient(self, theta: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The gradient g, the per-pair game weights n p (1 − p) and the block diagonal of −H."""
        size = self.n_nodes
        g, w = pair_gradient(theta, self.pairs, 0.0)
        p = sigmoid(theta[: self.n_players])
        v = self.virtual_games
        g[: self.n_players] += v * (1.0 - 2.0 * p)  # one virtual win and one virtual loss
        step = self.link * (theta[self.link_cur] - theta[self.link_prev])
        g[self.link_cur] -= step  # each node is at most once a link's later and once its earlier end
        g[self.link_prev] += step
        diag = weighted_count(self.pairs.i, w, size) + weighted_count(self.pairs.j, w, size)
        diag[: self.n_players] += 2.0 * v * p * (1.0 - p)
        diag += self.link_to_prev + self.link_to_next
        return g, w, diag

    def hessian_vector(self, w: FloatArray, diag: FloatArray, x: FloatArray) -> FloatArray:
        """(−H) x, from the pair weights and block diagonal that :meth:`gradient` returns."""
        ends, others, weights = self._incidence(w)
        # diag already holds every game's, virtual draw's and link's diagonal part.
        out: FloatArray = diag * x - weighted_count(ends, weights * x[others], self.n_nodes)
        out[self.link_cur] -= self.link * x[self.link_prev]
        out[self.link_prev] -= self.link * x[self.link_cur]
        return out

    def _incidence(self, w: FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
        """Both ends of every pair with their weights, cached per weight vector (one bincount per product)."""
        if self._incidence_cache is None or self._incidence_cache[0] is not w:
            pairs = self.pairs
            self._incidence_cache = (
                w,
                np.concatenate([pairs.i, pairs.j]),
                np.concatenate([pairs.j, pairs.i]),
                np.concatenate([w, w]),
            )
        _, ends, others, weights = self._incidence_cache
        return ends, others, weights

    # -- the per-player tridiagonal blocks, all players at once ---------------------------------
    def block_solve(self, diag: FloatArray, rhs: FloatArray) -> FloatArray:
        """Solve every player's tridiagonal block B x = rhs at once (Thomas, one layer at a time).

        B has ``diag`` on the diagonal and −link between a player's consecutive days: the
        Hessian of each player's log posterior with the others fixed (seed 001 §3.3), so
        ``block_solve(diag, g)`` is every player's Coulom Newton step.
        """
        starts, sizes = self.layer_start, self.layer_size
        up = -self.link_to_next
        low = -self.link_to_prev
        cp = np.empty(self.n_nodes)
        dp = np.empty(self.n_nodes)
        for k, (s, m) in enumerate(zip(starts, sizes, strict=True)):
            cur = slice(s, s + m)
            if k == 0:
                denom = diag[cur]
                dp[cur] = rhs[cur] / denom
            else:
                prv = slice(starts[k - 1], starts[k - 1] + m)
                denom = diag[cur] - low[cur] * cp[prv]
                dp[cur] = (rhs[cur] - low[cur] * dp[prv]) / denom
            cp[cur] = up[cur] / denom
        x = dp.copy()
        for k in range(len(starts) - 2, -1, -1):
            m_next = sizes[k + 1]
            head = slice(starts[k], starts[k] + m_next)
            nxt = slice(starts[k + 1], starts[k + 1] + m_next)
            x[head] -= cp[head] * x[nxt]
        return x

    def block_inverse_diagonal(self, diag: FloatArray) -> FloatArray:
        """diag(B⁻¹) of every player's block from forward and backward pivots, O(nodes).

        For a symmetric tridiagonal B with forward pivots f and backward pivots b, the Schur
        complement of day i is f_i + b_i − B_ii, so (B⁻¹)_ii = 1/(f_i + b_i − B_ii).
        """
        starts, sizes = self.layer_start, self.layer_size
        link = self.link_to_prev
        fwd = diag.copy()
        for k in range(1, len(starts)):
            cur = slice(starts[k], starts[k] + sizes[k])
            prv = slice(starts[k - 1], starts[k - 1] + sizes[k])
            fwd[cur] -= link[cur] ** 2 / fwd[prv]
        bwd = diag.copy()
        for k in range(len(starts) - 2, -1, -1):
            m_next = sizes[k + 1]
            head = slice(starts[k], starts[k] + m_next)
            nxt = slice(starts[k + 1], starts[k + 1] + m_next)
            bwd[head] -= link[nxt] ** 2 / bwd[nxt]
        out: FloatArray = 1.0 / (fwd + bwd - diag)
        return out

    def newton_direction(self, theta: FloatArray, rtol: float | None = None) -> tuple[FloatArray, FloatArray]:
        """The gradient g and the joint Newton step δ = (−H)⁻¹ g over every player-day (PCG).

        CG stops at the residual ``rtol``·‖g‖; by default the inexact-Newton forcing term.
        """
        g, w, diag = self.gradient(theta)
        delta = conjugate_gradient(
            lambda x: self.hessian_vector(w, diag, x),
            g,
            lambda r: self.block_solve(diag, r),
            max_iterations=max(10, min(2 * self.n_nodes, 1000)),
            rtol=forcing_term(g) if rtol is None else rtol,
        )
        return g, delta

    # -- Coulom's one-player-at-a-time Newton step ----------------------------------------------
    def _player_sides(self) -> tuple[IntArray, IntArray, FloatArray, FloatArray, IntArray]:
        """Every pair seen from each end, grouped by the player at that end: (own, opp, n, wins, start)."""
        if self._sides is None:
            pairs = self.pairs
            own = np.concatenate([pairs.i, pairs.j])
            opp = np.concatenate([pairs.j, pairs.i])
            n = np.concatenate([pairs.n, pairs.n])
            wins = np.concatenate([pairs.wins, pairs.n - pairs.wins])
            order = np.argsort(self.node_player[own], kind="stable")
            start = np.searchsorted(self.node_player[own][order], np.arange(self.n_players + 1))
            self._sides = (own[order], opp[order], n[order], wins[order], start.astype(np.int64))
        return self._sides

    def player_terms(self, theta: FloatArray, player: int) -> tuple[float, FloatArray, FloatArray]:
        """``player``'s own log posterior, its gradient and its tridiagonal diagonal (others fixed)."""
        own, opp, n, wins, start = self._player_sides()
        s = slice(int(start[player]), int(start[player + 1]))
        nodes = self.nodes_of(player)
        days = len(nodes)
        local = self.node_k[own[s]]
        d = theta[own[s]] - theta[opp[s]]
        p = sigmoid(d)
        value = float(wins[s] @ log_sigmoid(d) + (n[s] - wins[s]) @ log_sigmoid(-d))
        g = weighted_count(local, wins[s] - n[s] * p, days)
        h = weighted_count(local, n[s] * p * (1.0 - p), days)
        v = self.virtual_games
        r0 = float(theta[nodes[0]])
        p0 = logistic(r0)
        value -= v * (abs(r0) + 2.0 * math.log1p(math.exp(-abs(r0))))  # log σ(r0) + log σ(−r0)
        g[0] += v * (1.0 - 2.0 * p0)
        h[0] += 2.0 * v * p0 * (1.0 - p0)
        c = self.link_to_prev[nodes[1:]]
        step = theta[nodes[1:]] - theta[nodes[:-1]]
        value -= 0.5 * float(c @ (step * step))
        g[1:] -= c * step
        g[:-1] += c * step
        h[1:] += c
        h[:-1] += c
        return value, g, h

    def player_step(self, theta: FloatArray, player: int) -> FloatArray:
        """Coulom's Newton step for ``player``'s days, others fixed: Thomas on its tridiagonal Hessian."""
        _, g, h = self.player_terms(theta, player)
        off = -self.link_to_prev[self.nodes_of(player)[1:]]
        return thomas(off, h, off, g)


# -------------------------------------------------------------------------------- solvers
def solve_newton(
    graph: HistoryGraph, theta0: FloatArray, tolerance: float, max_iterations: int
) -> tuple[FloatArray, int]:
    """The MAP by joint Newton steps (block-preconditioned CG) with an Armijo line search.

    Returns θ and the iterations run.
    """
    theta = theta0.astype(np.float64, copy=True)
    value = graph.log_posterior(theta)
    for iteration in range(1, max_iterations + 1):
        g, delta = graph.newton_direction(theta)
        slope = float(g @ delta)
        if converged(delta, slope, value, tolerance):
            return theta + delta, iteration
        step = 1.0
        while True:
            candidate = theta + step * delta
            cand_value = graph.log_posterior(candidate)
            if cand_value >= value + ARMIJO * step * slope:
                break
            step *= 0.5
            if step < MIN_STEP:
                return theta, iteration
        theta, value = candidate, cand_value
    return theta, max_iterations


def solve_coulom(
    graph: HistoryGraph, theta0: FloatArray, tolerance: float, max_iterations: int
) -> tuple[FloatArray, int]:
    """The MAP by Coulom's cycles: one Newton step per player in turn (Gauss–Seidel).

    A step that would lower the player's log posterior is halved until it does not. Returns θ
    and the passes run.
    """
    theta = theta0.astype(np.float64, copy=True)
    for iteration in range(1, max_iterations + 1):
        largest = 0.0
        gain = 0.0  # Σ g·δ over the pass: what the pass could still add to the log posterior
        for player in range(graph.n_players):
            nodes = graph.nodes_of(player)
            value, g, h = graph.player_terms(theta, player)
            off = -graph.link_to_prev[nodes[1:]]
            delta = thomas(off, h, off, g)
            before = theta[nodes].copy()
            slope = float(g @ delta)
            gain += slope
            step = 1.0
            theta[nodes] = before + delta
            if slope > RESOLUTION * max(1.0, abs(value)):  # else a gain too small to check
                while graph.player_terms(theta, player)[0] < value + ARMIJO * step * slope:
                    step *= 0.5
                    if step < MIN_STEP:
                        step = 0.0
                    theta[nodes] = before + step * delta
                    if step == 0.0:
                        break
            largest = max(largest, step * float(np.max(np.abs(delta))))
        shift = common_shift(theta[: graph.n_players])
        theta += shift
        if max(largest, abs(shift)) < tolerance or gain <= RESOLUTION * max(
            1.0, abs(graph.log_posterior(theta))
        ):
            return theta, iteration
    return theta, max_iterations


def common_shift(first_days: FloatArray) -> float:
    """The shift c of every rating that maximises the posterior: Σ_p (1 − 2σ(θ_p + c)) = 0.

    A common shift changes no game and no Wiener link, only the first-day virtual draws, so c is
    a one-dimensional Newton solve. Coulom's cycles need it: each pass of one-player steps
    removes only a small fraction of a common offset, about the virtual draws' share of a
    player's information, so without it they converge very slowly.
    """
    c = 0.0
    for _ in range(50):
        p = sigmoid(first_days + c)
        step = float(np.sum(1.0 - 2.0 * p)) / float(np.sum(2.0 * p * (1.0 - p)))
        c += step
        if abs(step) < 1e-13:
            break
    return c


# -------------------------------------------------------------------------------- the model
class WholeHistoryRating(OfflineHistory):
    """Coulom's Whole-History Rating over the kill history, refitted lazily (module docstring)."""

    kind = "whr"
    offline = True
    params: WHRParams

    def __init__(self, params: WHRParams | None = None, name: str = "whr") -> None:
        self.name = name
        self.params = p = params if params is not None else WHRParams()
        self._to_elo = p.scale / LN10
        self._index: dict[str, int] = {}
        self._names: list[str] = []
        self._attackers: list[int] = []
        self._victims: list[int] = []
        self._times: list[float] = []
        # The last fit, per fitted player (the first len(_fit_days) players): the days played and,
        # per day, θ and σ in natural units.
        self._fit_days: list[list[int]] = []
        self._fit_theta: list[list[float]] = []
        self._fit_sigma: list[list[float]] = []
        self._fit_kills = 0
        #: Solver iterations of the last fit and fits done so far (to watch the refit rule).
        self.iterations = 0
        self.fits = 0

    # -- history and fitting -------------------------------------------------------------------
    def _day(self, t: float) -> int:
        # Days are int64 in the fit: 1e15 s is some thirty million years either side of 1970.
        if not (math.isfinite(t) and abs(t) <= MAX_SECONDS):
            raise ValueError(f"event time t={t!r} is not finite or beyond ±{MAX_SECONDS:g} s")
        return math.floor(t / self.params.day_seconds)

    def graph(self) -> HistoryGraph:
        """The posterior of the whole history (every kill so far, not just the fitted ones)."""
        p = self.params
        days = np.floor(np.asarray(self._times, dtype=np.float64) / p.day_seconds)
        return HistoryGraph(
            self._attackers,
            self._victims,
            days.astype(np.int64),
            len(self._names),
            w2=p.w2 / self._to_elo**2,
            virtual_games=p.virtual_games,
        )

    def fit(self) -> None:
        """Refit over the whole history now if any kill arrived since the last fit."""
        if self._pending() == 0:
            return
        p = self.params
        graph = self.graph()
        theta0 = self._warm_start(graph)
        solve = solve_newton if p.solver == "newton" else solve_coulom
        theta, self.iterations = solve(graph, theta0, p.tolerance / self._to_elo, p.max_iterations)
        _, _, diag = graph.gradient(theta)
        sigma = np.sqrt(graph.block_inverse_diagonal(diag))
        nodes = graph.sorted_nodes  # (player, day) order
        runs = list(itertools.pairwise(np.append(graph.run_start, graph.n_nodes).tolist()))
        days = graph.node_day[nodes].tolist()
        th = theta[nodes].tolist()
        sg = sigma[nodes].tolist()
        self._fit_days = [days[a:b] for a, b in runs]
        self._fit_theta = [th[a:b] for a, b in runs]
        self._fit_sigma = [sg[a:b] for a, b in runs]
        self._fit_kills = len(self._attackers)
        self.fits += 1

    def _warm_start(self, graph: HistoryGraph) -> FloatArray:
        """θ from the last fit: a day's own value, else the latest earlier day's, else the first's."""
        theta0 = np.zeros(graph.n_nodes)
        for player in range(len(self._fit_days)):
            old_days = self._fit_days[player]
            old_theta = self._fit_theta[player]
            nodes = graph.nodes_of(player)
            at = np.searchsorted(old_days, graph.node_day[nodes], side="right") - 1
            theta0[nodes] = np.asarray(old_theta)[np.maximum(at, 0)]
        return theta0

    def _at(self, player: str, day: int | None) -> tuple[float, float]:
        """(θ, σ) of ``player`` on its latest fitted day ≤ ``day`` (None: the latest day)."""
        i = self._index.get(player)
        if i is None or i >= len(self._fit_days):
            return 0.0, math.sqrt(2.0 / self.params.virtual_games)
        days = self._fit_days[i]
        k = len(days) - 1 if day is None else max(bisect.bisect_right(days, day) - 1, 0)
        return self._fit_theta[i][k], self._fit_sigma[i][k]

    # -- the protocol --------------------------------------------------------------------------
    def predict(self, a: str, b: str, t: float) -> float:
        day = self._day(t)
        self._refresh(lag=True)
        return logistic(self._at(a, day)[0] - self._at(b, day)[0])

    def update(self, attacker: str, victim: str, t: float) -> None:
        if attacker == victim:
            return
        self._day(t)  # refuse a non-finite time before recording anything
        self._attackers.append(self._player(attacker))
        self._victims.append(self._player(victim))
        self._times.append(float(t))

    def rating(self, player: str) -> float:
        self._refresh(lag=False)
        return self.params.initial + self._to_elo * self._at(player, None)[0]

    def display(self, player: str) -> float:
        self._refresh(lag=False)
        theta, sigma = self._at(player, None)
        return self.params.initial + self._to_elo * (theta - 2.0 * sigma)

    def history(self, player: str) -> list[tuple[int, float, float]]:
        """``player``'s fitted trajectory: (day, rating, σ) in Elo for every day played."""
        self._refresh(lag=False)
        i = self._index.get(player)
        if i is None:
            return []
        r0, s = self.params.initial, self._to_elo
        return [
            (d, r0 + s * th, s * sg)
            for d, th, sg in zip(self._fit_days[i], self._fit_theta[i], self._fit_sigma[i], strict=True)
        ]

    # -- state ---------------------------------------------------------------------------------
    def export_state(self) -> dict[str, Any]:
        self._refresh(lag=False)
        return state_envelope(
            self.kind,
            players=list(self._names),
            kills=[[a, v, t] for a, v, t in zip(self._attackers, self._victims, self._times, strict=True)],
            fit_kills=self._fit_kills,
            # per fitted player: [day, θ, σ] per day, natural units (exact through JSON)
            fit=[
                [[d, th, sg] for d, th, sg in zip(days, ths, sgs, strict=True)]
                for days, ths, sgs in zip(self._fit_days, self._fit_theta, self._fit_sigma, strict=True)
            ],
        )

    def import_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        names = [str(p) for p in state["players"]]
        kills = [(int(a), int(v), float(t)) for a, v, t in state["kills"]]
        fit = [[(int(d), float(th), float(sg)) for d, th, sg in player] for player in state["fit"]]
        fit_kills = int(state["fit_kills"])
        if len(set(names)) != len(names):
            raise ValueError("state players are not unique")
        for a, v, t in kills:
            if not (0 <= a < len(names) and 0 <= v < len(names)) or a == v or not abs(t) <= MAX_SECONDS:
                raise ValueError(
                    f"state kill [{a}, {v}, {t}] is not a kill between two of {len(names)} players"
                )
        if not 0 <= fit_kills <= len(kills):
            raise ValueError(f"state fit_kills={fit_kills} is outside 0..{len(kills)}")
        if len(fit) > len(names) or any(not days for days in fit):
            raise ValueError(f"state fit has {len(fit)} trajectories (some empty?) for {len(names)} players")
        self._names = names
        self._index = {p: i for i, p in enumerate(names)}
        self._attackers = [a for a, _, _ in kills]
        self._victims = [v for _, v, _ in kills]
        self._times = [t for _, _, t in kills]
        self._fit_days = [[d for d, _, _ in days] for days in fit]
        self._fit_theta = [[th for _, th, _ in days] for days in fit]
        self._fit_sigma = [[sg for _, _, sg in days] for days in fit]
        self._fit_kills = fit_kills


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _count(x: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1
