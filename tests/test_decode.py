"""Wire-schema decoders: every refusal has a reason, and no input makes them raise."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from json_lines import compact_json_lines, hostile_json_lines

from arenad.core._ladder import NameTable
from arenad.core.events import KillEvent, PlacementEvent, Reject, RejectReason, event_from_obj
from arenad.decode import (
    decode_json_line,
    decode_json_rows,
    decode_msgpack,
    decode_msgpack_stream,
    name_table,
    scan_json_kills,
)

GOOD = {"t": 1700000000.5, "attacker": "alice", "victim": "bob", "server": "eu-1", "id": 7, "weapon": "rail"}


class TestEventValidation:
    """One object of the wire schema becomes a KillEvent or a typed Reject."""

    def test_valid_event(self) -> None:
        ev = event_from_obj(GOOD)
        assert ev == KillEvent(1700000000.5, "alice", "bob", "eu-1", "7", "rail")

    @pytest.mark.parametrize(
        ("patch", "reason"),
        [
            ({"t": None}, RejectReason.BAD_TYPE),
            ({"t": "12"}, RejectReason.BAD_TYPE),
            ({"t": True}, RejectReason.BAD_TYPE),
            ({"t": math.nan}, RejectReason.NON_FINITE_TIME),
            ({"t": -math.inf}, RejectReason.NON_FINITE_TIME),
            ({"t": 10**400}, RejectReason.NON_FINITE_TIME),
            ({"attacker": 5}, RejectReason.BAD_TYPE),
            ({"attacker": ""}, RejectReason.BAD_TYPE),
            ({"victim": ["x"]}, RejectReason.BAD_TYPE),
            ({"victim": "x" * 129}, RejectReason.OVERSIZE),
            ({"victim": "é" * 65}, RejectReason.OVERSIZE),  # 130 bytes in UTF-8
            ({"server": 3}, RejectReason.BAD_TYPE),
            ({"id": 1.5}, RejectReason.BAD_TYPE),
            ({"id": "i" * 200}, RejectReason.OVERSIZE),
            ({"victim": "alice"}, RejectReason.SELF_KILL),
        ],
    )
    def test_each_refusal_has_its_reason(self, patch: dict[str, object], reason: RejectReason) -> None:
        out = event_from_obj({**GOOD, **patch})
        assert isinstance(out, Reject)
        assert out.reason is reason
        assert out.detail

    @pytest.mark.parametrize("missing", ["t", "attacker", "victim"])
    def test_missing_required_field(self, missing: str) -> None:
        obj = {k: v for k, v in GOOD.items() if k != missing}
        out = event_from_obj(obj)
        assert isinstance(out, Reject)
        assert out.reason is RejectReason.MISSING_FIELD
        assert missing in out.detail

    def test_optional_fields_may_be_absent(self) -> None:
        ev = event_from_obj({"t": 5, "attacker": "a", "victim": "b"})
        assert ev == KillEvent(5.0, "a", "b")

    def test_a_huge_player_id_string_at_the_limit_is_accepted(self) -> None:
        assert isinstance(event_from_obj({**GOOD, "attacker": "a" * 128}), KillEvent)


class TestDecoders:
    """JSON lines and msgpack, single events and arrays of events."""

    def test_json_line_array(self) -> None:
        line = json.dumps([GOOD, {**GOOD, "attacker": "carol"}]).encode()
        out = list(decode_json_line(line))
        assert [e.attacker for e in out if isinstance(e, KillEvent)] == ["alice", "carol"]

    def test_json_nan_is_a_non_finite_time(self) -> None:
        out = list(decode_json_line(b'{"t": NaN, "attacker": "a", "victim": "b"}'))
        assert [o.reason for o in out if isinstance(o, Reject)] == [RejectReason.NON_FINITE_TIME]

    @pytest.mark.parametrize("line", [b"garbage", b'{"t": 1', b"\xff\xfe", b"42", b"[]", b'"x"'])
    def test_bad_json_lines_are_rejected(self, line: bytes) -> None:
        out = list(decode_json_line(line))
        assert out
        assert all(isinstance(o, Reject) for o in out)

    def test_blank_line_yields_nothing(self) -> None:
        assert list(decode_json_line(b"   ")) == []

    def test_msgpack_datagram(self) -> None:
        out = list(decode_msgpack(msgpack.packb([GOOD, GOOD])))
        assert len(out) == 2
        assert all(isinstance(o, KillEvent) for o in out)

    def test_msgpack_stream_skips_corruption_and_keeps_the_rest(self) -> None:
        data = msgpack.packb(GOOD) + b"\xc1\xc1" + msgpack.packb({**GOOD, "attacker": "zed"})
        out = list(decode_msgpack_stream(data))
        events = [o for o in out if isinstance(o, KillEvent)]
        assert [e.attacker for e in events] == ["alice", "zed"]
        assert any(isinstance(o, Reject) and o.reason is RejectReason.MALFORMED for o in out)

    def test_truncated_msgpack_tail_is_rejected(self) -> None:
        data = msgpack.packb(GOOD) + msgpack.packb(GOOD)[:-3]
        out = list(decode_msgpack_stream(data))
        assert isinstance(out[0], KillEvent)
        assert isinstance(out[-1], Reject)


class TestFuzz:
    """Arbitrary bytes and arbitrary objects never make a decoder raise."""

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=300))
    def test_random_bytes(self, data: bytes) -> None:
        for decoder in (decode_json_line, decode_msgpack, decode_msgpack_stream):
            for out in decoder(data):
                assert isinstance(out, (KillEvent, Reject))

    json_values = st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=5),
        max_leaves=20,
    )

    @settings(max_examples=300, deadline=None)
    @given(
        st.dictionaries(
            st.sampled_from(["t", "attacker", "victim", "server", "id", "weapon", "x"]), json_values
        )
    )
    def test_random_event_objects(self, obj: dict[str, object]) -> None:
        out = event_from_obj(obj)
        if isinstance(out, KillEvent):
            assert math.isfinite(out.t)
            assert out.attacker != out.victim
            assert 0 < len(out.attacker.encode()) <= 128


class TestFastPath:
    """The fast path of event_from_obj decides exactly like the detailed checks."""

    names = st.text(min_size=0, max_size=40) | st.sampled_from(["alice", "bob", "é" * 33])
    times = st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.booleans() | st.none()
    optional = (
        st.none() | st.text(max_size=40) | st.integers(min_value=-(10**40), max_value=10**40) | st.booleans()
    )

    @settings(max_examples=400, deadline=None)
    @given(
        t=times,
        attacker=names,
        victim=names,
        extra=st.dictionaries(st.sampled_from(["server", "id", "weapon", "x"]), optional, max_size=4),
    )
    def test_same_decision_as_the_detailed_checks(
        self, t: object, attacker: str, victim: str, extra: dict[str, object]
    ) -> None:
        from arenad.core.events import _event_from_obj_slow

        obj = {"t": t, "attacker": attacker, "victim": victim, **extra}
        fast = event_from_obj(obj)
        slow = _event_from_obj_slow(obj)
        if isinstance(slow, KillEvent):
            assert fast == slow
        else:
            assert isinstance(fast, Reject) and isinstance(slow, Reject)
            assert fast.reason is slow.reason


# ---------------------------------------------------------------------------- match placements
PLACED = {
    "t": 1700000100.0,
    "placements": [["alice"], ["bob", "carol"], ["dave"]],
    "server": "eu-1",
    "id": "m1",
}


class TestPlacementEvents:
    """``{"t", "placements": [[player, ...], ...], "server"?, "id"?}``: a match result."""

    def test_valid(self) -> None:
        ev = event_from_obj(PLACED)
        assert ev == PlacementEvent(1700000100.0, (("alice",), ("bob", "carol"), ("dave",)), "eu-1", "m1")
        assert isinstance(ev, PlacementEvent) and ev.players == 4

    def test_same_from_json_and_msgpack(self) -> None:
        from_json = list(decode_json_line(json.dumps([PLACED, GOOD]).encode()))
        from_msgpack = list(decode_msgpack(msgpack.packb([PLACED, GOOD])))
        assert from_json == from_msgpack
        assert [type(x) for x in from_json] == [PlacementEvent, KillEvent]

    @pytest.mark.parametrize(
        ("patch", "reason"),
        [
            ({"placements": "alice,bob"}, RejectReason.BAD_TYPE),
            ({"placements": [["alice"], "bob"]}, RejectReason.BAD_TYPE),
            ({"placements": [["alice"], []]}, RejectReason.BAD_TYPE),
            ({"placements": [["alice"], [7]]}, RejectReason.BAD_TYPE),
            ({"placements": [["alice"], [""]]}, RejectReason.BAD_TYPE),
            ({"placements": [["alice"], ["x" * 129]]}, RejectReason.OVERSIZE),
            ({"placements": [["alice"], ["bob", "alice"]]}, RejectReason.MALFORMED),
            ({"placements": [["alice"]]}, RejectReason.MALFORMED),
            ({"placements": []}, RejectReason.MALFORMED),
            ({"placements": [[f"p{i}"] for i in range(257)]}, RejectReason.OVERSIZE),
            ({"t": math.nan}, RejectReason.NON_FINITE_TIME),
            ({"t": "now"}, RejectReason.BAD_TYPE),
            ({"server": 3}, RejectReason.BAD_TYPE),
            ({"id": 1.5}, RejectReason.BAD_TYPE),
            ({"attacker": "alice"}, RejectReason.MALFORMED),  # a kill and a match at once
        ],
    )
    def test_refused_with_reason(self, patch: dict[str, object], reason: RejectReason) -> None:
        ev = event_from_obj({**PLACED, **patch})
        assert isinstance(ev, Reject), ev
        assert ev.reason is reason
        assert ev.detail

    def test_missing_time(self) -> None:
        ev = event_from_obj({"placements": [["a"], ["b"]]})
        assert isinstance(ev, Reject) and ev.reason is RejectReason.MISSING_FIELD

    def test_a_tie_of_everyone_is_a_valid_match(self) -> None:
        ev = event_from_obj({"t": 1.0, "placements": [["a", "b", "c"]]})
        assert isinstance(ev, PlacementEvent) and ev.placements == (("a", "b", "c"),)

    @settings(max_examples=200, deadline=None)
    @given(
        groups=st.lists(
            st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4), min_size=1, max_size=6
        ),
        t=st.floats(allow_nan=False, allow_infinity=False),
    )
    def test_any_valid_match_round_trips(self, groups: list[list[str]], t: float) -> None:
        flat = [p for g in groups for p in g]
        ev = event_from_obj({"t": t, "placements": groups})
        if len(set(flat)) == len(flat) >= 2:
            assert ev == PlacementEvent(t, tuple(tuple(g) for g in groups))
            assert list(decode_msgpack(msgpack.packb({"t": t, "placements": groups}))) == [ev]
        else:
            assert isinstance(ev, Reject) and ev.reason is RejectReason.MALFORMED


# ---------------------------------------------------------------------------- batch JSON rows
_NAMES = st.one_of(
    st.sampled_from(["alice", "bob", "carol", "", "a" * 200, "Ünï", "x\\ud800", "bob"]),
    st.text(max_size=6),
    st.integers(),
    st.none(),
)
_TIMES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**30), 10**30),
    st.sampled_from(["1.5", True, None]),
)


@st.composite
def _json_lines(draw: st.DrawFn) -> bytes:
    """Lines of kills in the common shapes and near them, placements, garbage and blanks."""
    lines = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["kill", "kill", "kill", "raw", "placement", "array"]))
        if kind == "raw":
            lines.append(
                draw(
                    st.sampled_from(
                        [b"", b"   ", b"{", b"[]", b"nul", b'{"t": NaN, "attacker": "a", "victim": "b"}']
                    )
                )
            )
            continue
        obj: dict[str, object] = {}
        for key, strategy in (("t", _TIMES), ("attacker", _NAMES), ("victim", _NAMES)):
            if draw(st.integers(0, 9)):
                obj[key] = draw(strategy)
        for key in draw(
            st.lists(st.sampled_from(["server", "id", "weapon", "extra"]), max_size=3, unique=True)
        ):
            obj[key] = draw(st.one_of(st.sampled_from(["eu-1", "", "Ω"]), st.integers(0, 2**70), st.none()))
        if kind == "placement":
            obj = {"t": 1.0, "placements": [["a"], ["b", "c"]]}
        text = json.dumps([obj, obj] if kind == "array" else obj, ensure_ascii=draw(st.booleans()))
        lines.append(text.encode("utf-8", "surrogatepass"))
    return b"\n".join(lines)


def _as_rows(items: list[Any]) -> list[Any]:
    out = []
    for item in items:
        if isinstance(item, KillEvent):
            out.append((item.t, item.attacker, item.victim, item.server, item.id))
        else:
            out.append(item)
    return out


@settings(max_examples=400, deadline=None)
@given(data=_json_lines())
def test_batch_rows_equal_the_line_decoder(data: bytes) -> None:
    """``decode_json_rows`` (orjson with an inline fast path, the batch replay's decoder) yields
    exactly what ``decode_json_line`` yields line by line, a kill as its journal row."""
    want = [item for line in data.splitlines() for item in decode_json_line(line)]
    got = list(decode_json_rows(data))
    assert _as_rows(got) == _as_rows(want)


# ---------------------------------------------------------------------------- the C line scanner
_scan = pytest.mark.skipif(
    scan_json_kills(b"", 0, [], [], [], limit=1) is None, reason="the C extension was not built"
)


def _scanned(data: bytes, limit: int, names: NameTable | None = None) -> tuple[list[Any], int]:
    """What the batch replay decodes from ``data``: the scanner, and decode_json_rows for every
    line it hands back; kills as (t as hex, attacker, victim). Also how many lines it took."""
    out: list[Any] = []
    taken = 0
    pos = 0
    while pos < len(data):
        attackers: list[str] = []
        victims: list[str] = []
        times: list[float] = []
        scanned = scan_json_kills(data, pos, attackers, victims, times, limit=limit, names=names)
        assert scanned is not None
        stop, nxt = scanned
        assert pos <= stop <= nxt <= len(data)
        taken += len(times)
        out.extend((t.hex(), a, v) for t, a, v in zip(times, attackers, victims, strict=True))
        if nxt > stop:
            out.extend(_kill_or_item(item) for item in decode_json_rows(data[stop:nxt]))
            pos = nxt
        else:
            assert times, "the scanner stopped without taking or handing back a line"
            pos = stop
    return out, taken


def _kill_or_item(item: Any) -> Any:
    if isinstance(item, KillEvent):
        return (item.t.hex(), item.attacker, item.victim)
    if type(item) is tuple:
        return (item[0].hex(), item[1], item[2])
    return item


@_scan
class TestScanner:
    """The C scanner of the batch replay takes the common line shape exactly as the line decoder
    reads it, and hands every other line back."""

    @settings(max_examples=1500, deadline=None)
    @given(data=hostile_json_lines(), limit=st.integers(1, 4))
    def test_equals_the_line_decoder_on_hostile_lines(self, data: bytes, limit: int) -> None:
        want = [_kill_or_item(item) for line in data.splitlines() for item in decode_json_line(line)]
        got, _ = _scanned(data, limit)
        assert got == want
        assert _scanned(data, limit, name_table())[0] == want  # names interned, as replay does

    @settings(max_examples=1500, deadline=None)
    @given(data=compact_json_lines(), limit=st.integers(1, 4))
    def test_equals_the_line_decoder_on_the_compact_shape_mangled(self, data: bytes, limit: int) -> None:
        want = [_kill_or_item(item) for line in data.splitlines() for item in decode_json_line(line)]
        assert _scanned(data, limit, name_table())[0] == want

    @settings(max_examples=300, deadline=None)
    @given(data=_json_lines())
    def test_equals_the_line_decoder_on_serialised_objects(self, data: bytes) -> None:
        want = [_kill_or_item(item) for line in data.splitlines() for item in decode_json_line(line)]
        assert _scanned(data, 3)[0] == want

    @pytest.mark.parametrize(
        "line",
        [
            b'{"t": 1700000000.5, "attacker": "alice", "victim": "bob", "server": "eu-1"}',
            b'{"t":1.5,"attacker":"a","victim":"b"}',
            b' {"victim":"b" , "t":-2.5e3,"attacker":"a", "id": 17, "weapon": "rail"}\t',
            b'{"t":1.5,"attacker":"a","victim":"b","id":"x-1","server":""}',
        ],
    )
    def test_takes_the_common_shapes(self, line: bytes) -> None:
        """Else the differential above would pass with a scanner that takes nothing."""
        data = line + b"\r\n" + line
        got, taken = _scanned(data, 10)
        assert taken == 2
        assert got == [_kill_or_item(item) for ln in data.splitlines() for item in decode_json_line(ln)]

    @pytest.mark.parametrize(
        "line",
        [
            b'{"t":1,"attacker":"a","victim":"b"}',  # an int t: the slow path's float(t)
            b'{"t":1.5,"attacker":"a","victim":"b","server":null}',
            b'{"t":1.5,"attacker":"a","victim":"a"}',
            b'{"t":1.5,"attacker":"a","victim":"b","t":2.5}',
            b'{"t":1e999,"attacker":"a","victim":"b"}',
            b'{"t":1.5,"attacker":"\\u0061","victim":"b"}',
            b'{"t":1.5,"attacker":"\xc3\x9c","victim":"b"}',
            b'{"t":1.5,"attacker":"a","victim":"b","extra":1}',
            b'[{"t":1.5,"attacker":"a","victim":"b"}]',
            b"   ",
        ],
    )
    def test_hands_back_what_it_is_not_certain_of(self, line: bytes) -> None:
        assert scan_json_kills(line + b"\n", 0, [], [], [], limit=10) == (0, len(line) + 1)

    def test_a_name_table_hands_out_one_str_per_name(self) -> None:
        """Across lines and calls; distinct names stay distinct as the table grows."""
        names = name_table()
        assert names is not None
        lines = [
            f'{{"t":{k}.5,"attacker":"p{k % 3000}","victim":"q{k % 7}"}}\n'.encode() for k in range(9000)
        ]
        attackers: list[str] = []
        victims: list[str] = []
        times: list[float] = []
        for half in (lines[:4500], lines[4500:]):
            data = b"".join(half)
            assert scan_json_kills(data, 0, attackers, victims, times, limit=10**6, names=names) == (
                len(data),
                len(data),
            )
        assert attackers == [f"p{k % 3000}" for k in range(9000)]
        assert victims == [f"q{k % 7}" for k in range(9000)]
        assert all(attackers[k] is attackers[k % 3000] for k in range(9000))
        assert all(victims[k] is victims[k % 7] for k in range(9000))
        assert len({id(a) for a in attackers}) == 3000
        assert len(names) == 3007

    def test_names_chosen_to_collide_cost_a_bounded_search_and_stay_right(self) -> None:
        """Forty names on one home slot (found with ``_name_hash``, _jsonl.c's name_hash): the
        table keeps those within its probe bound and builds the others afresh, every one right."""
        colliding = [n for n in (f"c{k}" for k in range(200_000)) if _name_hash(n.encode()) & 1023 == 7][:40]
        assert len(colliding) == 40
        data = b"".join(
            f'{{"t":{k}.5,"attacker":"{n}","victim":"v"}}\n'.encode() for k, n in enumerate(colliding)
        )
        names = name_table()
        assert names is not None
        for _ in range(2):
            attackers: list[str] = []
            scan_json_kills(data, 0, attackers, [], [], limit=100, names=names)
            assert attackers == colliding
        assert len(names) < 41  # not every name was kept: the probe bound was reached


def _name_hash(name: bytes) -> int:
    """_jsonl.c's name_hash, to find names that collide in a NameTable (the test above fails,
    rather than passes without colliding, should the two drift apart)."""
    mask = (1 << 64) - 1
    h = 0x9E3779B97F4A7C15 ^ len(name)
    for k in range(0, len(name), 8):
        word = name[k : k + 8]  # the last one may be short: no shift after it
        h = ((h ^ int.from_bytes(word, "little")) * 0xFF51AFD7ED558CCD) & mask
        if len(word) == 8:
            h ^= h >> 32
    h ^= h >> 29
    h = (h * 0xC4CEB9FE1A85EC53) & mask
    h ^= h >> 32
    return h | 1


def _t_line(number: str) -> bytes:
    return b'{"t":' + number.encode() + b',"attacker":"a","victim":"b"}'


def _near_halfway(x: float, digits: int, nudge: int) -> str:
    """The midpoint between x and the next double up, to ``digits`` significant digits, moved
    by ``nudge`` units in the last digit: the numbers whose rounding is hardest to get right."""
    mid = (Decimal(x) + Decimal(math.nextafter(x, math.inf))) / 2
    _sign, ds, exp = mid.as_tuple()
    assert isinstance(exp, int)
    q = Decimal(1).scaleb(exp + len(ds) - digits)
    return str(mid.quantize(q) + nudge * q)


_DECIMALS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(min_value=1e9, max_value=3e9).map(repr),  # timestamps, as feeds write them
    st.builds(
        lambda sign, whole, frac, exp: f"{sign}{whole}.{frac}{exp}",
        st.sampled_from(["", "-"]),
        st.integers(0, 10**20).map(str),
        st.text("0123456789", min_size=1, max_size=21),
        st.one_of(st.just(""), st.integers(-25, 25).map(lambda e: f"e{e:+d}"), st.just("E3")),
    ),
    st.builds(
        _near_halfway,
        st.floats(min_value=1e-300, max_value=1e300),
        st.integers(15, 21),
        st.integers(-1, 1),
    ),
    # exact ties: an odd integer beyond 2^53 and n + 2^-k beside a double of ulp 2^(1-k)
    st.integers(2**53, 2**63).map(lambda n: f"{n | 1}.0"),
    st.builds(
        lambda n, k: str(Decimal(n) + Decimal(2) ** -k),
        st.integers(2**50, 2**53 - 1),
        st.integers(1, 4),
    ),
)


@_scan
class TestExactDouble:
    """The scanner's time is the double ``float()`` makes of the number, bit for bit: the short
    decimals it rounds itself (``exact_double``) and the others PyOS_string_to_double parses."""

    @settings(max_examples=3000, deadline=None)
    @given(number=_DECIMALS)
    def test_equals_float(self, number: str) -> None:
        times: list[float] = []
        scan_json_kills(_t_line(number) + b"\n", 0, [], [], times, limit=1)
        want = float(number)
        if math.isfinite(want) and ("." in number or "e" in number.lower()):
            assert [t.hex() for t in times] == [want.hex()], number
        else:
            assert times == []

    @pytest.mark.parametrize(
        "number",
        [
            "0.0", "-0.0", "-0.000e5", "0e99999", "1.5", "9007199254740993.0", "9007199254740995.0",
            "4503599627370497.5", "2251799813685248.25", "1125899906842624.125",
            "1750000000.0154717", "9999999999999999999.0", "0.0000000000000000001",
            "1234567890123456789e19", "1e-19", "1e19", "12345678901234567890.0", "1e-20",
            "0.30000000000000004", "1.7976931348623157e308", "2.2250738585072014e-308", "5e-324",
        ],
    )  # fmt: skip
    def test_edges(self, number: str) -> None:
        times: list[float] = []
        scan_json_kills(_t_line(number) + b"\n", 0, [], [], times, limit=1)
        assert [t.hex() for t in times] == [float(number).hex()]
