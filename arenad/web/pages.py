"""The public pages, rendered on the server from Jinja2 templates with autoescaping.

No page needs JavaScript (the Content-Security-Policy allows none): the scope selector and the
search are GET forms, the pagination is links, the history chart is inline SVG
(``arenad.web.chart``). Player names are attacker-controlled: every one goes through the
template's autoescaping and sits in a ``<bdi>`` so a right-to-left override inside a name cannot
reorder the text around it; links to a player percent-encode every byte of the name but the
unreserved ones (``player_url``), and the two names a browser would collapse as a path (``.``
and ``..``) are linked through ``/player?name=``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from arenad import __version__
from arenad.core.params import TIER_NAMES
from arenad.views import scopes_body
from arenad.web.chart import history_svg
from arenad.web.config import WebSettings
from arenad.web.reader import RECENT_SESSIONS, ApiError, Public, Reader
from arenad.web.request import Handler, Params, Raw, Request

CSS_TYPE = "text/css; charset=utf-8"
#: Highest page number a leaderboard link may carry (MAX_OFFSET / page size, about).
MAX_PAGE = 200_000


def player_url(name: str, scope: str = "global") -> str:
    """The page of player ``name``: every reserved byte percent-encoded, ``/`` included."""
    tail = "" if scope == "global" else "?" + urlencode({"scope": scope})
    if name in (".", ".."):  # a browser resolves these as path segments
        return "/player?" + urlencode({"name": name, **({"scope": scope} if scope != "global" else {})})
    return "/players/" + quote(name, safe="") + tail


def _num(v: object, digits: int = 0) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return "–"
    return f"{v:,.{digits}f}"


def _date(t: object) -> str:
    if not isinstance(t, (int, float)) or not math.isfinite(t):
        return "–"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def _tier_class(tier: str | None) -> str:
    """A CSS class per tier group (1..5), the same for H, M and L of a group."""
    return "tier-none" if tier is None else f"tier-{tier[0]}"


class Pages:
    """The HTML routes; each renders from the public reader only."""

    def __init__(self, reader: Reader, settings: WebSettings, status: Callable[[], dict[str, Any]]) -> None:
        self.reader = reader
        self._status = status
        self.settings = settings
        self.env = Environment(
            loader=PackageLoader("arenad.web", "templates"),
            autoescape=True,  # every template is HTML
            undefined=StrictUndefined,  # a misspelt variable fails the test, not the reader
            trim_blocks=True,
            lstrip_blocks=True,
            # The templates ship with the package and are compiled below: checking their files'
            # times at every render (Jinja2's default) was a sixth of a player page's time.
            auto_reload=False,
        )
        self.env.filters.update(num=_num, date=_date, tier_class=_tier_class)
        self.env.globals.update(player_url=player_url, version=__version__, tier_names=TIER_NAMES)
        self._css = resources.files("arenad.web").joinpath("static/web.css").read_bytes()
        for name in self.env.list_templates():  # compiled now, not on a first visitor's request
            self.env.get_template(name)

    def route(self, raw: list[str]) -> tuple[str, Handler]:
        """The route of a path's raw segments (after the leading ``/``)."""
        if raw == [""]:
            return "/", self.leaderboard
        if len(raw) == 2 and raw[0] == "players" and raw[1]:
            return "/players/{player}", self.player_page
        if raw == ["player"]:
            return "/player", self.player_by_name
        if raw == ["tiers"]:
            return "/tiers", self.tiers
        if raw == ["status"]:
            return "/status", self.status
        if raw == ["static", "web.css"]:
            return "/static/web.css", self.css
        raise ApiError(404, "no such page")

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(**context)

    def error(self, status: int, message: str) -> str:
        return self.render("error.html", title=f"{status}", status=status, message=message, scope="global")

    # -- pages -----------------------------------------------------------------------------
    def _scopes(self, current: str) -> list[str]:
        keys = [s["scope"] for s in scopes_body(self.reader.scope_set())["scopes"]]
        return keys if current in keys else [current, *keys]

    def leaderboard(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope", "page", "q", "tier", "active"}))
        pub = self.reader.public(params.text("scope", "global"))
        q = params.text("q", "").strip()
        tier = params.choice("tier", TIER_NAMES)
        active = params.flag("active")
        size = self.settings.page_size
        page = params.int("page", 1, MAX_PAGE, 1)
        if q:
            rows = self.reader.search(pub, q, size)["players"]
            board: dict[str, Any] = {"players": rows, "total": len(rows)}
        else:
            board = self.reader.leaderboard(pub, (page - 1) * size, size, tier, active)
        total = board.get("total")
        last = None if total is None else max(1, math.ceil(total / size))

        def page_url(n: int) -> str:
            query: dict[str, str] = {}
            if pub.scope != "global":
                query["scope"] = pub.scope
            if tier is not None:
                query["tier"] = tier
            if active:
                query["active"] = "1"
            if n != 1:
                query["page"] = str(n)
            return "/" + ("?" + urlencode(query) if query else "")

        has_next = len(board["players"]) == size and (last is None or page < last)
        return 200, self.render(
            "leaderboard.html",
            title="Leaderboard",
            scope=pub.scope,
            scopes=self._scopes(pub.scope),
            rows=board["players"],
            q=q,
            tier=tier,
            active=active,
            page=page,
            last=last,
            total=total,
            prev_url=page_url(page - 1) if page > 1 and not q else None,
            next_url=page_url(page + 1) if has_next and not q else None,
            truncated=board.get("truncated", False),
        )

    def player_page(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope"}))
        return self._player(params, parts[1])

    def player_by_name(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope", "name"}))
        return self._player(params, params.text("name"))

    def _player(self, params: Params, name: str) -> tuple[int, Any]:
        pub: Public = self.reader.public(params.text("scope", "global"))
        body = self.reader.player(pub, name)
        history = self.reader.history
        chart = None
        sessions: list[dict[str, Any]] = []
        if history is not None:
            points = history.points(pub.scope, body["player"], -math.inf, math.inf)
            chart = Markup(history_svg(points, f"Rating history of {body['player']}"))
            sessions = body["history"]["sessions"][:RECENT_SESSIONS]
        placement = body["placement"]
        return 200, self.render(
            "player.html",
            title=body["player"],
            scope=pub.scope,
            p=body,
            chart=chart,
            sessions=sessions,
            events_pct=min(100, round(100 * placement["events"] / max(1, placement["events_needed"]))),
        )

    def tiers(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset({"scope"}))
        pub = self.reader.public(params.text("scope", "global"))
        body = self.reader.tiers(pub)
        return 200, self.render(
            "tiers.html", title="Tiers", scope=pub.scope, scopes=self._scopes(pub.scope), t=body
        )

    def status(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset())
        return 200, self.render("status.html", title="Status", scope="global", s=self._status())

    def css(self, req: Request, params: Params, parts: list[str]) -> tuple[int, Any]:
        params.only(frozenset())
        return 200, Raw(CSS_TYPE, self._css)
