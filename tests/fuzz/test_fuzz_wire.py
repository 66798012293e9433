"""Hostile wire input: JSON lines, msgpack datagrams and streams, MQTT payloads (issue 7).

Structure-aware: valid events are built, then broken on purpose (wrong types, NaN/inf, huge
ints, empty and over-long names, lone surrogates, deep nesting, truncation, invalid UTF-8,
extension types, non-string keys). Beyond "never raises" (tests/test_decode.py), these check
what comes out: every accepted event meets the schema, decoding is deterministic, the output is
bounded by the input, and nothing invalid changes a real engine's state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arenad.core.engine import Engine
from arenad.core.events import (
    MAX_NAME_BYTES,
    MAX_PLACEMENT_PLAYERS,
    KillEvent,
    PlacementEvent,
    Reject,
    RejectReason,
)
from arenad.daemon.sources.mqtt import decode_payload
from arenad.daemon.state import encode_chunk
from arenad.decode import decode_json_line, decode_msgpack, decode_msgpack_stream
from arenad.replay import replay_events

Decoded = KillEvent | PlacementEvent | Reject
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------- invariants


def _name_ok(s: object) -> bool:
    # Strict UTF-8: what the journal and checkpoints (msgpack) must be able to write.
    return isinstance(s, str) and 0 < len(s.encode("utf-8")) <= MAX_NAME_BYTES


def check_decoded(items: list[Decoded], data: bytes) -> None:
    """The schema invariants of every accepted event, and a bound on the output."""
    assert len(items) <= max(1, len(data))
    for item in items:
        if isinstance(item, Reject):
            assert isinstance(item.reason, RejectReason)
            assert isinstance(item.detail, str)
            assert len(item.detail) <= 300 + 16 * len(data)
        elif isinstance(item, KillEvent):
            assert type(item.t) is float and math.isfinite(item.t)
            assert _name_ok(item.attacker) and _name_ok(item.victim)
            assert item.attacker != item.victim
            for optional in (item.server, item.id, item.weapon):
                assert optional is None or (isinstance(optional, str) and _name_ok(optional or "x"))
            # What the daemon does next with an accepted kill: journal it.
            encode_chunk([(1, item.t, item.attacker, item.victim, item.server, item.id)])
        else:
            assert isinstance(item, PlacementEvent)
            assert type(item.t) is float and math.isfinite(item.t)
            players = [p for group in item.placements for p in group]
            assert all(group for group in item.placements)
            assert 2 <= len(players) <= MAX_PLACEMENT_PLAYERS
            assert len(set(players)) == len(players)
            assert all(_name_ok(p) for p in players)


def decode_twice(decode: Callable[[bytes], Iterable[Decoded]], data: bytes) -> list[Decoded]:
    """Decode ``data``, check the invariants, and check a second decode gives the same."""
    first = list(decode(data))
    check_decoded(first, data)
    assert list(decode(data)) == first  # accepted events hold no NaN, so == is exact
    return first


# ---------------------------------------------------------------------------- strategies
NAMES = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=10)
TIMES = st.floats(1.6e9, 1.8e9)


@st.composite
def kill_objs(draw: st.DrawFn) -> dict[str, Any]:
    attacker = draw(NAMES)
    victim = draw(NAMES.filter(lambda v: v != attacker))
    obj: dict[str, Any] = {"t": draw(TIMES), "attacker": attacker, "victim": victim}
    if draw(st.booleans()):
        obj["server"] = draw(NAMES)
    if draw(st.booleans()):
        obj["id"] = draw(NAMES | st.integers(-(2**63), 2**63 - 1))
    if draw(st.booleans()):
        obj["weapon"] = draw(NAMES)
    return obj


@st.composite
def placement_objs(draw: st.DrawFn) -> dict[str, Any]:
    players = draw(st.lists(NAMES, min_size=2, max_size=6, unique=True))
    cut = draw(st.integers(1, len(players)))
    return {
        "t": draw(TIMES),
        "placements": [players[:cut], players[cut:]] if cut < len(players) else [players],
    }


VALID = kill_objs() | placement_objs()

#: Values that are never a time.
WRONG_TYPES = st.sampled_from([None, True, False, [], {}, [1.0], {"t": 1.0}, "1.5", ""])
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
BAD_NAMES: st.SearchStrategy[object] = st.sampled_from(
    ["", "x" * (MAX_NAME_BYTES + 1), "é" * (MAX_NAME_BYTES // 2 + 1), 7, None, []]
)
SURROGATES = st.sampled_from(["\ud800", "a\udfff", "\udc80bc"])


@st.composite
def invalid_objs(draw: st.DrawFn, json_only: bool) -> object:
    """A valid event broken in one way that the schema always refuses."""
    obj = dict(draw(kill_objs()))
    choices = ["drop", "t_type", "t_nan", "name", "self", "optional", "nest", "placement"]
    if json_only:
        choices += ["t_huge", "surrogate"]
    how = draw(st.sampled_from(choices))
    if how == "drop":
        del obj[draw(st.sampled_from(["t", "attacker", "victim"]))]
    elif how == "t_type":
        obj["t"] = draw(WRONG_TYPES | st.text(max_size=5))  # a str is never a time
    elif how == "t_nan":
        obj["t"] = draw(NON_FINITE)
    elif how == "t_huge":
        obj["t"] = draw(st.sampled_from([10**309, -(10**400), 2**1100]))  # beyond a double
    elif how == "name":
        obj[draw(st.sampled_from(["attacker", "victim"]))] = draw(BAD_NAMES)
    elif how == "self":
        obj["victim"] = obj["attacker"]
    elif how == "surrogate":
        obj[draw(st.sampled_from(["attacker", "victim", "server", "weapon", "id"]))] = draw(SURROGATES)
    elif how == "optional":
        key = draw(st.sampled_from(["server", "weapon", "id"]))
        obj[key] = draw(st.sampled_from([[], {}, 1.5, True, "y" * (MAX_NAME_BYTES + 1)]))
    elif how == "nest":
        depth = draw(st.integers(1, 400))  # the encoders' own limits; deeper: deep_json/deep_msgpack
        nested: object = obj
        for _ in range(depth):
            nested = [nested]
        return [nested]  # one array level is a batch; anything deeper is never an event
    else:
        p = draw(placement_objs())
        broken = draw(st.sampled_from(["one", "dup", "unknown", "flat", "empty"]))
        if broken == "one":
            p["placements"] = [[p["placements"][0][0]]]
        elif broken == "dup":
            p["placements"] = [*p["placements"], [p["placements"][0][0]]]
        elif broken == "unknown":
            p["attacker"] = "x"
        elif broken == "flat":
            p["placements"] = [name for group in p["placements"] for name in group]
        else:
            p["placements"] = [[], *p["placements"]]
        return p
    return obj


@st.composite
def deep_json(draw: st.DrawFn) -> bytes:
    """An event (valid or not) inside 2 .. 50,000 arrays: never an event, often a RecursionError."""
    depth = draw(st.integers(2, 50_000))
    return b"[" * depth + to_json(draw(VALID)) + b"]" * depth


@st.composite
def deep_msgpack(draw: st.DrawFn, max_depth: int = 50_000) -> bytes:
    depth = draw(st.integers(2, max_depth))
    return b"\x91" * depth + to_msgpack(draw(VALID))  # fixarray of one element, nested


def leaf_values(msgpack_ok: bool) -> st.SearchStrategy[Any]:
    ints = st.integers(-(2**63), 2**64 - 1) if msgpack_ok else st.integers() | st.just(10**400)
    leaves: st.SearchStrategy[Any] = (
        st.none() | st.booleans() | ints | st.floats() | st.text(max_size=20) | BAD_NAMES
    )
    if msgpack_ok:
        leaves = (
            leaves
            | st.binary(max_size=20)
            | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8))
            | st.builds(msgpack.Timestamp, st.integers(0, 2**33), st.integers(0, 999_999_999))
        )
    else:
        leaves = leaves | SURROGATES
    return leaves


def hostile_values(msgpack_ok: bool) -> st.SearchStrategy[Any]:
    """Anything: valid events, broken ones, and arbitrary trees with event-like keys."""
    keys: st.SearchStrategy[Any] = st.sampled_from(
        ["t", "attacker", "victim", "server", "id", "weapon", "placements"]
    ) | st.text(max_size=5)
    if msgpack_ok:  # msgpack maps may have any hashable key
        keys = keys | st.integers(-5, 5) | st.binary(max_size=4) | st.floats(allow_nan=False)
    trees = st.recursive(
        leaf_values(msgpack_ok),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=6),
        max_leaves=30,
    )
    one = VALID | invalid_objs(json_only=not msgpack_ok) | trees
    return one | st.lists(one, max_size=5)


def to_json(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


def to_msgpack(obj: object) -> bytes:
    # surrogatepass writes a lone surrogate as the 3 bytes no strict UTF-8 reader accepts.
    return msgpack.packb(obj, use_bin_type=True, unicode_errors="surrogatepass")


@st.composite
def byte_mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bytes flipped, inserted, deleted or cut off."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, len(out)))
        if how == "flip" and pos < len(out):
            out[pos] = draw(st.integers(0, 255))
        elif how == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif how == "delete":
            del out[pos : pos + draw(st.integers(1, 4))]
        else:
            del out[pos:]
    return bytes(out)


def mutated(encode: Callable[[object], bytes], values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    encoded = values.map(encode)
    return encoded | encoded.flatmap(byte_mutations)


JSON_INPUTS = mutated(to_json, hostile_values(msgpack_ok=False)) | deep_json()
MSGPACK_INPUTS = mutated(to_msgpack, hostile_values(msgpack_ok=True)) | deep_msgpack()


# ---------------------------------------------------------------------------- tests
class TestJsonLines:
    """Any JSON line: no exception, only schema-valid events, deterministic, bounded."""

    @FUZZ
    @given(JSON_INPUTS)
    def test_hostile_lines(self, line: bytes) -> None:
        decode_twice(decode_json_line, line)

    @FUZZ
    @given(invalid_objs(json_only=True))
    def test_broken_events_are_rejected(self, obj: object) -> None:
        items = decode_twice(decode_json_line, to_json(obj))
        assert items and all(isinstance(i, Reject) for i in items)

    def test_lone_surrogate_names_are_refused(self) -> None:
        """Regression: "\\ud800" was accepted, then the journal's msgpack encoder raised."""
        for key in ("attacker", "victim", "server", "weapon", "id"):
            obj = {"t": 1.7e9, "attacker": "a", "victim": "b", key: "\ud800x"}
            (item,) = decode_json_line(json.dumps(obj).encode())
            assert isinstance(item, Reject) and item.reason is RejectReason.BAD_TYPE, key
            assert key in item.detail
        line = json.dumps({"t": 1.7e9, "placements": [["a"], ["\udfff"]]}).encode()
        (item,) = decode_json_line(line)
        assert isinstance(item, Reject) and item.reason is RejectReason.BAD_TYPE
        # A surrogate *pair* is an ordinary astral character and stays accepted.
        (ok,) = decode_json_line(b'{"t": 1.0, "attacker": "\\ud83d\\ude00", "victim": "b"}')
        assert isinstance(ok, KillEvent) and ok.attacker == "\U0001f600"


class TestMsgpack:
    """Any datagram or stream: no exception, only schema-valid events, deterministic, bounded."""

    @FUZZ
    @given(MSGPACK_INPUTS)
    def test_hostile_datagrams(self, payload: bytes) -> None:
        decode_twice(decode_msgpack, payload)

    @FUZZ
    # The stream decoder resynchronises byte by byte through garbage (~0.1 ms a byte of deep
    # nesting), so its deep inputs are kept shallower here; tests/fuzz/test_fuzz_memory.py has more.
    @given(
        st.lists(mutated(to_msgpack, hostile_values(msgpack_ok=True)) | deep_msgpack(2000), max_size=4).map(
            b"".join
        )
    )
    def test_hostile_streams(self, data: bytes) -> None:
        decode_twice(decode_msgpack_stream, data)

    @FUZZ
    @given(invalid_objs(json_only=False))
    def test_broken_events_are_rejected(self, obj: object) -> None:
        items = decode_twice(decode_msgpack, to_msgpack(obj))
        assert items and all(isinstance(i, Reject) for i in items)

    @FUZZ
    @given(VALID.map(to_msgpack), st.data())
    def test_truncated_datagram_is_one_reject(self, payload: bytes, data: st.DataObject) -> None:
        cut = data.draw(st.integers(0, len(payload) - 1))
        items = decode_twice(decode_msgpack, payload[:cut])
        assert len(items) == 1 and isinstance(items[0], Reject)

    @FUZZ
    @given(VALID.map(to_msgpack), st.sampled_from(["attacker", "victim", "server"]))
    def test_invalid_utf8_string_rejects_the_datagram(self, payload: bytes, key: str) -> None:
        obj = msgpack.unpackb(payload)
        if "attacker" not in obj:
            return  # a placement: no such key to corrupt
        obj[key] = "\udcff"  # written as ED B3 BF, which strict UTF-8 refuses
        items = decode_twice(decode_msgpack, to_msgpack(obj))
        assert len(items) == 1 and isinstance(items[0], Reject)


class TestMqttPayloads:
    """decode_payload in every mode: never raises, never empty, same invariants."""

    @FUZZ
    @given(JSON_INPUTS | MSGPACK_INPUTS, st.sampled_from(["auto", "json", "msgpack"]))
    def test_hostile_payloads(self, payload: bytes, mode: str) -> None:
        items = decode_payload(payload, mode)
        assert items
        check_decoded(items, payload)
        assert decode_payload(payload, mode) == items


class TestNoStateChangeFromInvalidInput:
    """An engine fed valid events interleaved with broken ones ends equal to one fed the valid only."""

    @FUZZ
    @given(
        st.lists(st.floats(0.5, 400.0), min_size=1, max_size=40),
        st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=40, max_size=40),
        st.lists(
            st.one_of(
                invalid_objs(json_only=True).map(lambda o: ("json", to_json(o))),
                invalid_objs(json_only=False).map(lambda o: ("msgpack", to_msgpack(o))),
                deep_json().map(lambda b: ("json", b)),
                deep_msgpack().map(lambda b: ("msgpack", b)),
                VALID.map(to_msgpack).flatmap(
                    lambda b: st.integers(0, len(b) - 1).map(lambda k: ("msgpack", b[:k]))
                ),
            ),
            max_size=40,
        ),
        st.randoms(use_true_random=False),
    )
    def test_engine_state(
        self,
        gaps: list[float],
        pairs: list[tuple[int, int]],
        broken: list[tuple[str, bytes]],
        rng: Any,
    ) -> None:
        valid: list[bytes] = []
        t = 1.7e9
        for gap, (a, v) in zip(gaps, pairs, strict=False):
            t += gap
            kill = {"t": t, "attacker": f"p{a}", "victim": f"p{v if v != a else (a + 1) % 8}"}
            valid.append(to_json(kill) if rng.random() < 0.5 else to_msgpack([kill]))

        def decode(data: bytes, kind: str) -> list[Decoded]:
            return list(decode_json_line(data) if kind == "json" else decode_msgpack(data))

        stream: list[tuple[str, bytes]] = [("json" if b[:1] == b"{" else "msgpack", b) for b in valid]
        for item in broken:
            stream.insert(rng.randrange(len(stream) + 1), item)

        mixed, clean = Engine(), Engine()
        for kind, data in stream:
            items = decode(data, kind)
            if (kind, data) in broken:
                assert all(isinstance(i, Reject) for i in items), items
            replay_events(mixed, items)
        for data in valid:
            replay_events(clean, decode(data, "json" if data[:1] == b"{" else "msgpack"))
        assert mixed.export_state() == clean.export_state()
        assert len(clean) >= 2
