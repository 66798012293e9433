"""bench.replay's three batch paths on a fixed stream, for instruction counts.

    valgrind --tool=callgrind .venv/bin/python -m bench.replay_count replay   # arenad replay
    valgrind --tool=callgrind .venv/bin/python -m bench.replay_count tune     # one tuning evaluation
    valgrind --tool=callgrind .venv/bin/python -m bench.replay_count feed     # Engine.feed per call
    valgrind --tool=callgrind .venv/bin/python -m bench.replay_count none     # start-up only

Run them with ``PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1`` in the environment: the count then
repeats to the instruction (numpy's idle BLAS threads otherwise add a few per cent at random).
Every run builds the same stream (bench/stream.py's main stream, 100,000 players, ``--kills``
kills, default 100,000, at 200 kills/s of event time), writes it as bench.replay's JSON-lines
file and splits it into columns; then it runs one part on all of it: ``replay_files`` of the
file, ``walk_forward_adr`` on the columns, or ``Engine.feed`` once per kill. Subtract the run
of ``none`` from each to leave the part's own cost (docs/performance.md, "Batch replay").
Prints the wall-clock seconds of the part on stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from arenad.evaluation.fast import columns, walk_forward_adr
from arenad.replay import replay_files
from bench.replay import write_jsonl
from bench.stream import StreamConfig, generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=("replay", "tune", "feed", "none"))
    ap.add_argument("--kills", type=int, default=100_000)
    args = ap.parse_args()
    params = ADRParams()
    events = generate(StreamConfig(players=100_000, events=args.kills)).events
    cols = columns(events)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        write_jsonl(events, path)
        started = time.perf_counter()
        if args.part == "replay":
            replay_files([path], params)
        elif args.part == "tune":
            walk_forward_adr(params, cols, block=1000, test_every=5)
        elif args.part == "feed":
            feed = Engine(params).feed
            for a, v, t in events:
                feed(a, v, t)
        print(f"seconds {time.perf_counter() - started:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
