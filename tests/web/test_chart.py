"""The inline SVG history chart (arenad.web.chart): bounded, escaped, well-formed."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.web.chart import HEIGHT, MAX_POINTS, WIDTH, history_svg, thin
from arenad.web.port import HistoryPoint


def points(n: int) -> list[HistoryPoint]:
    return [HistoryPoint(1.7e9 + 60.0 * i, 1000.0 + i % 7, 900.0 + i % 5, "3M") for i in range(n)]


class TestChart:
    """The chart is XML, labels are escaped, long histories are thinned."""

    def test_well_formed_with_two_lines(self) -> None:
        root = ET.fromstring(history_svg(points(50), "history"))
        lines = root.findall("{http://www.w3.org/2000/svg}polyline")
        assert len(lines) == 2
        assert all(len(line.attrib["points"].split()) == 50 for line in lines)
        assert root.attrib["role"] == "img"

    def test_label_is_escaped(self) -> None:
        svg = history_svg(points(3), '<script>alert("x")</script>')
        assert "<script>" not in svg
        root = ET.fromstring(svg)
        assert root.attrib["aria-label"] == '<script>alert("x")</script>'

    def test_empty_history_says_so(self) -> None:
        root = ET.fromstring(history_svg([], "none"))
        assert "No rating history" in "".join(root.itertext())

    def test_thinning_keeps_the_ends(self) -> None:
        pts = points(10 * MAX_POINTS)
        out = thin(pts)
        assert len(out) == MAX_POINTS
        assert out[0] == pts[0] and out[-1] == pts[-1]
        assert [p.t for p in out] == sorted(p.t for p in out)

    def test_one_point_and_flat_history(self) -> None:
        flat = [HistoryPoint(1.7e9 + i, 1000.0, 1000.0, None) for i in range(3)]
        for pts in (points(1), flat):
            ET.fromstring(history_svg(pts, "x"))


def reference_points(xs: list[int], ys: list[int]) -> str:
    """The polyline's points as the chart formatted them before its lookup tables."""
    return " ".join([f"{a},{b}" for a, b in zip(xs, ys, strict=True)])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 1e6),
            st.floats(-1e4, 1e4),
            st.floats(-1e4, 1e4) | st.just(-math.inf),
        ),
        min_size=1,
        max_size=700,
    )
)
def test_the_lines_are_the_points_as_formatted_one_by_one(raw: list[tuple[float, float, float]]) -> None:
    """The looked-up coordinate texts give the f-string-per-point markup, point for point (a
    display of -inf draws at the rating), and every point lies inside the box."""
    pts = [HistoryPoint(1.7e9 + dt, r, d, None) for dt, r, d in sorted(raw)]
    root = ET.fromstring(history_svg(pts, "x"))
    drawn = thin(pts)
    t = np.array([p.t for p in drawn])
    rating = np.array([p.rating for p in drawn])
    display = np.array([p.display for p in drawn])
    display = np.where(np.isfinite(display), display, rating)
    lo, hi = float(min(rating.min(), display.min())), float(max(rating.max(), display.max()))
    if hi - lo < 1e-9:
        lo, hi = lo - 1.0, hi + 1.0
    span = float(t[-1] - t[0]) if t[-1] > t[0] else 1.0
    w, h = WIDTH - 60 - 12, HEIGHT - 14 - 34
    xs = np.rint(60 + (t - t[0]) / span * w).astype(np.int64).tolist()
    want = [
        reference_points(xs, np.rint(14 + (hi - v) / (hi - lo) * h).astype(np.int64).tolist())
        for v in (display, rating)
    ]
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert [line.attrib["points"] for line in lines] == want
    for line in lines:
        for pair in line.attrib["points"].split():
            x, y = map(int, pair.split(","))
            assert 0 <= x <= WIDTH and 0 <= y <= HEIGHT


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-1e9, 1e9), st.floats(allow_nan=True), st.floats(allow_nan=True)),
        min_size=1,
        max_size=50,
    )
)
def test_any_history_draws_inside_the_box(raw: list[tuple[float, float, float]]) -> None:
    """Times out of order, NaN, infinite or huge ratings: the chart is still XML (no warning
    raised: the suite makes warnings errors) and every point lies inside the box."""
    pts = [HistoryPoint(1.7e9 + dt, r, d, None) for dt, r, d in raw]
    root = ET.fromstring(history_svg(pts, "x"))
    for line in root.findall("{http://www.w3.org/2000/svg}polyline"):
        for pair in line.attrib["points"].split():
            x, y = map(int, pair.split(","))
            assert 0 <= x <= WIDTH and 0 <= y <= HEIGHT
