"""A real headless Chromium (Debian's ``chromium``) renders the pages, at a phone's viewport.

No script runs on these pages, so ``--dump-dom`` (the DOM after parsing, layout and the
Content-Security-Policy applied) and ``--screenshot`` are all the browser needs to do; its
console (``--enable-logging=stderr``) must stay empty: a CSP violation or a failed load would
show there. Screenshots are kept in ``$ARENAD_ARTIFACTS/web`` (default ``.artifacts/web``).

``scripts/test`` installs chromium where it is missing and sets ``ARENAD_REQUIRE_BROWSER=1``:
there a missing browser fails these tests; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from web_browser import ARTIFACTS, chromium, dom_of
from web_harness import HOSTILE, ServerThread, World, seg, start_server

from arenad.web.pages import player_url


@pytest.fixture(scope="module")
def browser_server(world: World) -> Iterator[ServerThread]:
    # Every player on one page, so one load shows every hostile name in the ladder.
    srv = start_server(world, page_size=500)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def base(browser_server: ServerThread) -> str:
    return f"http://{browser_server.handle.address}"


class TestRendered:
    """The leaderboard and a player page as the browser builds them."""

    def test_leaderboard_rows_in_rank_order(self, base: str, world: World) -> None:
        dom = dom_of(base + "/")
        rows = dom.find("table", class_="ladder")[0].find("tbody")[0].iter("tr")
        ranks = [int(r.iter("td")[0].text()) for r in rows]
        assert len(rows) == len(world.scopes.global_engine)
        assert ranks == sorted(ranks)
        eng = world.scopes.global_engine
        assert [r.iter("bdi")[0].text() for r in rows] == [eng.names[i] for i in eng.ladder_ids()]
        assert all(r.iter("span")[-1].has_class("badge") for r in rows)
        assert dom.iter("script") == []

    def test_player_page_has_chart_and_badge(self, base: str, world: World) -> None:
        name = world.players[0]
        dom = dom_of(base + player_url(name))
        assert dom.find("h1")[0].text() == name
        assert dom.find("span", id="tier-badge")[0].has_class("badge")
        svg = dom.iter("svg")[0]
        assert len(svg.iter("polyline")) == 2
        assert svg.attrs.get("aria-label", "").endswith(name)

    def test_screenshots(self, base: str, world: World) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for label, path in (
            ("leaderboard", "/"),
            ("player", player_url(world.players[0])),
            ("hostile-player", player_url(HOSTILE[0])),
            ("tiers", "/tiers"),
            ("status", "/status"),
        ):
            out = ARTIFACTS / f"{label}-phone.png"
            out.unlink(missing_ok=True)
            _, console = chromium(base + path, f"--screenshot={out}", "--hide-scrollbars")
            assert console == [], console
            data = out.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, label


class TestHostileInTheBrowser:
    """Hostile names stay inert text in the DOM the browser builds."""

    def test_every_hostile_name_is_text_on_the_leaderboard(self, base: str) -> None:
        dom = dom_of(base + "/")
        assert dom.iter("script") == []
        shown = {bdi.text() for bdi in dom.find("table", class_="ladder")[0].iter("bdi")}
        assert set(HOSTILE) <= shown
        hrefs = {a.find("bdi")[0].text(): a.attrs["href"] for a in dom.iter("a") if a.find("bdi")}
        for name in HOSTILE:
            assert hrefs[name] == player_url(name)

    @pytest.mark.parametrize(
        "name", ["<script>alert(1)</script>", "rtl\u202eevil\u202c", "a/b", "..", "x" * 128]
    )
    def test_player_pages(self, base: str, name: str) -> None:
        dom = dom_of(base + player_url(name))
        assert dom.iter("script") == []
        h1 = dom.find("h1")[0]
        assert h1.iter("bdi")[0].text() == name
        assert dom.find("title")[0].text().startswith(name)

    def test_search_query_is_echoed_as_text(self, base: str) -> None:
        dom = dom_of(base + "/?q=" + seg("<script>"))
        assert dom.iter("script") == []
        assert dom.find("input", name="q")[0].attrs["value"] == "<script>"
