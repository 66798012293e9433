"""The JSON API over a real aiohttp server: routes, parameters, limits, caching, CORS, errors."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest
import structlog
from web_harness import HOSTILE, Client, ServerThread, World, seg, start_server

from arenad.web.config import WebSettings
from arenad.web.port import WebPorts


class TestRoutes:
    """Every route answers, and its answer is the one the OpenAPI document describes."""

    def test_leaderboard(self, client: Client, world: World) -> None:
        r = client.get("/api/v1/leaderboard?limit=10&offset=2")
        assert r.status == 200
        body = r.json()
        assert len(body["players"]) == 10
        ranks = [row["rank"] for row in body["players"]]
        assert ranks == sorted(ranks)
        assert body["total"] == len(world.scopes.global_engine)

    def test_player(self, client: Client, world: World) -> None:
        name = world.players[3]
        body = client.get(f"/api/v1/players/{seg(name)}").json()
        assert body["player"] == name
        assert body["history"]["available"] is True
        assert body["history"]["sessions"]

    def test_batch(self, client: Client, world: World) -> None:
        ids = ",".join(seg(n) for n in [*world.players[:5], "nobody-here"])
        body = client.get(f"/api/v1/players?ids={ids}").json()
        assert [row["player"] for row in body["players"]] == world.players[:5]
        assert body["unknown"] == ["nobody-here"]

    def test_history(self, client: Client, world: World) -> None:
        name = world.players[0]
        full = client.get(f"/api/v1/players/{seg(name)}/history").json()
        assert full["points"]
        t_mid = full["points"][len(full["points"]) // 2]["t"]
        later = client.get(f"/api/v1/players/{seg(name)}/history?since={t_mid}").json()
        assert all(p["t"] >= t_mid for p in later["points"])
        assert len(later["points"]) < len(full["points"])

    def test_tiers(self, client: Client) -> None:
        body = client.get("/api/v1/tiers").json()
        assert len(body["tiers"]) == 15
        assert sum(t["players"] for t in body["tiers"]) == body["placed"]

    def test_predict(self, client: Client, world: World) -> None:
        a, b = world.players[:2]
        p = client.get(f"/api/v1/predict?a={seg(a)}&b={seg(b)}").json()["p"]
        q = client.get(f"/api/v1/predict?a={seg(b)}&b={seg(a)}").json()["p"]
        assert p + q == pytest.approx(1.0)

    def test_balance(self, client: Client, world: World) -> None:
        names = world.players[:10]
        body = client.get(f"/api/v1/balance?players={','.join(names)}&teams=2").json()
        assert sorted(n for t in body["teams"] for n in t["players"]) == sorted(names)
        assert body["method"] == "exhaustive"
        assert 0.5 <= body["p"] < 1.0
        big = client.get(f"/api/v1/balance?players={','.join(world.players[:40])}&teams=4").json()
        assert big["method"] == "heuristic"
        assert [len(t["players"]) for t in big["teams"]] == [10, 10, 10, 10]

    def test_search(self, client: Client, world: World) -> None:
        body = client.get("/api/v1/search?q=P00&limit=5").json()
        assert len(body["players"]) == 5
        assert all(row["player"].startswith("p00") for row in body["players"])

    def test_status(self, client: Client) -> None:
        body = client.get("/api/v1/status").json()
        assert body["version"]
        assert body["feeds"]["udp"]["last_event_age"] == 1.5
        assert {s["scope"] for s in body["scopes"]} >= {"global", "server:eu-1"}

    def test_openapi_document(self, client: Client) -> None:
        r = client.get("/api/v1/openapi.json")
        assert r.status == 200
        assert r.json()["openapi"] == "3.1.0"

    def test_scope_on_every_route(self, client: Client, world: World) -> None:
        name = seg(world.players[0])
        for target in (
            "/api/v1/leaderboard?",
            f"/api/v1/players/{name}?",
            f"/api/v1/players?ids={name}&",
            "/api/v1/tiers?",
            f"/api/v1/predict?a={name}&b={seg(world.players[1])}&",
            f"/api/v1/balance?players={name},{seg(world.players[1])}&",
            "/api/v1/search?q=p&",
        ):
            r = client.get(target + "scope=server:eu-1")
            assert r.status == 200, target
            assert r.json()["scope"] == "server:eu-1"
            assert client.get(target + "scope=server:nowhere").status == 404


class TestBadInput:
    """A 400 names the parameter and the reason; a 404 the unknown player or scope."""

    @pytest.mark.parametrize(
        ("target", "parameter"),
        [
            ("/api/v1/leaderboard?limit=501", "limit"),
            ("/api/v1/leaderboard?limit=0", "limit"),
            ("/api/v1/leaderboard?limit=ten", "limit"),
            ("/api/v1/leaderboard?offset=99999999999", "offset"),
            ("/api/v1/leaderboard?offset=-1", "offset"),
            ("/api/v1/leaderboard?tier=6Z", "tier"),
            ("/api/v1/leaderboard?active=maybe", "active"),
            ("/api/v1/leaderboard?ofset=3", "ofset"),
            ("/api/v1/leaderboard?limit=1&limit=2", "limit"),
            ("/api/v1/leaderboard?scope=planet:x", "scope"),
            ("/api/v1/players?ids=" + ",".join(["x"] * 257), "ids"),
            ("/api/v1/players", "ids"),
            ("/api/v1/players?ids=a,,b", "ids"),
            ("/api/v1/players?ids=" + "x" * 129, "ids"),
            ("/api/v1/players?ids=%FF", "ids"),
            ("/api/v1/predict?a=x", "b"),
            ("/api/v1/balance?players=a", "players"),
            ("/api/v1/balance?players=" + ",".join(f"n{i}" for i in range(65)), "players"),
            ("/api/v1/balance?players=a,b&teams=1", "teams"),
            ("/api/v1/balance?players=a,b&teams=3", "teams"),
            ("/api/v1/search?q=", "q"),
            ("/api/v1/search?q=a&limit=51", "limit"),
            ("/api/v1/players/x/history?since=nan", "since"),
            ("/api/v1/players/x/history?since=10&until=5", "until"),
        ],
    )
    def test_400_names_the_parameter(self, client: Client, target: str, parameter: str) -> None:
        r = client.get(target)
        assert r.status == 400, r.body
        body = r.json()
        assert body["parameter"] == parameter
        assert body["error"]
        assert r.headers["cache-control"] == "no-store"

    def test_404s(self, client: Client, world: World) -> None:
        for target, parameter in (
            ("/api/v1/players/nobody", "player"),
            (f"/api/v1/predict?a=nobody&b={seg(world.players[0])}", "a"),
            ("/api/v1/leaderboard?scope=server:nowhere", "scope"),
        ):
            r = client.get(target)
            assert r.status == 404
            assert r.json()["parameter"] == parameter
        assert client.get("/api/v1/nothing").status == 404

    def test_no_write_method(self, client: Client) -> None:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            r = client.get("/api/v1/leaderboard", method=method)
            assert r.status == 405
            assert "GET" in r.headers["allow"]

    def test_huge_header_is_refused(self, client: Client) -> None:
        # Refused by the adapter before any route is chosen: 431 (or a 400), JSON, no trace.
        r = client.get("/api/v1/status", headers={"X-Junk": "j" * 20_000}, validate=False)
        assert r.status in (400, 431)
        assert b"Traceback" not in r.body
        assert set(r.json()) == {"error", "status"}
        long_line = client.get("/api/v1/search?q=" + "a" * 20_000, validate=False)
        assert long_line.status in (400, 431)

    def test_malformed_request_line(self, client: Client) -> None:
        import socket

        host, port = client.host, client.port
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(b"NONSENSE\r\n\r\n")
            reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 400")


class TestHostileNames:
    """Every hostile name round-trips through the URL encoding of a path segment and a list."""

    @pytest.mark.parametrize("name", [n for n in HOSTILE if n not in (".", "..")])
    def test_player_path(self, client: Client, name: str) -> None:
        body = client.get(f"/api/v1/players/{seg(name)}").json()
        assert body["player"] == name
        history = client.get(f"/api/v1/players/{seg(name)}/history").json()
        assert history["player"] == name

    def test_batch_and_balance(self, client: Client) -> None:
        ids = ",".join(seg(n) for n in HOSTILE)
        body = client.get(f"/api/v1/players?ids={ids}").json()
        assert sorted(row["player"] for row in body["players"]) == sorted(HOSTILE)
        assert body["unknown"] == []
        names = HOSTILE[:12]
        split = client.get(f"/api/v1/balance?players={','.join(seg(n) for n in names)}").json()
        assert sorted(n for t in split["teams"] for n in t["players"]) == sorted(names)
        assert split["unknown"] == []

    def test_query_plus_is_a_space(self, client: Client) -> None:
        assert client.get("/api/v1/search?q=two+wor").json()["players"][0]["player"] == "two words"
        assert client.get("/api/v1/search?q=plus%2Bs").json()["players"][0]["player"] == "plus+sign"

    def test_dot_names_through_the_batch(self, client: Client) -> None:
        body = client.get(f"/api/v1/players?ids={quote('.')},{quote('..')}").json()
        assert sorted(row["player"] for row in body["players"]) == [".", ".."]


class TestCaching:
    """ETag / If-None-Match answers 304; Cache-Control carries the short max-age."""

    def test_etag_and_304(self, client: Client) -> None:
        r = client.get("/api/v1/tiers")
        etag = r.headers["etag"]
        assert r.headers["cache-control"] == "public, max-age=5"
        again = client.get("/api/v1/tiers", headers={"If-None-Match": etag})
        assert again.status == 304
        assert again.body == b""
        assert again.headers["etag"] == etag
        other = client.get("/api/v1/tiers", headers={"If-None-Match": '"something-else"'})
        assert other.status == 200

    def test_head(self, client: Client) -> None:
        r = client.get("/api/v1/tiers", method="HEAD")
        assert r.status == 200
        assert r.body == b""

    def test_security_headers(self, client: Client) -> None:
        r = client.get("/api/v1/status")
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "default-src 'none'" in r.headers["content-security-policy"]


@pytest.fixture(scope="module")
def strict_server(world: World) -> Iterator[ServerThread]:
    # One token per 100 s after a burst of 3: no refill can happen within the test.
    srv = start_server(world, rate_limit=0.01, burst=3)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def cors_server(world: World) -> Iterator[ServerThread]:
    srv = start_server(world, cors_origins=["https://stats.example.org"])
    yield srv
    srv.stop()


class TestLimitsAndCors:
    """The per-client token bucket answers 429 with Retry-After; CORS only for listed origins."""

    def test_rate_limited(self, strict_server: ServerThread) -> None:
        assert strict_server.handle.address is not None
        c = Client(strict_server.handle.address)
        statuses = [c.get("/api/v1/tiers").status for _ in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
        r = c.get("/api/v1/tiers")
        assert r.status == 429
        assert 1 <= int(r.headers["retry-after"]) <= 100
        assert r.json()["error"] == "rate limited"

    def test_cors(self, cors_server: ServerThread) -> None:
        assert cors_server.handle.address is not None
        c = Client(cors_server.handle.address)
        ok = c.get("/api/v1/openapi.json", headers={"Origin": "https://stats.example.org"})
        assert ok.headers.get("access-control-allow-origin") == "https://stats.example.org"
        assert ok.headers.get("vary") == "Origin"
        other = c.get("/api/v1/openapi.json", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        preflight = c.get("/api/v1/tiers", headers={"Origin": "https://stats.example.org"}, method="OPTIONS")
        assert preflight.status == 204
        assert preflight.headers["access-control-allow-methods"] == "GET, HEAD"


class TestFailures:
    """An internal error answers a generic 500, logged once per kind; the server goes on."""

    def test_500_without_a_trace(self, world: World) -> None:
        calls = 0

        def broken() -> dict[str, object]:
            nonlocal calls
            calls += 1
            raise RuntimeError("secret detail")

        ports = WebPorts(scopes=lambda: world.scopes, status=broken, history=None)
        srv = ServerThread(ports, WebSettings(listen="127.0.0.1:0", rate_limit=0.0, readers=0))
        try:
            assert srv.handle.address is not None
            c = Client(srv.handle.address)
            with structlog.testing.capture_logs() as logs:
                for _ in range(3):
                    r = c.get("/api/v1/status")
                    assert r.status == 500
                    assert r.json() == {"error": "internal error", "status": 500}
                    assert b"secret" not in r.body and b"Traceback" not in r.body
            assert calls == 3
            assert [e["event"] for e in logs].count("web_request_failed") == 1
            assert srv.handle.app.internal_errors == 3
            # No history configured: the history route says so, the player answer too.
            name = seg(world.players[0])
            assert c.get(f"/api/v1/players/{name}/history").status == 501
            assert c.get(f"/api/v1/players/{name}").json()["history"] == {"available": False}
        finally:
            srv.stop()
