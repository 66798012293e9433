"""The C ladder (arenad/core/_ladder.c) against the Python one (arenad.core.ladder.PyLadder): the same
operations give the same answers, entry for entry (docs/performance.md)."""

from __future__ import annotations

import shutil
import sysconfig
from array import array
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core import ladder as ladder_module
from arenad.core.ladder import PyLadder

if TYPE_CHECKING:
    from arenad.core._ladder import Ladder as NativeLadder

keys = st.sampled_from([-3.5, -1.0, 0.0, 0.25, 1.0, 2.0, 1e9]) | st.floats(-1e6, 1e6)
ids = st.integers(min_value=0, max_value=60)


def native_ladder() -> type[NativeLadder]:
    from arenad.core._ladder import Ladder

    return Ladder


def test_the_c_ladder_is_built_where_it_can_be() -> None:
    """scripts/test installs a C compiler; with it and Python's headers the build must not have
    silently fallen back to Python (setup.py marks the extension optional)."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") and headers.exists():
        assert ladder_module.NATIVE, "arenad.core._ladder was not built: run ./scripts/bootstrap"
        assert ladder_module.Ladder is native_ladder()


def state(lad: PyLadder | NativeLadder) -> tuple[list[tuple[float, int]], list[int]]:
    return list(lad.entries()), list(lad)


@settings(max_examples=300, deadline=None)
@given(
    initial=st.dictionaries(ids, keys, max_size=80),
    ops=st.lists(st.tuples(st.sampled_from(["add", "remove", "move", "move_near"]), keys, ids), max_size=400),
    load=st.integers(min_value=1, max_value=12),
    probes=st.lists(keys, max_size=6),
)
def test_same_operations_same_answers(
    initial: dict[int, float], ops: list[tuple[str, float, int]], load: int, probes: list[float]
) -> None:
    c_cls = native_ladder()
    entries = [(k, i) for i, k in initial.items()]
    py = PyLadder(entries, load=load)
    c = c_cls(entries, load=load)
    by_id = dict(initial)
    for op, key, pid in ops:
        if op == "add" and pid not in by_id:
            py.add(key, pid)
            c.add(key, pid)
            by_id[pid] = key
        elif op == "remove" and pid in by_id:
            old = by_id.pop(pid)
            py.remove(old, pid)
            c.remove(old, pid)
        elif op.startswith("move") and pid in by_id:
            old = by_id[pid]
            new = old + (key % 7.0 - 3.5) if op == "move_near" else key  # mostly in-block moves
            py.move(old, new, pid)
            c.move(old, new, pid)
            by_id[pid] = new
        assert len(c) == len(py)
    assert state(c) == state(py)
    assert bool(c) == bool(py)
    for probe in [*probes, *list(by_id.values())[:5]]:
        assert c.count_below(probe) == py.count_below(probe)
        assert c.count_at_most(probe) == py.count_at_most(probe)
    batch = [*probes, *by_id.values()]
    assert c.ranks(batch) == py.ranks(batch) == [py.count_below(k) + 1 for k in batch]
    assert c.ranks(tuple(batch)) == c.ranks(batch)
    # With each key's id: counted at first, then (the ladder unchanged) from the rank column.
    known_ids = np.array(list(by_id), dtype=np.int64)
    known_keys = list(by_id.values())
    expected = py.ranks(known_keys)
    for _ in range(3):
        assert c.ranks(known_keys, known_ids) == expected
    for pid, key in list(by_id.items())[:10]:
        assert c.index(key, pid) == py.index(key, pid)
    n = len(py)
    spans = [
        (0, n),
        (0, 3),
        (n // 2, n // 2 + 5),
        (n - 2, n + 10),
        (-4, 2),
        (n + 1, n + 5),
        (10**30, 10**30 + 10),
    ]
    for start, stop in spans:
        assert list(c.islice(start, stop)) == list(py.islice(start, stop))
    if n:
        assert c.first() == py.first() and c.last() == py.last()


def test_errors_match() -> None:
    c_cls = native_ladder()
    for cls in (PyLadder, c_cls):
        lad = cls([(1.0, 1), (2.0, 2)], load=2)
        with pytest.raises(KeyError):
            lad.move(1.5, 3.0, 1)
        with pytest.raises(KeyError):
            lad.remove(2.0, 9)
        with pytest.raises(IndexError):
            cls().first()
    with pytest.raises(OverflowError):
        c_cls().add(1.0, 1 << 32)


def test_a_million_entries_in_random_moves_stay_identical() -> None:
    """The engine's scale: 100,000 players, 200,000 moves of random size."""
    import random

    rng = random.Random(7)
    entries = [(-rng.gauss(1000.0, 200.0), i) for i in range(100_000)]
    py = PyLadder(entries)
    c = native_ladder()(entries)
    key = {i: k for k, i in entries}
    for _ in range(200_000):
        i = rng.randrange(100_000)
        new = key[i] + rng.uniform(-40.0, 40.0)
        py.move(key[i], new, i)
        c.move(key[i], new, i)
        key[i] = new
    assert state(c) == state(py)
    assert [c.count_below(k) for k in (-1500.0, -1000.0, -500.0)] == [
        py.count_below(k) for k in (-1500.0, -1000.0, -500.0)
    ]


def test_ranks_refuses_what_is_not_a_list_of_floats() -> None:
    c = native_ladder()([(1.0, 1), (2.0, 2)])
    assert c.ranks([]) == []
    assert c.ranks([0.5, 1.0, 1.5, 9.0]) == [1, 1, 2, 3]
    with pytest.raises(TypeError):
        c.ranks(3.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        c.ranks([1.0, "x"])  # type: ignore[list-item]


@settings(max_examples=200, deadline=None)
@given(
    initial=st.dictionaries(
        ids, st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.5]) | keys, min_size=1, max_size=80
    ),
    rounds=st.lists(st.tuples(ids, keys, st.integers(min_value=0, max_value=4)), max_size=30),
)
def test_the_rank_column_answers_as_counting_does(
    initial: dict[int, float], rounds: list[tuple[int, float, int]]
) -> None:
    """Ties included (few distinct keys): between changes the ranks asked with ids are those
    counted without them, however often the column is built, dropped by a change and rebuilt."""
    c = native_ladder()([(k, i) for i, k in initial.items()], load=4)
    by_id = dict(initial)
    for pid, key, asks in rounds:
        if pid in by_id:
            c.move(by_id[pid], key, pid)
        else:
            c.add(key, pid)
        by_id[pid] = key
        order = sorted(by_id)
        idx = np.array(order, dtype=np.int64)
        batch = [by_id[i] for i in order]
        counted = c.ranks(batch)
        assert counted == [sum(1 for v in by_id.values() if v < by_id[i]) + 1 for i in order]
        for _ in range(asks):
            assert c.ranks(batch, idx) == counted


def test_the_rank_column_is_used_only_while_the_ladder_is_unchanged() -> None:
    """White-box: ``ids`` must name each key's entry, since the column answers by id. A key that
    is not its id's (the one way to tell the column from counting) shows when it is in use."""
    c = native_ladder()([(float(k), k) for k in range(100)], load=8)
    ids_ = np.array([5], dtype=np.int64)
    assert c.ranks([50.0], ids_) == [51]  # counted: 100 // 32 = 3 ranks must be counted first
    assert c.ranks([50.0], ids_) == [51]
    assert c.ranks([50.0], ids_) == [51]
    assert c.ranks([50.0], ids_) == [6]  # built: id 5's own rank
    assert c.ranks([50.0]) == [51]  # without ids, always counted
    c.move(5.0, 5.5, 5)  # a change drops the column
    assert c.ranks([50.0], ids_) == [51]
    absent = np.array([1000], dtype=np.int64)  # an id not in the ladder is counted, even after a build
    for _ in range(5):
        assert c.ranks([50.0], absent) == [51]


def test_ranks_refuses_ids_that_are_not_int64_or_do_not_match() -> None:
    c = native_ladder()([(1.0, 1), (2.0, 2)])
    with pytest.raises(TypeError):
        c.ranks([1.0], np.array([1], dtype=np.int32))
    with pytest.raises(TypeError):
        c.ranks([1.0], [1])
    with pytest.raises(ValueError):
        c.ranks([1.0, 2.0], np.array([1], dtype=np.int64))
    assert c.ranks([1.0], None) == [1]


@settings(max_examples=200, deadline=None)
@given(
    entries=st.dictionaries(ids, st.sampled_from([-2.0, -0.0, 0.0, 1.0]) | keys, max_size=120),
    load=st.integers(min_value=1, max_value=12),
    ops=st.lists(st.tuples(st.sampled_from(["add", "move"]), keys, ids), max_size=40),
)
def test_from_sorted_builds_what_the_constructor_builds(
    entries: dict[int, float], load: int, ops: list[tuple[str, float, int]]
) -> None:
    """Ladder.from_sorted (the engine's rebuild from its ratings, in order already) against the
    constructor that sorts (key, id) tuples, C and Python alike, and every later operation too."""
    pairs = sorted((k, i) for i, k in entries.items())
    k_col = np.array([k for k, _ in pairs], dtype=np.float64)
    i_col = np.array([i for _, i in pairs], dtype=np.int64)
    built = [cls.from_sorted(k_col, i_col, load=load) for cls in (PyLadder, native_ladder())]
    sorted_by_init = [cls(pairs, load=load) for cls in (PyLadder, native_ladder())]
    for lad in built:
        assert state(lad) == state(sorted_by_init[0])
        assert [np.signbit(k) for k, _ in lad.entries()] == [np.signbit(k) for k, _ in pairs]  # -0.0 kept
    key = {i: k for k, i in pairs}  # each entry's key, by id
    every = [*built, *sorted_by_init]
    for op, k, i in ops:
        if op == "add" and i + 1000 not in key:  # a newcomer
            for lad in every:
                lad.add(k, i + 1000)
            key[i + 1000] = k
        elif op == "move" and i in key:
            for lad in every:
                lad.move(key[i], k, i)
            key[i] = k
        assert all(state(lad) == state(built[0]) for lad in every)
        if key:
            probe = sorted(key.values())[len(key) // 2]
            assert len({lad.count_below(probe) for lad in every}) == 1


def test_from_sorted_refuses_what_is_not_in_order() -> None:
    """The order is checked, not trusted: a swapped pair, a repeated entry, a NaN key anywhere,
    an id outside 32 bits, columns of other lengths, shapes, layouts or types, or a load out of
    range are refused, by the C ladder and the Python one with the same error."""
    ok_k = np.array([-3.0, -1.0, -1.0, 2.0])
    ok_i = np.array([5, 1, 4, 0], dtype=np.int64)
    bad: list[tuple[object, object, int, type[Exception]]] = [
        (np.array([-1.0, -3.0]), np.array([1, 2], dtype=np.int64), 9, ValueError),  # keys swapped
        (np.array([-1.0, -1.0]), np.array([4, 1], dtype=np.int64), 9, ValueError),  # ids swapped
        (np.array([-0.0, 0.0]), np.array([5, 3], dtype=np.int64), 9, ValueError),  # -0.0 == 0.0
        (np.array([-1.0, -1.0]), np.array([4, 4], dtype=np.int64), 9, ValueError),  # one entry twice
        (np.array([np.nan]), np.array([1], dtype=np.int64), 9, ValueError),
        (np.array([-1.0, np.nan, 2.0]), np.array([1, 2, 3], dtype=np.int64), 9, ValueError),
        (np.array([-1.0]), np.array([1 << 32], dtype=np.int64), 9, OverflowError),
        (np.array([-1.0]), np.array([-1], dtype=np.int64), 9, OverflowError),
        (np.array([-1.0, 2.0]), np.array([1], dtype=np.int64), 9, ValueError),
        (ok_k.astype(np.float32), ok_i, 9, TypeError),
        (ok_k, ok_i.astype(np.int32), 9, TypeError),
        (ok_k, ok_i.astype(np.uint64), 9, TypeError),
        (ok_k.tolist(), ok_i, 9, TypeError),  # no buffer
        (ok_k.reshape(2, 2), ok_i.reshape(2, 2), 9, ValueError),
        (np.array(1.0), np.array(1, dtype=np.int64), 9, ValueError),  # 0-d
        (np.arange(8.0)[::2], ok_i, 9, ValueError),  # not contiguous
        (ok_k, ok_i, 0, ValueError),
        (ok_k, ok_i, (2**62 + 2) // 3, ValueError),  # a block's capacity would overflow
    ]
    for cls in (PyLadder, native_ladder()):
        assert list(cls.from_sorted(ok_k, ok_i)) == [5, 1, 4, 0]
        assert list(cls.from_sorted(array("d", ok_k.tolist()), array("q", ok_i.tolist()))) == [5, 1, 4, 0]
        assert len(cls.from_sorted(np.array([]), np.array([], dtype=np.int64))) == 0
        for k_col, i_col, load, error in bad:
            with pytest.raises(error):
                cls.from_sorted(k_col, i_col, load=load)
        with pytest.raises(ValueError):
            cls([(1.0, 1)], load=(2**62 + 2) // 3)
