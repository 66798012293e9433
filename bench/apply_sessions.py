"""The applier's plain path with and without the play sessions, for instruction counts.

    valgrind --tool=callgrind .venv/bin/python -m bench.apply_sessions 1800 100000   # sessions on
    valgrind --tool=callgrind .venv/bin/python -m bench.apply_sessions 0 100000      # off
    valgrind --tool=callgrind .venv/bin/python -m bench.apply_sessions 1800 0        # start-up only

Arguments: the session gap in seconds (0: no sessions) and the number of kills (among 10,000
players at 200 kills/s of event time on 64 servers) put through ``Applier.apply_all``. Subtract
the run with 0 kills from each to leave the kills' cost (docs/performance.md, "The daemon's apply
path with the play sessions"). Prints the wall-clock seconds on stderr.
"""

from __future__ import annotations

import random
import sys
import time

from arenad.core.params import ADRParams
from arenad.daemon.applier import Applier
from arenad.records import JournalRecord
from arenad.scopes import ScopeConfig, ScopeSet


def main() -> None:
    gap, n = float(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(1)
    players = [f"player{k:05d}" for k in range(10000)]
    records: list[JournalRecord] = []
    t = 1.8e9
    for k in range(n):
        t += rng.expovariate(200.0)
        a, v = rng.sample(players, 2)
        records.append((k + 1, t, a, v, f"srv-{hash(a) % 64}", None))
    scopes = ScopeSet(ADRParams(), ScopeConfig(session_gap=gap))
    started = time.perf_counter()
    Applier(scopes, rules="fixed").apply_all(records)
    print(f"seconds {time.perf_counter() - started:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
