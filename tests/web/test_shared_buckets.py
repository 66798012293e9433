"""The readers' shared rate-limit table (``readers.SharedBuckets``) against ``ClientBuckets``.

The differential: while no client is evicted, the shared table answers every ``take`` exactly
as the per-process buckets do (one rule, ``views.take_token``). Across a fork: a process and its
fork draw on one bucket, not one each.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.web.api import ClientBuckets
from arenad.web.readers import SharedBuckets

CLIENTS = [f"10.0.0.{k}" for k in range(6)] + ["::1", "2001:db8::7"]


@settings(max_examples=200, deadline=None)
@given(
    rate=st.sampled_from([0.0, 0.5, 1.0, 50.0]),
    burst=st.integers(1, 6),
    steps=st.lists(
        st.tuples(st.sampled_from(CLIENTS), st.floats(-0.5, 2.0, allow_nan=False)), min_size=1, max_size=60
    ),
)
def test_the_shared_table_answers_as_the_per_process_buckets(
    rate: float, burst: int, steps: list[tuple[str, float]]
) -> None:
    mine = ClientBuckets(rate, burst, max_clients=64)
    shared = SharedBuckets(rate, burst, max_clients=64)
    now = 100.0
    for client, dt in steps:
        now += dt  # steps back too: a clock that steps back refills nothing, in both
        assert shared.take(client, now) == mine.take(client, now)


def test_a_table_full_of_other_clients_forgets_the_least_recent_and_starts_it_full() -> None:
    shared = SharedBuckets(0.0, 2, max_clients=8)  # 16 slots
    for k in range(200):  # far more clients than slots: evictions everywhere
        shared.take(f"c{k}", float(k))
    assert shared.take("c0", 1000.0) == 0.0  # forgotten: a full bucket again
    assert shared.take("c0", 1000.0) == 0.0
    assert shared.take("c0", 1000.0) > 0.0  # rate 0: two and no more


def test_two_processes_share_one_burst() -> None:
    """One after the other (the table has no lock: concurrent takes may lose an update, which
    the docstring allows), a fork and its parent draw on one bucket of 40, not 40 each."""
    shared = SharedBuckets(0.0, 40, max_clients=16)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child takes first, as the other reader would
        os.close(r)
        got = sum(1 for _ in range(30) if shared.take("1.2.3.4", 1.0) == 0.0)
        os.write(w, bytes([got]))
        os._exit(0)
    os.close(w)
    theirs = os.read(r, 1)[0]
    os.waitpid(pid, 0)
    os.close(r)
    mine = sum(1 for _ in range(30) if shared.take("1.2.3.4", 1.0) == 0.0)
    assert (theirs, mine) == (30, 10)
