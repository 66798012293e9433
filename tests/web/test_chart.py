"""The inline SVG history chart (arenad.web.chart): bounded, escaped, well-formed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from arenad.web.chart import MAX_POINTS, history_svg, thin
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
