"""The ladder index against a plain sorted-list model."""

from __future__ import annotations

from bisect import bisect_left

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenad.core.ladder import Ladder

keys = st.integers(min_value=-(2**62), max_value=2**62)


class TestLadderModel:
    """Every operation agrees with a sorted Python list, across block splits and merges."""

    @settings(max_examples=150, deadline=None)
    @given(
        initial=st.sets(keys, max_size=60),
        ops=st.lists(st.tuples(st.sampled_from(["add", "remove", "move"]), keys, keys), max_size=300),
        load=st.integers(min_value=2, max_value=16),
    )
    def test_operations_match_sorted_list(
        self, initial: set[int], ops: list[tuple[str, int, int]], load: int
    ) -> None:
        ladder = Ladder(initial, load=load)
        model = sorted(initial)
        for op, x, y in ops:
            if op == "add" and x not in model:
                ladder.add(x)
                model.insert(bisect_left(model, x), x)
            elif op in ("remove", "move") and model:
                old = model[abs(x) % len(model)]
                if op == "remove":
                    ladder.remove(old)
                    model.remove(old)
                elif y not in model:
                    ladder.move(old, y)
                    model.remove(old)
                    model.insert(bisect_left(model, y), y)
            assert list(ladder) == model
            assert len(ladder) == len(model)
        for probe in [*model[:5], 0, 2**61]:
            assert ladder.bisect_left(probe) == bisect_left(model, probe)
        for pos, key in enumerate(model):
            assert ladder.index(key) == pos
            assert ladder[pos] == key
        assert list(ladder.islice(3, 11)) == model[3:11]

    def test_positions_stay_right_after_the_index_is_built(self) -> None:
        """Rank queries between updates see every update (the Fenwick tree is maintained)."""
        ladder = Ladder(range(0, 2000, 2), load=8)
        model = list(range(0, 2000, 2))
        assert ladder.index(1000) == 500  # builds the position index
        for k in range(1, 400, 2):
            ladder.add(k)
            model.insert(bisect_left(model, k), k)
            assert ladder.index(k) == model.index(k)
        for k in range(0, 300, 4):
            ladder.remove(k)
            model.remove(k)
        assert [ladder.index(k) for k in model[::37]] == [model.index(k) for k in model[::37]]
        assert list(ladder.islice(100, 130)) == model[100:130]


class TestLadderErrors:
    """Missing keys are errors, not silent corruption."""

    def test_remove_missing_key_raises(self) -> None:
        ladder = Ladder([1, 2, 3])
        with pytest.raises(KeyError):
            ladder.remove(7)
        assert list(ladder) == [1, 2, 3]

    def test_move_missing_key_raises(self) -> None:
        ladder = Ladder([1, 2, 3])
        with pytest.raises(KeyError):
            ladder.move(5, 9)
        assert list(ladder) == [1, 2, 3]

    def test_index_out_of_range(self) -> None:
        with pytest.raises(IndexError):
            Ladder([1])[1]
        assert Ladder([4, 5])[-1] == 5
