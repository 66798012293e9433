"""Player names survive the URL encoding both ways, for any name (Hypothesis)."""

from __future__ import annotations

import json
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import escape

from arenad.core.params import ADRParams
from arenad.scopes import ScopeSet
from arenad.web.api import WebApp
from arenad.web.config import WebSettings
from arenad.web.pages import player_url
from arenad.web.port import WebPorts
from arenad.web.request import Request

NAMES = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1, max_size=40
).filter(lambda s: len(s.encode()) <= 128 and s != "victim")


def app_with(name: str) -> WebApp:
    sset = ScopeSet(ADRParams())
    sset.feed(name, "victim", 1.7e9, None)
    return WebApp(WebPorts(scopes=lambda: sset, status=dict), WebSettings(rate_limit=0.0))


def get(app: WebApp, target: str) -> tuple[int, bytes]:
    path, _, query = target.partition("?")
    resp = app.handle(Request("GET", path, query, {}, "t"), 0.0)
    return resp.status, resp.body


class TestRoundTrip:
    """The link the pages make and the segment an API client sends both find the player."""

    @settings(max_examples=60, deadline=None)  # each example compiles the templates (~0.1 s)
    @given(NAMES)
    def test_page_link_and_api_segment(self, name: str) -> None:
        app = app_with(name)
        status, body = get(app, player_url(name))
        assert status == 200
        assert f"<title>{_escaped(name)} · arenad</title>" in body.decode()
        if name not in (".", ".."):
            status, body = get(app, "/api/v1/players/" + quote(name, safe=""))
            assert status == 200
            assert json.loads(body)["player"] == name
        status, body = get(app, "/api/v1/players?ids=" + quote(name, safe=""))
        assert [row["player"] for row in json.loads(body)["players"]] == [name]


def _escaped(text: str) -> str:
    return str(escape(text))
