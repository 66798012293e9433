"""The query protocol's JSON: orjson on the fast path, the standard library for everything else.

Either way a request parses to exactly what the standard parser gives (or is refused with the
standard path's message), and a reply decodes to the same value as the standard encoder's.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.daemon.query import _encode, _parse, _RequestError
from arenad.views import finite as _finite

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
requests = st.dictionaries(
    st.sampled_from(["op", "player", "n", "offset", "id", "scope", "x"]) | st.text(max_size=5),
    values,
    max_size=6,
)


def standard(line: bytes) -> Any:
    return json.loads(
        line.decode("utf-8"), parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name))
    )


@settings(max_examples=600, deadline=None)
@given(requests, st.booleans())
def test_a_request_parses_as_the_standard_parser_would(request: dict[str, Any], ascii_only: bool) -> None:
    line = json.dumps(request, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") + b"\n"
    try:
        expected = standard(line)
    except (ValueError, UnicodeDecodeError):
        with pytest.raises(_RequestError):
            _parse(line)
        return
    got = _parse(line)
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def test_a_huge_int_stays_an_int() -> None:
    """orjson reads an int beyond 64 bits as a float: such a request takes the standard path."""
    assert _parse(b'{"op": "top", "offset": 1000000000000000000000000000000}')["offset"] == 10**30


@settings(max_examples=600, deadline=None)
@given(requests)
def test_a_reply_decodes_as_the_standard_encoders_would(reply: dict[str, Any]) -> None:
    out = _encode(reply)
    assert out.endswith(b"\n") and out.count(b"\n") == 1
    decoded = json.loads(out)  # valid UTF-8 JSON, no NaN or Infinity
    expected = json.loads(json.dumps(_finite(reply), allow_nan=False))
    assert json.dumps(decoded, sort_keys=True) == json.dumps(expected, sort_keys=True)


def test_non_finite_floats_are_null() -> None:
    assert json.loads(_encode({"a": math.nan, "b": [math.inf], "c": 1.5})) == {
        "a": None,
        "b": [None],
        "c": 1.5,
    }
