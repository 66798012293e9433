"""Hostile sizes: decoding a hostile input allocates memory in proportion to its bytes, not its claims.

Peak Python allocation is measured with tracemalloc. The bound (64 MiB, for inputs of at most
1 MiB) is generous on purpose: it is not a tuning figure but what a real bug breaks (a decoder
that pre-allocates a claimed 2^31-element array needs 16 GiB).
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable

import pytest
from arenad_feeds.openarena import OpenArenaParser
from arenad_feeds.source import SourceParser

from arenad.core.engine import Engine
from arenad.daemon.config import QuerySettings
from arenad.daemon.query import QueryHandler
from arenad.decode import decode_json_line, decode_msgpack, decode_msgpack_stream

BOUND = 64 << 20
MIB = 1 << 20

KILL = b'{"t":1700000000.5,"attacker":"a","victim":"b"},'
HOSTILE: dict[str, bytes] = {
    "msgpack array claiming 2^31 elements": b"\xdd\x80\x00\x00\x00" + b"\xc0" * 16,
    "msgpack map claiming 2^32-1 pairs": b"\xdf\xff\xff\xff\xff" + b"\xa1t" * 8,
    "msgpack str claiming 4 GiB": b"\xdb\xff\xff\xff\xff" + b"x" * 64,
    "msgpack bin claiming 4 GiB": b"\xc6\xff\xff\xff\xff" + b"x" * 64,
    "msgpack ext claiming 4 GiB": b"\xc9\xff\xff\xff\xff\x01" + b"x" * 64,
    "msgpack nested 500k deep": b"\x91" * 500_000 + b"\xc0",
    "msgpack 1 MiB array of events": b"\xdd\x00\x00\x40\x00" + b"\x83\xa1t\xcb" + b"A\xd9" + b"\x00" * 6,
    "json nested 500k deep": b"[" * 500_000 + b"]" * 500_000,
    "json 1 MiB line of events": b"[" + KILL * (MIB // len(KILL) - 1) + b"{}]",
    "json 1 MiB string": b'{"t":1.0,"attacker":"' + b"x" * (MIB - 40) + b'","victim":"b"}',
    "json 2 MiB line": b"[" + b"1," * MIB + b"1]",
    "json huge integer": b'{"t":' + b"9" * 4000 + b',"attacker":"a","victim":"b"}',
}


def _peak(run: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


class TestHostileSizes:
    """Every decoder's peak allocation on a hostile input stays far below what a claim would need."""

    @pytest.mark.parametrize("name", sorted(HOSTILE))
    def test_wire_decoders(self, name: str) -> None:
        data = HOSTILE[name]
        for decode in (decode_json_line, decode_msgpack):
            peak = _peak(lambda d=decode: sum(1 for _ in d(data)))  # type: ignore[misc]
            assert peak < BOUND, (name, decode.__name__, peak)
        # The stream decoder resynchronises byte by byte on garbage (~0.1 ms a byte on deep
        # nesting, slower under tracemalloc): 4 KiB keeps the test short and holds every header whole.
        peak = _peak(lambda: sum(1 for _ in decode_msgpack_stream(data[: 1 << 12])))
        assert peak < BOUND, (name, "decode_msgpack_stream", peak)

    def test_log_parsers_on_a_1_mib_line(self) -> None:
        line = b"  1:00 ClientUserinfoChanged: 1 n\\" + b"\\x" * (MIB // 2)
        source = b'L 10/20/2023 - 18:23:45: "' + b"<" * MIB
        for feed in (OpenArenaParser().feed, SourceParser().feed):
            for data in (line, source, b"\xff" * MIB):
                assert _peak(lambda f=feed, d=data: f(d, 1.7e9)) < BOUND  # type: ignore[misc]

    def test_query_on_a_1_mib_line(self) -> None:
        handler = QueryHandler(Engine, QuerySettings())
        for data in (
            b'{"op":"get","player":"' + b"x" * MIB + b'"}',
            b"[" * MIB,
            json.dumps({"op": "top", "n": 1, "offset": 10**4000}).encode(),
        ):
            assert _peak(lambda d=data: handler.handle_line(d)) < BOUND  # type: ignore[misc]
