"""The OpenAPI 3.1 document of the API, as data: `python -m arenad.web.openapi_doc` writes
arenad/web/openapi.json (served at /api/v1/openapi.json).

The document is checked in; tests/web/test_openapi.py validates every API answer the test suite
produces against it, and checks the file equals this script's output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "openapi.json"

NUM = {"type": "number"}
NUM_OR_NULL = {"type": ["number", "null"]}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
TIER = {"type": ["string", "null"], "description": "1H (best) .. 5L; null while not placed"}


def obj(props: dict[str, Any], optional: tuple[str, ...] = (), extra: bool = False) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": [k for k in props if k not in optional],
        "additionalProperties": extra,
    }


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


SCHEMAS: dict[str, Any] = {
    "Error": obj({"error": STR, "status": INT, "parameter": STR}, optional=("parameter",)),
    "Row": obj(
        {
            "rank": {**INT, "description": "public competition rank (hidden players skipped)"},
            "player": STR,
            "mu": NUM,
            "sigma": NUM,
            "display": NUM_OR_NULL,
            "tier": TIER,
            "provisional": BOOL,
            "active": BOOL,
        }
    ),
    "Session": obj(
        {
            "server": STR,
            "t_start": NUM,
            "t_end": NUM,
            "kills": INT,
            "deaths": INT,
            "delta": NUM,
            "rating_after": NUM,
        }
    ),
    "Point": obj({"t": NUM, "rating": NUM, "display": NUM_OR_NULL, "tier": TIER}),
    "Leaderboard": obj(
        {
            "scope": STR,
            "offset": INT,
            "limit": INT,
            "total": {"type": ["integer", "null"], "description": "null when a filter cannot count"},
            "players": {"type": "array", "items": ref("Row")},
            "tier": STR,
            "active": BOOL,
            "truncated": BOOL,
        },
        optional=("tier", "active", "truncated"),
    ),
    "HistorySummary": obj(
        {
            "available": BOOL,
            "window_seconds": NUM,
            "points_in_window": INT,
            "change_in_window": NUM,
            "sessions": {"type": "array", "items": ref("Session")},
        },
        optional=("window_seconds", "points_in_window", "change_in_window", "sessions"),
    ),
    "Player": obj(
        {
            "scope": STR,
            "player": STR,
            "mu": NUM,
            "sigma": NUM,
            "display": NUM_OR_NULL,
            "tier": TIER,
            "placed": BOOL,
            "provisional": BOOL,
            "placement": obj({"events": INT, "events_needed": INT, "sigma": NUM, "sigma_needed": NUM}),
            "rank": INT,
            "percentile": NUM,
            "events": INT,
            "streak": INT,
            "trend": NUM,
            "last_seen": NUM_OR_NULL,
            "active": BOOL,
            "players": INT,
            "history": ref("HistorySummary"),
        }
    ),
    "Batch": obj(
        {
            "scope": STR,
            "players": {"type": "array", "items": ref("Row")},
            "unknown": {"type": "array", "items": STR, "description": "unknown (or hidden) ids, in order"},
        }
    ),
    "History": obj(
        {
            "scope": STR,
            "player": STR,
            "since": NUM_OR_NULL,
            "until": NUM_OR_NULL,
            "thinned": BOOL,
            "points": {"type": "array", "items": ref("Point")},
            "sessions": {"type": "array", "items": ref("Session")},
        }
    ),
    "Tiers": obj(
        {
            "scope": STR,
            "tiers": {
                "type": "array",
                "items": obj(
                    {"tier": STR, "min_mu": NUM_OR_NULL, "players": INT, "target": NUM, "share": NUM}
                ),
            },
            "placed": INT,
            "unplaced": INT,
            "calibrations": INT,
            "active": INT,
            "players": INT,
        }
    ),
    "Predict": obj({"scope": STR, "a": STR, "b": STR, "p": {**NUM, "minimum": 0, "maximum": 1}}),
    "Balance": obj(
        {
            "scope": STR,
            "teams": {
                "type": "array",
                "items": obj({"players": {"type": "array", "items": STR}, "mean": NUM}),
                "description": "strongest team first",
            },
            "spread": NUM,
            "p": {**NUM, "minimum": 0, "maximum": 1, "description": "P(strongest team beats weakest)"},
            "method": {"type": "string", "enum": ["exhaustive", "heuristic"]},
            "unknown": {"type": "array", "items": STR, "description": "rated at the starting rating"},
        }
    ),
    "Search": obj({"scope": STR, "q": STR, "players": {"type": "array", "items": ref("Row")}}),
    "Status": {
        "type": "object",
        "properties": {
            "version": STR,
            "feeds": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"state": STR, "last_event_age": NUM_OR_NULL},
                },
            },
            "events_per_second": NUM_OR_NULL,
            "players": INT,
            "scopes": {
                "type": "array",
                "items": obj(
                    {"scope": STR, "players": INT, "active": INT, "closed": BOOL}, optional=("active",)
                ),
            },
            "web_internal_errors": INT,
        },
        "required": ["version", "feeds", "events_per_second", "players", "scopes"],
        "additionalProperties": True,
    },
}

SCOPE = {
    "name": "scope",
    "in": "query",
    "required": False,
    "description": "global (default), server:ID, season (the current one), season:NAME, event:NAME",
    "schema": {"type": "string", "default": "global"},
}
PLAYER = {
    "name": "player",
    "in": "path",
    "required": True,
    "description": "the name, every reserved character percent-encoded (/ as %2F)",
    "schema": {"type": "string"},
}


def q(name: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


def error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref("Error")}}}


def op(
    summary: str, schema: str, params: list[dict[str, Any]], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {"description": "OK", "content": {"application/json": {"schema": ref(schema)}}},
        "304": {"description": "Not modified (If-None-Match matched the ETag)"},
        "400": error("A bad parameter: `parameter` names it"),
        "404": error("Unknown player, scope or route"),
        "429": error("Rate limited: see Retry-After"),
        "500": error("Internal error (logged; no details)"),
    }
    responses.update(extra or {})
    return {"get": {"summary": summary, "parameters": [SCOPE, *params], "responses": responses}}


PATHS = {
    "/api/v1/leaderboard": op(
        "The ladder, best first",
        "Leaderboard",
        [
            q("offset", {"type": "integer", "minimum": 0, "maximum": 10_000_000}, "players skipped"),
            q("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "rows"),
            q("tier", {"type": "string"}, "only this tier (1H .. 5L)"),
            q("active", {"type": "boolean"}, "only active players"),
        ],
    ),
    "/api/v1/players": op(
        "A batch of players (the balancer use case)",
        "Batch",
        [q("ids", {"type": "string"}, "comma-separated names (at most 256; a comma in a name as %2C)", True)],
    ),
    "/api/v1/players/{player}": op("One player, with a history summary", "Player", [PLAYER]),
    "/api/v1/players/{player}/history": op(
        "A player's rating over time and recent sessions",
        "History",
        [
            PLAYER,
            q("since", {"type": "number"}, "unix seconds"),
            q("until", {"type": "number"}, "unix seconds"),
        ],
        {"501": error("No rating history is configured")},
    ),
    "/api/v1/tiers": op("Tier boundaries, counts and targets", "Tiers", []),
    "/api/v1/predict": op(
        "P(a kills b)",
        "Predict",
        [q("a", {"type": "string"}, "attacker", True), q("b", {"type": "string"}, "victim", True)],
    ),
    "/api/v1/balance": op(
        "Split players into teams of near-equal strength",
        "Balance",
        [
            q("players", {"type": "string"}, "2 to 64 comma-separated names", True),
            q("teams", {"type": "integer", "minimum": 2, "maximum": 8, "default": 2}, "team count"),
        ],
    ),
    "/api/v1/search": op(
        "Players whose name starts with q (case-insensitive)",
        "Search",
        [
            q("q", {"type": "string"}, "name prefix", True),
            q("limit", {"type": "integer", "minimum": 1, "maximum": 50, "default": 20}, "rows"),
        ],
        {"503": error("The name index is still being built: see Retry-After")},
    ),
    "/api/v1/status": op("Feeds, event rate, players, version", "Status", []),
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "arenad web API",
            "version": "1",
            "description": "Read-only. Every route takes `scope`. Answers carry an ETag and a short "
            "Cache-Control max-age; errors are JSON with the parameter and the reason (docs/web.md).",
        },
        "paths": PATHS,
        "components": {"schemas": SCHEMAS},
    }


def render() -> str:
    return json.dumps(document(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {OUT}\n")
