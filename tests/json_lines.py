"""Hypothesis strategies of JSON lines near the wire schema's common kill shape (tests/test_decode.py
compares the C line scanner with the line decoder on them, tests/test_replay.py the batch replay
with the per-event one)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

_KEYS = ["t", "attacker", "victim", "server", "weapon", "id"]
#: Values in the shapes the scanner takes and the ones near them it must hand back.
_RAW_VALUES = st.one_of(
    st.sampled_from(
        [
            '"alice"', '"bob"', '"eu-1"', '""', '"a\\"b"', '"\\u0061lice"', '"\\ud800"', '"ali\\nce"',
            '"\u202eecila"', '"Ünï"', '"x\x01y"', '"' + "n" * 32 + '"', '"' + "n" * 33 + '"',
            "1.5", "-0.0", "0.0", "1e3", "1E+3", "2.5e-3", "01.5", "1.", ".5", "-", "1e", "17",
            "-3", "0", "123456789012345678", "1234567890123456789", "1e999", "-1e999",
            "123456789012345678901234567890.123456789", "NaN", "Infinity", "-Infinity",
            "null", "true", "[]", "{}", '"1.5"', "1_0.5", "0x1p3",
        ]
    ),
    st.floats().map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.text(max_size=4).map(lambda s: json.dumps(s, ensure_ascii=False)),
)  # fmt: skip
_WS = st.sampled_from(["", "", " ", "\t", "  ", "\x0b", "\x0c", "\u00a0"])
_GOOD_WS = st.sampled_from(["", "", " ", "\t"])
_GOOD_VALUES = {
    "t": st.floats(allow_nan=False, allow_infinity=False).map(repr),
    "attacker": st.sampled_from(['"alice"', '"bob"', '"c"', '"' + "n" * 32 + '"']),
    "victim": st.sampled_from(['"bob"', '"carol"', '"alice"']),
    "server": st.sampled_from(['"eu-1"', '""', '"us"']),
    "weapon": st.sampled_from(['"rail"', '"rocket launcher"']),
    "id": st.one_of(st.sampled_from(['"x-1"', '"7"', "0", "-12"]), st.integers(0, 10**18).map(str)),
}


@st.composite
def hostile_json_lines(draw: st.DrawFn) -> bytes:
    """JSON-ish lines written byte by byte: the common shape with its keys in any order, and
    around it keys duplicated, escaped or unknown, hostile values, odd whitespace, every line
    terminator. Half the lines are of the common shape with at most one part changed."""
    out = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.integers(0, 9)) == 0:
            out.append(draw(st.sampled_from(["", "  ", "[]", "{", "}", "nul", '{"t":1.5}{}', "\ufeff{}"])))
        elif draw(st.booleans()):  # the common shape, at most one member mangled
            keys = ["t", "attacker", "victim"]
            keys += draw(st.lists(st.sampled_from(["server", "weapon", "id"]), max_size=3, unique=True))
            keys = draw(st.permutations(keys))
            bad = draw(st.integers(-len(keys), len(keys) - 1))  # < 0: nothing mangled
            members = []
            for k, key in enumerate(keys):
                ws = _WS if k == bad else _GOOD_WS
                value = draw(_RAW_VALUES if k == bad else _GOOD_VALUES[key])
                members.append(f'{draw(ws)}"{key}"{draw(ws)}:{draw(ws)}{value}{draw(ws)}')
            out.append(draw(_GOOD_WS) + "{" + ",".join(members) + "}" + draw(_GOOD_WS))
        else:
            keys = draw(st.lists(st.sampled_from([*_KEYS, *_KEYS[:3], "\\u0074", "T", "extra"]), max_size=7))
            if draw(st.booleans()):
                keys = [k for k in _KEYS[:3] if k not in keys] + keys
            members = []
            for key in keys:
                if key == "t" and draw(st.booleans()):
                    value = repr(draw(st.floats(allow_nan=False, allow_infinity=False)))
                elif key in ("attacker", "victim") and draw(st.booleans()):
                    value = '"' + draw(st.sampled_from(["alice", "bob", "carol", "bob"])) + '"'
                else:
                    value = draw(_RAW_VALUES)
                members.append(f'{draw(_WS)}"{key}"{draw(_WS)}:{draw(_WS)}{value}{draw(_WS)}')
            trail = "," if draw(st.integers(0, 19)) == 0 else ""
            out.append(draw(_WS) + "{" + ",".join(members) + trail + "}" + draw(_WS))
        out.append(draw(st.sampled_from(["\n", "\n", "\r\n", "\r"])))
    if draw(st.booleans()):
        out.pop()  # no terminator after the last line
    return "".join(out).encode("utf-8", "surrogatepass")


_EDIT_BYTES = st.sampled_from([*b' \t"\\,:{}[]\n\r.-+eE019xtn', 0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xFF])


@st.composite
def compact_json_lines(draw: st.DrawFn) -> bytes:
    """The compact shape most writers emit (``{"t":N,"attacker":"A","victim":"V"}``, a server
    last or not, no whitespace: the scanner's literal fast path), then up to two bytes inserted,
    deleted or replaced anywhere, so that every way of leaving that shape by one step is met."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        line = (
            b'{"t":'
            + draw(_GOOD_VALUES["t"]).encode()
            + b',"attacker":'
            + draw(_GOOD_VALUES["attacker"]).encode()
            + b',"victim":'
            + draw(_GOOD_VALUES["victim"]).encode()
            + (b',"server":' + draw(_GOOD_VALUES["server"]).encode() if draw(st.booleans()) else b"")
            + b"}"
        )
        for _ in range(draw(st.integers(0, 2))):
            at = draw(st.integers(0, len(line)))
            edit = draw(st.sampled_from(["insert", "delete", "replace"]))
            byte = bytes([draw(_EDIT_BYTES)])
            if edit == "insert":
                line = line[:at] + byte + line[at:]
            elif at < len(line):
                line = line[:at] + (byte if edit == "replace" else b"") + line[at + 1 :]
        out.append(line + draw(st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"])))
    return b"".join(out)
