"""The server-rendered pages over a real server: content, links, hostile names as inert text."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from web_dom import Node, parse
from web_harness import HOSTILE, NEWCOMER, Client, World, seg

from arenad.web.pages import player_url


def page(client: Client, target: str, status: int = 200) -> Node:
    r = client.get(target)
    assert r.status == status, (target, r.status, r.body[:300])
    assert r.headers["content-type"].startswith("text/html")
    assert "script-src" not in r.headers["content-security-policy"]  # no script is allowed
    assert "default-src 'none'" in r.headers["content-security-policy"]
    dom = parse(r.text)
    assert dom.iter("script") == [], f"{target} has a <script> element"
    return dom


def player_links(dom: Node) -> dict[str, str]:
    """Player name (the text of the <bdi> in the link) -> href."""
    return {a.find("bdi")[0].text(): a.attrs["href"] for a in dom.iter("a") if a.find("bdi")}


class TestLeaderboard:
    """Rows in rank order with tier badges; pagination, scope selector and search work."""

    def test_rows_in_rank_order(self, client: Client, world: World) -> None:
        dom = page(client, "/")
        rows = dom.find("table", class_="ladder")[0].find("tbody")[0].iter("tr")
        ranks = [int(r.iter("td")[0].text()) for r in rows]
        assert ranks == sorted(ranks) and ranks[0] == 1
        assert len(rows) == 50
        assert all(r.iter("td")[2].iter("span")[0].has_class("badge") for r in rows)
        first = next(iter(world.scopes.global_engine.ladder_ids()))
        assert rows[0].iter("bdi")[0].text() == world.scopes.global_engine.names[first]

    def test_pagination(self, client: Client, world: World) -> None:
        dom = page(client, "/")
        nxt = next(a for a in dom.iter("a") if a.attrs.get("rel") == "next").attrs["href"]
        assert nxt == "/?page=2"
        second = page(client, nxt)
        ranks = [int(r.iter("td")[0].text()) for r in second.find("tbody")[0].iter("tr")]
        assert ranks[0] >= 50
        last = len(world.scopes.global_engine) // 50 + 1
        final = page(client, f"/?page={last}")
        assert not [a for a in final.iter("a") if a.attrs.get("rel") == "next"]

    def test_scope_selector_and_search_form_are_labelled(self, client: Client) -> None:
        dom = page(client, "/?scope=server:eu-1")
        select = dom.find("select", name="scope")[0]
        options = {o.attrs["value"]: "selected" in o.attrs for o in select.iter("option")}
        assert options["server:eu-1"] is True
        assert "global" in options
        for control in (select, dom.find("input", name="q")[0]):
            assert dom.find("label", for_=control.attrs["id"]), "every control has a label"

    def test_search(self, client: Client) -> None:
        dom = page(client, "/?q=p001")
        names = list(player_links(dom))
        assert names and all(n.startswith("p001") for n in names)

    def test_tier_filter(self, client: Client, world: World) -> None:
        dom = page(client, "/?tier=1H")
        badges = [r.iter("td")[2].text().strip() for r in dom.find("tbody")[0].iter("tr")]
        assert badges and set(badges) == {"1H"}

    def test_bad_parameter_is_a_400_page(self, client: Client) -> None:
        dom = page(client, "/?page=0", status=400)
        assert "between 1" in dom.find("p", class_="error")[0].text()
        page(client, "/?nonsense=1", status=400)
        page(client, "/no/such/page", status=404)


class TestPlayerPage:
    """Rank, tier, percentile, placement progress, the chart and the sessions."""

    def test_placed_player(self, client: Client, world: World) -> None:
        name = world.players[0]
        dom = page(client, f"/players/{seg(name)}")
        assert dom.find("h1")[0].text() == name
        assert dom.find("span", id="tier-badge")
        svg = dom.iter("svg")[0]
        assert svg.attrs["role"] == "img" and len(svg.iter("polyline")) == 2
        assert dom.find("table", class_="sessions")
        assert not dom.iter("progress")

    def test_newcomer_shows_placement_progress(self, client: Client) -> None:
        dom = page(client, f"/players/{NEWCOMER}")
        progress = dom.find("progress", id="placement")[0]
        assert dom.find("label", for_="placement")
        assert float(progress.attrs["value"]) <= float(progress.attrs["max"])
        assert dom.find("span", id="tier-badge")[0].text() == "unplaced"

    def test_unknown_and_hidden_are_404(self, client: Client, world: World) -> None:
        page(client, "/players/nobody-at-all", status=404)
        name = world.players[-1]
        world.hidden.names.add(name)
        try:
            page(client, f"/players/{seg(name)}", status=404)
            board = page(client, "/?page=1")
            assert name not in player_links(board)
            assert client.get(f"/api/v1/players/{seg(name)}").status == 404
        finally:
            world.hidden.names.discard(name)


class TestHostileNames:
    """Each hostile name renders as text in a <bdi>, and its link leads back to its page."""

    @pytest.mark.parametrize("name", HOSTILE)
    def test_link_round_trip(self, client: Client, name: str) -> None:
        dom = page(client, "/?q=" + quote(name, safe=""))
        links = player_links(dom)
        assert name in links, sorted(links)
        href = links[name]
        assert href == player_url(name)
        target = page(client, href)
        h1 = target.find("h1")[0]
        assert h1.iter("bdi")[0].text() == name
        assert target.find("title")[0].text().startswith(name)

    def test_raw_markup_never_appears(self, client: Client) -> None:
        for target in ("/?q=%3Cscript", "/players/" + seg("<script>alert(1)</script>")):
            assert "<script>" not in client.get(target).text

    def test_dot_names_link_through_the_query_form(self) -> None:
        assert player_url("..") == "/player?name=.."
        assert player_url(".") == "/player?name=."
        assert player_url("a/b") == "/players/a%2Fb"
        assert player_url("x", "server:eu-1") == "/players/x?scope=server%3Aeu-1"


class TestOtherPages:
    """/tiers and /status render."""

    def test_tiers(self, client: Client) -> None:
        dom = page(client, "/tiers")
        rows = dom.find("table", class_="tiers")[0].find("tbody")[0].iter("tr")
        assert len(rows) == 15
        assert all(r.iter("meter") for r in rows)

    def test_status(self, client: Client) -> None:
        dom = page(client, "/status")
        assert "udp" in dom.text() and "listening" in dom.text()

    def test_stylesheet(self, client: Client) -> None:
        r = client.get("/static/web.css")
        assert r.status == 200 and r.headers["content-type"].startswith("text/css")
