"""The ladder index against a plain sorted-list model."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.ladder import Ladder

# Few distinct keys, so exact ties (equal ratings) are common and cross block boundaries.
keys = st.sampled_from([-3.5, -1.0, 0.0, 0.25, 1.0, 2.0, 1e9]) | st.floats(-1e6, 1e6)
ids = st.integers(min_value=0, max_value=50)


class TestLadderModel:
    """Every operation agrees with a sorted list of (key, id) pairs, across splits and merges."""

    @settings(max_examples=200, deadline=None)
    @given(
        initial=st.sets(st.tuples(keys, ids), max_size=60),
        ops=st.lists(st.tuples(st.sampled_from(["add", "remove", "move"]), keys, ids), max_size=300),
        load=st.integers(min_value=2, max_value=16),
    )
    def test_operations_match_sorted_list(
        self, initial: set[tuple[float, int]], ops: list[tuple[str, float, int]], load: int
    ) -> None:
        # One entry per id, as in the engine.
        by_id = {pid: key for key, pid in initial}
        ladder = Ladder(((k, i) for i, k in by_id.items()), load=load)
        model = sorted((k, i) for i, k in by_id.items())
        for op, key, pid in ops:
            if op == "add" and pid not in by_id:
                ladder.add(key, pid)
                by_id[pid] = key
                model.insert(bisect_left(model, (key, pid)), (key, pid))
            elif op == "remove" and pid in by_id:
                key_now = by_id.pop(pid)
                ladder.remove(key_now, pid)
                model.remove((key_now, pid))
            elif op == "move" and pid in by_id:
                ladder.move(by_id[pid], key, pid)
                model.remove((by_id[pid], pid))
                by_id[pid] = key
                model.insert(bisect_left(model, (key, pid)), (key, pid))
            assert list(ladder.entries()) == model
            assert list(ladder) == [i for _, i in model]
            assert len(ladder) == len(model)
        model_keys = [k for k, _ in model]
        for probe in [*model_keys[:5], 0.0, 2e9, -2e9]:
            assert ladder.count_below(probe) == bisect_left(model_keys, probe)
            assert ladder.count_at_most(probe) == bisect_right(model_keys, probe)
        probes = [*model_keys, 0.0, 2e9, -2e9]
        assert ladder.ranks(probes) == [bisect_left(model_keys, p) + 1 for p in probes]
        for pos, (key, pid) in enumerate(model):
            assert ladder.index(key, pid) == pos
        assert list(ladder.islice(3, 11)) == [i for _, i in model[3:11]]
        if model:
            assert ladder.first() == model[0]
            assert ladder.last() == model[-1]

    def test_positions_stay_right_after_the_index_is_built(self) -> None:
        """Rank queries between updates see every update (the Fenwick tree is maintained)."""
        ladder = Ladder(((float(k), k) for k in range(0, 2000, 2)), load=8)
        model = [(float(k), k) for k in range(0, 2000, 2)]
        assert ladder.index(1000.0, 1000) == 500  # builds the position index
        for k in range(1, 400, 2):
            ladder.add(float(k), k)
            model.insert(bisect_left(model, (float(k), k)), (float(k), k))
            assert ladder.index(float(k), k) == model.index((float(k), k))
        for k in range(0, 300, 4):
            ladder.remove(float(k), k)
            model.remove((float(k), k))
        assert [ladder.index(*e) for e in model[::37]] == [model.index(e) for e in model[::37]]
        assert list(ladder.islice(100, 130)) == [i for _, i in model[100:130]]

    def test_equal_keys_are_ordered_by_id(self) -> None:
        ladder = Ladder(load=2)
        for pid in (5, 1, 9, 3, 7):
            ladder.add(0.0, pid)
        assert list(ladder) == [1, 3, 5, 7, 9]
        ladder.move(0.0, -1.0, 9)
        assert list(ladder) == [9, 1, 3, 5, 7]


class TestLadderErrors:
    """Missing entries are errors, not silent corruption."""

    def test_remove_missing_entry_raises(self) -> None:
        ladder = Ladder([(1.0, 1), (2.0, 2)])
        with pytest.raises(KeyError):
            ladder.remove(1.0, 2)
        assert list(ladder.entries()) == [(1.0, 1), (2.0, 2)]

    def test_move_missing_entry_raises(self) -> None:
        ladder = Ladder([(1.0, 1)])
        with pytest.raises(KeyError):
            ladder.move(5.0, 9.0, 1)
        with pytest.raises(KeyError):
            Ladder().move(1.0, 2.0, 1)
        assert list(ladder.entries()) == [(1.0, 1)]

    def test_empty_ladder_ends(self) -> None:
        with pytest.raises(IndexError):
            Ladder().first()
        with pytest.raises(IndexError):
            Ladder().last()


class TestLongTies:
    """Thousands of equal ratings (every newcomer-vs-newcomer first kill) stay exact."""

    def test_long_tie_runs_across_blocks(self) -> None:
        ladder = Ladder(load=16)
        model: list[tuple[float, int]] = []
        for pid in range(0, 3000, 3):
            for key in (-1017.5, -985.9):
                entry = (key, pid + (0 if key < -1000 else 1))
                ladder.add(*entry)
                model.insert(bisect_left(model, entry), entry)
        assert list(ladder.entries()) == model
        # Move members out of the middle of both runs and back in.
        for pid in range(1500, 1600, 3):
            ladder.move(-1017.5, -2000.0 + pid, pid)
            model.remove((-1017.5, pid))
            model.insert(bisect_left(model, (-2000.0 + pid, pid)), (-2000.0 + pid, pid))
        assert list(ladder.entries()) == model
        assert ladder.index(-985.9, 2998) == model.index((-985.9, 2998))
        assert ladder.count_below(-985.9) == bisect_left([k for k, _ in model], -985.9)
