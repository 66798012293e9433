"""Evaluation metrics for kill predictions and the §10.3 scenario measures, as pure numpy functions.

Prediction metrics take ``p``, the predicted probability of a binary outcome, and ``y``, the outcome
(0 or 1). A recorded kill always has outcome 1 for "the attacker kills the victim", so AUC and
calibration need negatives. The standard fix for pairwise win/loss data is :func:`orient`: present
each kill in a seeded random orientation, as ``(attacker, victim, y=1, p)`` or as
``(victim, attacker, y=0, 1 − p)``. Log loss, Brier and accuracy score each event the same either
way round, so the orientation does not change them. AUC and ECE are only meaningful after
orientation.

Undefined results are ``nan``, not errors. This covers an empty input, AUC over a single class, and
Spearman over a constant sequence, so a harness can report a held-out set that happens to be empty.
A malformed argument raises ``ValueError``: wrong shape, a probability outside [0, 1], or a label
other than 0 or 1. The message names the argument and the bad value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

LOG_LOSS_EPS = 1e-15


class CalibrationCurve(NamedTuple):
    """Per non-empty bin: mean predicted probability, observed outcome rate, and number of events."""

    mean_p: FloatArray
    mean_y: FloatArray
    events: npt.NDArray[np.int64]


# ---------------------------------------------------------------------------- inputs
def _probabilities(p: npt.ArrayLike, name: str = "p") -> FloatArray:
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    bad = ~((arr >= 0.0) & (arr <= 1.0))  # also catches nan
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{i}] = {float(arr[i])!r} is not a probability in [0, 1]")
    return arr


def _outcomes(y: npt.ArrayLike, n: int) -> FloatArray:
    arr = np.asarray(y, dtype=np.float64)
    if arr.shape != (n,):
        raise ValueError(f"y must have shape ({n},) like p, got shape {arr.shape}")
    bad = (arr != 0.0) & (arr != 1.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"y[{i}] = {float(arr[i])!r} is not an outcome (0 or 1)")
    return arr


def _pair(p: npt.ArrayLike, y: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    pa = _probabilities(p)
    return pa, _outcomes(y, len(pa))


def _check_bins(bins: int) -> None:
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins!r}")


def _average_ranks(x: FloatArray) -> FloatArray:
    """Ranks 1..n; tied values share the mean of the ranks they span."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    # Each run of equal values [start, end) gets the mean of ranks start+1..end.
    new_run = np.empty(len(xs), dtype=bool)
    new_run[:1] = True
    new_run[1:] = xs[1:] != xs[:-1]
    starts = np.flatnonzero(new_run)
    ends = np.append(starts[1:], len(xs))
    run_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(len(xs), dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


# ---------------------------------------------------------------------------- orientation
def orient(p: npt.ArrayLike, seed: int) -> tuple[FloatArray, FloatArray]:
    """Present each kill in a seeded random orientation: ``(p, 1)`` or ``(1 − p, 0)``, each with odds 1/2.

    ``p[i]`` is the predicted probability that the recorded attacker kills the recorded victim.
    Returns ``(p_shown, y)``. The coin flips depend only on ``seed`` and the position in ``p``, so
    every model scored with the same seed sees the same presentation of the same events.
    """
    pa = _probabilities(p)
    flipped = np.random.default_rng(seed).random(len(pa)) < 0.5
    return np.where(flipped, 1.0 - pa, pa), np.where(flipped, 0.0, 1.0)


# ---------------------------------------------------------------------------- prediction quality
def log_loss(p: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Mean negative log-likelihood of the outcomes; each likelihood is clipped at 1e-15 so it stays finite.

    The clip applies to the probability given to the realised outcome (``p`` or ``1 − p``), so a
    kill scores the same in either orientation.
    """
    pa, ya = _pair(p, y)
    if len(pa) == 0:
        return math.nan
    likelihood = np.where(ya == 1.0, pa, 1.0 - pa)
    return float(-np.mean(np.log(np.maximum(likelihood, LOG_LOSS_EPS))))


def brier(p: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Mean squared error of the probability against the outcome: 0 is perfect, 1 the worst."""
    pa, ya = _pair(p, y)
    if len(pa) == 0:
        return math.nan
    return float(np.mean((pa - ya) ** 2))


def accuracy(p: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Share of outcomes on the side of 0.5 that ``p`` predicts; ``p == 0.5`` counts as half right."""
    pa, ya = _pair(p, y)
    if len(pa) == 0:
        return math.nan
    called = np.where(pa > 0.5, 1.0, np.where(pa < 0.5, 0.0, 0.5))
    return float(np.mean(1.0 - np.abs(called - ya)))


def auc(p: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Area under the ROC curve, by Mann–Whitney U on ranks (ties averaged). ``nan`` for one class.

    AUC is the probability that a random positive gets a higher ``p`` than a random negative, where
    a tie counts as half.
    """
    pa, ya = _pair(p, y)
    positive = ya == 1.0
    n_pos = int(positive.sum())
    n_neg = len(ya) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    u = float(_average_ranks(pa)[positive].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def calibration_curve(p: npt.ArrayLike, y: npt.ArrayLike, bins: int = 10) -> CalibrationCurve:
    """Reliability diagram over ``bins`` equal-width bins of [0, 1], keeping only non-empty bins.

    Bin k holds ``k/bins <= p < (k+1)/bins``. The last bin also holds ``p == 1``.
    """
    _check_bins(bins)
    pa, ya = _pair(p, y)
    index = np.minimum((pa * bins).astype(np.int64), bins - 1)
    count = np.bincount(index, minlength=bins)
    sum_p = np.bincount(index, weights=pa, minlength=bins)
    sum_y = np.bincount(index, weights=ya, minlength=bins)
    kept = count > 0
    n = count[kept]
    return CalibrationCurve(sum_p[kept] / n, sum_y[kept] / n, n.astype(np.int64))


def ece(p: npt.ArrayLike, y: npt.ArrayLike, bins: int = 10) -> float:
    """Expected calibration error: the mean over bins of |mean p − mean y|, weighted by bin count.

    The bins are those of :func:`calibration_curve`.
    """
    curve = calibration_curve(p, y, bins)
    total = int(curve.events.sum())
    if total == 0:
        return math.nan
    return float(np.sum(curve.events * np.abs(curve.mean_p - curve.mean_y)) / total)


def spearman(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Spearman's rank correlation: the Pearson correlation of average ranks, so ties are handled.

    Returns ``nan`` when there are fewer than two values or either sequence is constant.
    """
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    if xa.ndim != 1 or xa.shape != ya.shape:
        raise ValueError(f"x and y must be one-dimensional and equally long, got {xa.shape} and {ya.shape}")
    if len(xa) < 2:
        return math.nan
    rx = _average_ranks(xa)
    ry = _average_ranks(ya)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = math.sqrt(float(np.sum(rx * rx)) * float(np.sum(ry * ry)))
    if denom == 0.0:
        return math.nan
    return float(np.sum(rx * ry)) / denom


# ---------------------------------------------------------------------------- §10.3 scenarios
def convergence_events(rhos: Iterable[tuple[int, float]], threshold: float = 0.9) -> int | None:
    """Convergence speed (§10.3): the first event count where rho(rating, hidden skill) ≥ ``threshold``.

    ``rhos`` holds ``(events processed, Spearman rho)`` checkpoints in increasing event order.
    Returns ``None`` if no checkpoint reaches the threshold. A checkpoint whose rho is ``nan`` never
    counts.
    """
    last = -math.inf
    for events, rho in rhos:
        if events < last:
            raise ValueError(f"rhos must be in increasing event order: {events!r} comes after {last!r}")
        last = events
        if rho >= threshold:
            return events
    return None


def response_delay(trajectory: Sequence[float], before: float, after: float) -> int | None:
    """Response delay (§10.3): events after a skill jump until the rating has covered half of it.

    ``trajectory[k]`` is the player's rating after the (k+1)-th event that follows the jump.
    ``before`` is the rating at the jump and ``after`` is the rating the new skill warrants, for
    example the converged rating of a control player of that skill. All three are on the rating
    scale. Returns the 1-based event count, or ``None`` if half the jump is never recovered. Works
    for a drop as well as for a rise.
    """
    gap = after - before
    if gap == 0.0 or not math.isfinite(gap):
        raise ValueError(
            f"before and after must be finite and differ, got before={before!r}, after={after!r}"
        )
    for k, rating in enumerate(trajectory, start=1):
        if (rating - before) / gap >= 0.5:
            return k
    return None


def tier_changes_per_1k(changes: int, player_events: int) -> float:
    """Tier stability (§10.3): tier changes per 1,000 player-events (each kill is two player-events).

    Returns ``nan`` for no player-events.
    """
    if changes < 0:
        raise ValueError(f"changes must be non-negative, got {changes!r}")
    if player_events < 0:
        raise ValueError(f"player_events must be non-negative, got {player_events!r}")
    if player_events == 0:
        return math.nan
    return 1000.0 * changes / player_events


def tier_share_error(shares: Sequence[float], targets: Sequence[float]) -> float:
    """Tier-distribution match (§10.3, §10.5): the largest |empirical share − target p_k| over tiers."""
    if len(shares) != len(targets):
        raise ValueError(
            f"shares and targets must have one entry per tier, got {len(shares)} and {len(targets)}"
        )
    if not shares:
        return math.nan
    return float(np.max(np.abs(np.asarray(shares, dtype=np.float64) - np.asarray(targets, dtype=np.float64))))
