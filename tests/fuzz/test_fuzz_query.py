"""Hostile query lines: answering any line never mutates the engine and always gives one JSON line.

tests/daemon/test_query.py fuzzes raw bytes and shapes; here requests are built as JSON objects
with real and wrong ops, every field with values of every type (huge and negative integers,
NaN, nesting, lone surrogates) and known player names, then mutated at the byte level.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.daemon.config import QuerySettings
from arenad.daemon.query import OPS, QueryHandler

PLAYERS = [f"p{i}" for i in range(12)]


@pytest.fixture(scope="module")
def engine() -> Engine:
    eng = Engine()
    t = 1.7e9
    for k in range(300):
        t += 40.0
        eng.feed(PLAYERS[k % 12], PLAYERS[(k * 7 + 1) % 12], t)
    return eng


VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 1005)
    | st.sampled_from([10**30, -(10**30), 2**63, -(2**63), 2**63 - 1, 10**4000])
    | st.floats()
    | st.sampled_from([*PLAYERS, "", "\ud800", "x" * 200, "é" * 65, "nobody"])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(["op", "id", "player", "n", "offset", "a", "b", "ofset", ""])


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    req: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        req["op"] = draw(st.sampled_from([*OPS, "TOP", "set", "", "get\x00"]) | VALUES)
    for key in draw(st.lists(FIELDS, max_size=4)):
        req[key] = draw(VALUES)
    return req


@st.composite
def mutate(draw: st.DrawFn, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(out)))
        out[pos:pos] = draw(st.sampled_from([b"\xff", b"\n", b"{", b"]", b"NaN", b"\\u", b"\x00", b"\r\n"]))
    return bytes(out)


LINES = requests().map(lambda r: json.dumps(r).encode("utf-8", "surrogatepass"))
HOSTILE_LINES = (
    LINES
    | LINES.flatmap(mutate)
    | st.integers(1, 50_000).map(lambda d: b"[" * d + b"]" * d)
    | st.integers(1, 50_000).map(lambda d: b'{"op":"top","n":' + b"[" * d)
    | st.binary(max_size=50)
)


class TestQueryLines:
    """Any request line: one JSON object line with ok true/false, no internal error, no mutation."""

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(HOSTILE_LINES)
    def test_hostile_lines(self, engine: Engine, line: bytes) -> None:
        handler = QueryHandler(lambda: engine, QuerySettings())
        before = engine.export_state()
        out = handler.handle_line(line)
        assert engine.export_state() == before
        assert out.endswith(b"\n") and out.count(b"\n") == 1
        reply = json.loads(out)
        assert isinstance(reply, dict) and isinstance(reply["ok"], bool)
        if not reply["ok"]:
            assert isinstance(reply["error"], str) and len(reply["error"]) < 400
        assert handler.internal_errors == 0, reply
        assert handler.handle_line(line) == out  # deterministic (the engine did not change)
