"""The rating-history chart as inline SVG: pure, points in, markup out.

Inline so the page needs no script and no second request (the Content-Security-Policy allows no
inline script anyway). Every number is formatted by this module and every text is escaped, so
the markup is safe to insert unescaped into a template. At most ``MAX_POINTS`` are drawn: longer
histories are thinned to evenly spaced samples, keeping the first and the last.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from operator import add
from typing import Any

import numpy as np
import numpy.typing as npt

from arenad.web.port import HistoryPoint

MAX_POINTS = 600
WIDTH = 640
HEIGHT = 240
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 60, 12, 14, 34


#: The text of every whole coordinate in the box: "x," for an x, "y" for a y (history_svg).
_XS = tuple(f"{v}," for v in range(WIDTH + 1))
_YS = tuple(str(v) for v in range(HEIGHT + 1))


def _units(v: npt.NDArray[np.float64], top: int) -> list[int]:
    """``v`` rounded to whole units of the box, within 0..top."""
    # Clipped before the cast (a non-finite value has no integer), NaN at 0.
    out: list[int] = np.clip(np.nan_to_num(np.rint(v), nan=0.0), 0, top).astype(np.int64).tolist()
    return out


def thin(points: Sequence[HistoryPoint], limit: int = MAX_POINTS) -> list[HistoryPoint]:
    """At most ``limit`` of ``points``, evenly spaced by index, first and last kept."""
    n = len(points)
    if n <= limit:
        return list(points)
    step = (n - 1) / (limit - 1)
    return [points[round(j * step)] for j in range(limit)]


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def history_svg(points: Sequence[HistoryPoint], label: str) -> str:
    """An SVG line chart of rating (solid) and display rating (dashed) over time.

    ``label`` names the chart for screen readers (``aria-label`` and ``<title>``); an empty
    history draws a chart with a sentence saying so.
    """
    title = escape(label)
    head = (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{title}" '
        f'xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet"><title>{title}</title>'
    )
    # A point without a finite time and rating has no place on the chart (the engine's are
    # finite; a damaged history must not break the page).
    pts = thin([p for p in points if math.isfinite(p.t) and math.isfinite(p.rating)])
    if not pts:
        return (
            head + f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" text-anchor="middle" '
            'class="chart-empty">No rating history yet</text></svg>'
        )
    t = np.array([p.t for p in pts])
    rating = np.array([p.rating for p in pts])
    display = np.array([p.display for p in pts])
    display = np.where(np.isfinite(display), display, rating)  # a display of -inf draws at mu
    t0, t1 = float(t[0]), float(t[-1])
    lo = float(min(rating.min(), display.min()))
    hi = float(max(rating.max(), display.max()))
    if hi - lo < 1e-9:  # a flat history: a band around it (wider than a rounding step at ~1e16)
        pad = max(1.0, abs(lo) * 1e-6)
        lo, hi = lo - pad, hi + pad
    span_t = t1 - t0 if t1 > t0 else 1.0
    w = WIDTH - _PAD_L - _PAD_R
    h = HEIGHT - _PAD_T - _PAD_B

    def y(v: Any) -> Any:  # a value or an array of them
        return _PAD_T + (hi - v) / (hi - lo) * h

    # Whole units of a 640-wide box (under a CSS pixel on a phone), vectorised: formatting
    # floats one by one cost ~1 ms for 500 points. Each unit's text is looked up, not formatted
    # (an f-string per point was a fifth of a player page), and clipped to the box, so even a
    # non-finite value cannot index past the tables.
    with np.errstate(all="ignore"):  # spans of ~1e308 overflow: _units clips what comes out
        xs = _units(_PAD_L + (t - t0) / span_t * w, WIDTH)
        ys_r = _units(y(rating), HEIGHT)
        ys_d = _units(y(display), HEIGHT)
    x_text = [_XS[x] for x in xs]
    rating_pts = " ".join(map(add, x_text, map(_YS.__getitem__, ys_r)))
    display_pts = " ".join(map(add, x_text, map(_YS.__getitem__, ys_d)))
    parts = [head]
    for v in (lo, (lo + hi) / 2, hi):  # three gridlines with their values
        parts.append(
            f'<line class="grid" x1="{_PAD_L}" x2="{WIDTH - _PAD_R}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
            f'<text class="axis" x="{_PAD_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>'
        )
    parts.append(
        f'<text class="axis" x="{_PAD_L}" y="{HEIGHT - 8}">{_day(t0)}</text>'
        f'<text class="axis" x="{WIDTH - _PAD_R}" y="{HEIGHT - 8}" text-anchor="end">{_day(t1)}</text>'
        f'<polyline class="line-display" fill="none" points="{display_pts}"/>'
        f'<polyline class="line-rating" fill="none" points="{rating_pts}"/>'
        "</svg>"
    )
    return "".join(parts)
