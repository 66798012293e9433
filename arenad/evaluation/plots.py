"""PNG plots of an evaluation, with matplotlib (the optional ``arenad[eval]`` extra).

The one module of ``arenad.evaluation`` that writes files. matplotlib is imported inside the
functions, never at import time, so the rest of arenad works without it; figures are drawn on
the Agg canvas directly (no pyplot, no global backend state).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arenad.core.params import TIER_NAMES
from arenad.evaluation import metrics
from arenad.evaluation.protocol import Evaluation, block_auc, oriented, rolling_log_loss
from arenad.evaluation.returning import ReturningResult
from arenad.evaluation.walkforward import is_held_out

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: How to get the plots when matplotlib is missing.
INSTALL_HINT = "plots need matplotlib: pip install 'arenad[eval]'"


def plots_available() -> bool:
    """Whether matplotlib can be imported."""
    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float = 8.0, height: float = 4.5) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - optional extra
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style(i: int) -> dict[str, Any]:
    from matplotlib import colormaps  # noqa: PLC0415

    return {"color": colormaps["tab10"](i % 10), "linestyle": ("-", "--", ":", "-.")[(i // 10) % 4]}


def _limits(values: Mapping[str, Sequence[float]]) -> tuple[tuple[float, float] | None, set[str]]:
    """y-limits that show the typical models, and the models that go far beyond them.

    A model whose largest |value| is more than ten times the median model's is drawn off scale
    (and says so in the legend) rather than flattening every other line.
    """
    peaks = {name: max((abs(v) for v in vs if math.isfinite(v)), default=0.0) for name, vs in values.items()}
    if len(peaks) < 3:
        return None, set()
    typical = float(np.median(list(peaks.values())))
    off = {name for name, peak in peaks.items() if typical > 0 and peak > 10.0 * typical}
    if not off:
        return None, set()
    kept = [v for name, vs in values.items() if name not in off for v in vs if math.isfinite(v)]
    low, high = min(kept), max(kept)
    pad = 0.1 * (high - low or 1.0)
    return (low - pad, high + pad), off


def _save(fig: Figure, out_dir: Path, name: str) -> str:
    fig.savefig(out_dir / name, format="png")
    return name


def write_evaluation_plots(out_dir: Path, evaluation: Evaluation, targets: Sequence[float]) -> list[str]:
    """Rolling log loss, per-block AUC, calibration, returning player, tier shares, convergence.

    Returns the file names written into ``out_dir`` (a plot with nothing to show is skipped).
    """
    shown = oriented(evaluation)
    pred = evaluation.predictions
    written: list[str] = []
    if len(pred.event):
        written.append(_rolling(out_dir, shown))
        written.append(_blocks(out_dir, shown, pred.event, evaluation.block, evaluation.test_every))
        written.append(_calibration(out_dir, shown))
    trajectories = evaluation.watch.absence_trajectories()
    if trajectories:
        written.append(_absence(out_dir, trajectories))
    shares = {name: row.get("tier_shares") for name, row in evaluation.rows.items()}
    if any(s is not None for s in shares.values()):
        written.append(_tiers(out_dir, shares, targets))
    series = evaluation.watch.convergence_series()
    if any(series.values()):
        written.append(_convergence(out_dir, series))
    return written


def _rolling(out_dir: Path, shown: Mapping[str, tuple[metrics.FloatArray, metrics.FloatArray]]) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    n = len(next(iter(shown.values()))[0])
    window = max(20, n // 20)
    for i, (name, (p, y)) in enumerate(shown.items()):
        ax.plot(np.arange(1, n + 1), rolling_log_loss(p, y, window), label=name, linewidth=1.2, **_style(i))
    ax.axhline(math.log(2.0), color="grey", linewidth=0.8, linestyle=":", label="coin flip (ln 2)")
    ax.set_xlabel("prediction")
    ax.set_ylabel(f"log loss, rolling mean of {window}")
    ax.set_title("Rolling log loss (every prediction before its event is learnt)")
    ax.legend(fontsize=8, ncols=2)
    return _save(fig, out_dir, "rolling_log_loss.png")


def _blocks(
    out_dir: Path,
    shown: Mapping[str, tuple[metrics.FloatArray, metrics.FloatArray]],
    event: np.ndarray[Any, Any],
    block: int,
    test_every: int,
) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    blocks: set[int] = set()
    for i, (name, (p, y)) in enumerate(shown.items()):
        rows = block_auc(p, y, event, block)
        blocks.update(k for k, _ in rows)
        ax.plot([k for k, _ in rows], [a for _, a in rows], marker="o", markersize=3, label=name, **_style(i))
    for k in sorted(blocks):
        if is_held_out(k * block, block, test_every):
            ax.axvspan(k - 0.5, k + 0.5, color="grey", alpha=0.15, linewidth=0)
    ax.set_xlabel(f"block of {block} events (grey: held out)")
    ax.set_ylabel("AUC")
    ax.set_title("AUC per block")
    ax.legend(fontsize=8, ncols=2)
    return _save(fig, out_dir, "block_auc.png")


def _calibration(out_dir: Path, shown: Mapping[str, tuple[metrics.FloatArray, metrics.FloatArray]]) -> str:
    fig = _figure(6.0, 6.0)
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":", label="perfect")
    for i, (name, (p, y)) in enumerate(shown.items()):
        curve = metrics.calibration_curve(p, y, 10)
        ece = metrics.ece(p, y, 10)
        ax.plot(
            curve.mean_p, curve.mean_y, marker="o", markersize=3, label=f"{name} (ECE {ece:.3f})", **_style(i)
        )
    ax.set_xlabel("predicted probability (10 bins)")
    ax.set_ylabel("observed frequency")
    ax.set_title("Calibration (online predictions)")
    ax.legend(fontsize=8)
    return _save(fig, out_dir, "calibration.png")


def _absence(out_dir: Path, trajectories: Mapping[str, tuple[list[float], list[float]]]) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    limits, off = _limits({name: before + after for name, (before, after) in trajectories.items()})
    for i, (name, (before, after)) in enumerate(trajectories.items()):
        xs = list(range(-len(before), 0)) + list(range(1, len(after) + 1))
        label = f"{name} (off scale)" if name in off else name
        ax.plot(xs, before + after, marker=".", markersize=3, label=label, **_style(i))
    if limits is not None:
        ax.set_ylim(*limits)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("returning player's events (negative: before the absence)")
    ax.set_ylabel("display rating, z-score at the return")
    ax.set_title("Returning player: display rating around a long absence")
    ax.legend(fontsize=8, ncols=2)
    return _save(fig, out_dir, "returning_player.png")


def _tiers(out_dir: Path, shares: Mapping[str, Sequence[float] | None], targets: Sequence[float]) -> str:
    fig = _figure(10.0, 4.5)
    ax = fig.add_subplot()
    drawn = [(name, s) for name, s in shares.items() if s is not None]
    width = 0.8 / max(1, len(drawn))
    x = np.arange(len(TIER_NAMES))
    for i, (name, s) in enumerate(drawn):
        ax.bar(x + (i - (len(drawn) - 1) / 2) * width, s, width, label=name, color=_style(i)["color"])
    if targets:
        ax.step(
            np.append(x, len(x)) - 0.5,
            [*targets, targets[-1]],
            where="post",
            color="black",
            label="target p_k",
        )
    ax.set_xticks(x, TIER_NAMES)
    ax.set_ylabel("share of active placed players")
    ax.set_title("Tier shares after the last event")
    ax.legend(fontsize=8, ncols=2)
    return _save(fig, out_dir, "tier_shares.png")


def _convergence(out_dir: Path, series: Mapping[str, list[tuple[int, float]]]) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    for i, (name, points) in enumerate(series.items()):
        ax.plot([e for e, _ in points], [r for _, r in points], label=name, linewidth=1.2, **_style(i))
    ax.axhline(0.9, color="grey", linewidth=0.8, linestyle=":", label="ρ = 0.9")
    ax.set_xlabel("stream events")
    ax.set_ylabel("Spearman ρ(rating, hidden skill)")
    ax.set_title("Convergence")
    ax.legend(fontsize=8, ncols=2)
    return _save(fig, out_dir, "convergence.png")


def write_returning_plots(out_dir: Path, results: Mapping[str, ReturningResult | None]) -> list[str]:
    """§10.6: each model's rise (in background sd) per kill, and the per-kill changes."""
    done = {name: r for name, r in results.items() if r is not None and r.spread > 0}
    if not done:
        return []
    fig = _figure(10.0, 4.5)
    left, right = fig.subplots(1, 2)
    rises = {
        n: ((np.asarray([r.initial, *r.ratings]) - r.initial) / r.spread).tolist() for n, r in done.items()
    }
    steps = {n: (np.asarray(r.steps) / r.spread).tolist() for n, r in done.items()}
    rise_limits, off = _limits(rises)
    step_limits, step_off = _limits(steps)
    for i, name in enumerate(done):
        label = f"{name} (off scale)" if name in off | step_off else name
        left.plot(range(len(rises[name])), rises[name], label=label, **_style(i))
        right.plot(
            range(1, len(steps[name]) + 1), steps[name], marker=".", markersize=3, label=label, **_style(i)
        )
    if rise_limits is not None:
        left.set_ylim(*rise_limits)
    if step_limits is not None:
        right.set_ylim(*step_limits)
    _label(left, "kill", "rise since the return (background sd)", "§10.6: standardized rise")
    _label(right, "kill", "change at this kill (background sd)", "§10.6: per-kill change")
    left.legend(fontsize=8)
    return [_save(fig, out_dir, "returning_toy.png")]


def _label(ax: Axes, x: str, y: str, title: str) -> None:
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
