"""A real daemon process serves the API and the pages (issue 16): kills over UDP become ratings,
play sessions and pages; a hidden player disappears from the API, the pages, the query port's
``top`` and its lookups; the requests are counted for Prometheus; a real headless Chromium
renders the daemon's leaderboard and a player page with a hostile name as inert text."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonProcess
from waiting import wait_until
from web_browser import dom_of

from arenad.web.pages import player_url

HOSTILE = '<script>alert("x")</script>'
PLAYERS = [f"p{k}" for k in range(12)] + [HOSTILE]


def get(daemon: DaemonProcess, path: str) -> tuple[int, Any]:
    host, port = daemon.addr("web")
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
            body = r.read()
            status = r.status
            ctype = r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        body, status, ctype = e.read(), e.code, e.headers.get("Content-Type", "")
    return status, json.loads(body) if "json" in ctype else body.decode()


def visits(now: float) -> list[dict[str, Any]]:
    """Two groups an hour and a half apart, so the first group's sessions end (an idle gap of
    more than [history] session_gap) while the second plays; the hostile name in both."""
    rng = random.Random(16)
    events: list[dict[str, Any]] = []
    for group, start in (
        ([*PLAYERS[:6], HOSTILE], now - 4 * 3600),
        ([*PLAYERS[6:12], HOSTILE], now - 2 * 3600),
    ):
        t = start
        while t < start + 3600:
            a, v = rng.sample(group, 2)
            events.append({"t": t, "attacker": a, "victim": v, "server": "eu-1"})
            t += rng.uniform(2, 9)
    return events


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path_factory.mktemp("web-daemon") / "state").start()
    try:
        events = visits(time.time())
        d.send_events(events)
        # Every kill rated or filtered by the cooldown (§2.1): the engine has taken them all.
        d.wait_for(lambda s: s["applied"] + s["filtered"] == len(events) == s["journal_seq"])
        # The web answers from forked snapshots ([web] readers): within [web] refresh of the engine.
        wait_until(lambda: get(d, "/api/v1/status")[1]["journal_seq"] == len(events), "the web caught up", 30)
        yield d
    finally:
        d.stop()


def test_the_api_answers_from_the_live_ladder(daemon: DaemonProcess) -> None:
    status, body = get(daemon, "/api/v1/leaderboard?limit=500")
    assert status == 200
    names = [row["player"] for row in body["players"]]
    assert set(names) == set(PLAYERS)
    status, one = get(daemon, "/api/v1/players/p3")
    assert status == 200 and one["player"] == "p3"
    assert one["rank"] == names.index("p3") + 1
    status, batch = get(daemon, "/api/v1/players?ids=p1,p2,nobody")
    assert status == 200 and batch["unknown"] == ["nobody"]
    status, st = get(daemon, "/api/v1/status")
    assert status == 200 and st["players"] == len(PLAYERS) and "udp" in st["feeds"]
    assert st["feeds"]["udp"]["last_event_age"] is not None


def test_play_sessions_reach_the_history(daemon: DaemonProcess) -> None:
    """p0 played in the first group only: its session closed when the second group's
    recalibrations passed the gap, with the kills and deaths it had."""
    status, hist = get(daemon, "/api/v1/players/p0/history")
    assert status == 200, hist
    sessions = hist["sessions"]
    assert sessions and sessions[0]["server"] == "eu-1"
    assert sessions[0]["kills"] + sessions[0]["deaths"] > 10
    assert len(hist["points"]) >= 1
    status, page = get(daemon, "/players/p0")
    assert status == 200 and "<svg" in page


def test_a_hidden_player_disappears_everywhere_but_still_counts(daemon: DaemonProcess) -> None:
    before = daemon.query({"op": "get", "player": "p5"})
    assert before["ok"]
    assert daemon.admin({"op": "hide", "player": "p5", "reason": "asked"})["ok"]
    wait_until(lambda: get(daemon, "/api/v1/players/p5")[0] == 404, "p5 hidden")
    _, board = get(daemon, "/api/v1/leaderboard?limit=500")
    assert "p5" not in [row["player"] for row in board["players"]]
    _, batch = get(daemon, "/api/v1/players?ids=p5,p4")
    assert batch["unknown"] == ["p5"]
    assert get(daemon, "/players/p5")[0] == 404
    assert not daemon.query({"op": "get", "player": "p5"})["ok"]
    top = daemon.query({"op": "top", "n": 50})
    assert "p5" not in [row["player"] for row in top["players"]]
    assert daemon.admin({"op": "hidden"})["players"] == ["p5"]
    assert daemon.admin({"op": "unhide", "player": "p5"})["ok"]
    wait_until(lambda: get(daemon, "/api/v1/players/p5")[0] == 200, "p5 shown again")


def test_requests_are_counted_by_route_and_status(daemon: DaemonProcess) -> None:
    get(daemon, "/api/v1/players/p3")
    get(daemon, "/api/v1/players/nobody")
    # A reader reports its answers to the daemon every 0.1 s (arenad/web/readers.py).
    wait_until(
        lambda: daemon.series("arenad_web_requests_total", "status").get("404", 0) >= 1, "the 404 counted", 10
    )
    counts = daemon.series("arenad_web_requests_total", "status")
    assert counts.get("200", 0) >= 1 and counts.get("404", 0) >= 1
    assert sum(daemon.series("arenad_web_request_seconds_count", "route").values()) >= 2


def test_the_browser_renders_the_daemons_pages(daemon: DaemonProcess, tmp_path: Path) -> None:
    host, port = daemon.addr("web")
    dom = dom_of(f"http://{host}:{port}/")
    cells = [td.text() for td in dom.iter("td")]
    assert HOSTILE in cells  # the name as text: no script element came from it
    assert all("alert" not in (s.text() or "") for s in dom.iter("script"))
    page = dom_of(f"http://{host}:{port}{player_url(HOSTILE)}")
    assert page.find("svg") and HOSTILE in page.text()
    assert urllib.parse.unquote(player_url(HOSTILE)).endswith(HOSTILE)
