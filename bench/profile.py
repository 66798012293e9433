"""``python -m bench.profile``: cProfile of the benchmark's main stream, to see where apply's time goes.

The same workload and warm-up as ``python -m bench``; only the main stream is profiled. cProfile
charges a fixed cost to every call, so small helpers (bisect, dict.get, math) look heavier than
they are: use it for the shape and the call counts, and ``python -m bench`` for the figures.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
from collections.abc import Sequence

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from bench.core import warm_up
from bench.stream import StreamConfig, generate


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    ap.add_argument("--players", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sort", default="tottime", help="pstats sort key (default tottime)")
    ap.add_argument("--top", type=int, default=30, help="rows to print (default 30)")
    args = ap.parse_args(argv)
    work = generate(StreamConfig(players=args.players, events=args.events, seed=args.seed))
    engine = Engine(ADRParams())
    warm_up(engine, work)
    gc.collect()
    apply = engine.apply
    due = engine.recalibration_due
    recalibrate = engine.recalibrate
    prof = cProfile.Profile()
    prof.enable()
    for a, v, t in work.events:
        if due(t):
            recalibrate(t)
        apply(a, v, t)
    prof.disable()
    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
