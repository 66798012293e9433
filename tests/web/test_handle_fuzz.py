"""WebApp.handle never raises and never fails inside, whatever path and query a client sends."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web_harness import World, build_world

from arenad.web.api import WebApp
from arenad.web.config import WebSettings
from arenad.web.port import WebPorts
from arenad.web.request import Request

PIECES = st.sampled_from(
    [
        "/", "api", "v1", "players", "leaderboard", "history", "balance", "search", "tiers", "predict",
        "status", "openapi.json", "player", "static", "web.css", "?", "&", "=", ",", "%", "%2F", "%2C",
        "%FF", "%00", "%C3%A9", "+", "..", ".", "scope", "server:eu-1", "season", "limit", "offset", "ids",
        "q", "a", "b", "teams", "since", "until", "tier", "1H", "active", "page", "name", "-1", "0",
        "99999999999999", "nan", "p0001", "<script>", "\u202e", "é", "x" * 130,
    ]
)  # fmt: skip
TARGETS = st.lists(PIECES, max_size=12).map("".join)


@pytest.fixture(scope="module")
def app() -> tuple[WebApp, World]:
    world = build_world(players=40, days=2, seed=5)
    ports = WebPorts(scopes=lambda: world.scopes, status=dict, history=world.history, hidden=world.hidden)
    return WebApp(ports, WebSettings(rate_limit=0.0)), world


class TestNeverFails:
    """Every answer is a deliberate status; nothing reaches the 500 path."""

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(target=TARGETS, method=st.sampled_from(["GET", "HEAD", "POST", "OPTIONS"]))
    def test_any_target(self, app: tuple[WebApp, World], target: str, method: str) -> None:
        web, _ = app
        path, _, query = ("/" + target).partition("?")
        resp = web.handle(Request(method, path, query, {"if-none-match": '"x"'}, "fuzz"), 0.0)
        assert resp.status in {200, 204, 304, 400, 404, 405, 501, 503}, (target, resp.status, resp.body[:200])
        assert web.internal_errors == 0
        assert b"Traceback" not in resp.body
