"""Coverage-guided fuzz targets (atheris + libFuzzer), one per decoder; see docs/fuzzing.md.

Run: ``scripts/fuzz TARGET [--runs N] [libFuzzer flags]`` (or ``python tests/fuzz/atheris_targets.py``).
Each target raises (and so makes libFuzzer report a crash) only when a decoder raises or breaks
an invariant: an accepted event with a non-finite time, an empty or over-long name, or
attacker == victim; a query reply that is not one JSON line, or that changed the engine.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["arenad", "arenad_feeds"]):
    from arenad_feeds.openarena import OpenArenaParser
    from arenad_feeds.source import SourceParser, unframe_udp

    from arenad.core.engine import Engine
    from arenad.core.events import MAX_NAME_BYTES, KillEvent, PlacementEvent, Reject
    from arenad.daemon.config import QuerySettings
    from arenad.daemon.query import QueryHandler
    from arenad.decode import decode_json_line, decode_msgpack, decode_msgpack_stream

CORPUS = Path(__file__).resolve().parent / "corpus"


def _check(items: list[Any]) -> None:
    for it in items:
        if isinstance(it, KillEvent):
            assert math.isfinite(it.t) and it.attacker != it.victim
            for name in (it.attacker, it.victim):
                assert 0 < len(name.encode("utf-8")) <= MAX_NAME_BYTES
        elif isinstance(it, PlacementEvent):
            assert math.isfinite(it.t)
            for group in it.placements:
                for name in group:
                    assert 0 < len(name.encode("utf-8")) <= MAX_NAME_BYTES


def msgpack_target(data: bytes) -> None:
    _check(list(decode_msgpack(data)))
    _check(list(decode_msgpack_stream(data)))


def json_target(data: bytes) -> None:
    _check(list(decode_json_line(data)))


def openarena_target(data: bytes) -> None:
    parser = OpenArenaParser()
    for line in data.split(b"\n"):
        _check(parser.feed(line, 1.7e9))


def source_target(data: bytes) -> None:
    parser = SourceParser()
    for line in data.split(b"\n"):
        _check(parser.feed(line, 1.7e9))


def source_udp_target(data: bytes) -> None:
    secret = "s3cret" if data[:1] == b"S" else None
    line = unframe_udp(data[1:], secret)
    if isinstance(line, bytes):
        assert line and b"\x00" not in line
        _check(SourceParser().feed(line, 1.7e9))
    else:
        assert isinstance(line, Reject)


_ENGINE = Engine()
for _k in range(200):
    _ENGINE.feed(f"p{_k % 10}", f"p{(_k * 3 + 1) % 10}", 1.7e9 + 40.0 * _k)
_STATE = _ENGINE.export_state()
_HANDLER = QueryHandler(lambda: _ENGINE, QuerySettings())


def query_target(data: bytes) -> None:
    out = _HANDLER.handle_line(data)
    assert out.endswith(b"\n") and out.count(b"\n") == 1
    assert isinstance(json.loads(out)["ok"], bool)
    assert _HANDLER.internal_errors == 0
    assert _ENGINE.export_state() == _STATE


TARGETS: dict[str, Callable[[bytes], None]] = {
    "msgpack": msgpack_target,
    "json": json_target,
    "openarena": openarena_target,
    "source": source_target,
    "source_udp": source_udp_target,
    "query": query_target,
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", choices=sorted(TARGETS))
    ap.add_argument("--runs", type=int, default=None, help="stop after N inputs (default: run until stopped)")
    ap.add_argument("--new-corpus", default=None, help="directory for new inputs (default: the seed corpus)")
    args, libfuzzer = ap.parse_known_args(argv)
    seeds = CORPUS / args.target
    dirs = [args.new_corpus, str(seeds)] if args.new_corpus else [str(seeds)]
    flags = [f"-runs={args.runs}"] if args.runs is not None else []
    # libFuzzer writes new inputs to the first directory and only reads the others.
    atheris.Setup([sys.argv[0], *flags, *libfuzzer, *dirs], TARGETS[args.target])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
