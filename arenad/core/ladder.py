"""The ladder index: every tracked player in rating order, for O(log P) rank, top-N and percentile.

The same design as ``sortedcontainers.SortedList`` (a list of sorted blocks of about ``load``
keys, with a sorted list of block maxima on top), with two changes that matter for arenad's hot
path, measured in bench/README.md:

* Blocks are ``array('q')`` of int64 keys instead of lists of Python ints. A re-key touches two
  random players among up to millions; with boxed ints every comparison of the binary search is a
  cache miss on a scattered heap object, with packed arrays it reads one contiguous block.
* ``move(old, new)`` re-keys in place when the new key stays in the same block, which is the
  common case because one kill moves a rating by at most Δmax (§8.4).

Positions (rank) come from a Fenwick tree over block lengths, built lazily on the first positional
query and kept up to date afterwards, so rank is O(log P) and an event costs O(log P) too.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator


class Ladder:
    """Sorted, unique int64 keys; ascending key order is the ladder order (best first)."""

    __slots__ = ("_blocks", "_fenwick", "_len", "_load", "_maxes")

    def __init__(self, keys: Iterable[int] = (), load: int = 1000) -> None:
        self._load = load
        self._blocks: list[array[int]] = []
        self._maxes: list[int] = []
        self._len = 0
        self._fenwick: list[int] | None = None
        ordered = sorted(keys)
        for start in range(0, len(ordered), load):
            block = array("q", ordered[start : start + load])
            self._blocks.append(block)
            self._maxes.append(block[-1])
        self._len = len(ordered)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[int]:
        for block in self._blocks:
            yield from block

    # -------------------------------------------------------------- updates
    def add(self, key: int) -> None:
        maxes = self._maxes
        if not maxes:
            self._blocks.append(array("q", (key,)))
            maxes.append(key)
            self._len = 1
            self._fenwick = None
            return
        pos = bisect_right(maxes, key)
        if pos == len(maxes):
            pos -= 1
            block = self._blocks[pos]
            block.append(key)
            maxes[pos] = key
        else:
            block = self._blocks[pos]
            block.insert(bisect_right(block, key), key)
        self._len += 1
        if len(block) > 2 * self._load:
            half = len(block) >> 1
            self._blocks.insert(pos + 1, block[half:])
            del block[half:]
            maxes.insert(pos, block[-1])
            self._fenwick = None
        elif self._fenwick is not None:
            self._fenwick_add(pos, 1)

    def remove(self, key: int) -> None:
        pos, idx = self._locate(key)
        self._delete(pos, idx)

    def move(self, old: int, new: int) -> None:
        """Replace ``old`` (which must be present) by ``new``."""
        maxes = self._maxes
        blocks = self._blocks
        pos = bisect_left(maxes, old)
        if pos == len(maxes):
            raise KeyError(old)
        block = blocks[pos]
        idx = bisect_left(block, old)
        if idx == len(block) or block[idx] != old:
            raise KeyError(old)
        if (pos == 0 or new > maxes[pos - 1]) and (pos == len(maxes) - 1 or new < blocks[pos + 1][0]):
            # Same block: no length changes, so maxima aside nothing else needs updating.
            if (idx == 0 or block[idx - 1] < new) and (idx == len(block) - 1 or new < block[idx + 1]):
                block[idx] = new
            else:
                del block[idx]
                block.insert(bisect_left(block, new), new)
            maxes[pos] = block[-1]
        else:
            self._delete(pos, idx)
            self.add(new)

    def _locate(self, key: int) -> tuple[int, int]:
        pos = bisect_left(self._maxes, key)
        if pos == len(self._maxes):
            raise KeyError(key)
        block = self._blocks[pos]
        idx = bisect_left(block, key)
        if idx == len(block) or block[idx] != key:
            raise KeyError(key)
        return pos, idx

    def _delete(self, pos: int, idx: int) -> None:
        blocks = self._blocks
        maxes = self._maxes
        block = blocks[pos]
        del block[idx]
        self._len -= 1
        if len(block) > self._load >> 1:
            maxes[pos] = block[-1]
            if self._fenwick is not None:
                self._fenwick_add(pos, -1)
            return
        # A small block merges into a neighbour (or disappears when empty).
        self._fenwick = None
        if len(blocks) == 1:
            if block:
                maxes[0] = block[-1]
            else:
                del blocks[0]
                del maxes[0]
            return
        if pos == 0:
            pos = 1
        prev = blocks[pos - 1]
        prev.extend(blocks[pos])
        del blocks[pos]
        del maxes[pos]
        maxes[pos - 1] = prev[-1]
        if len(prev) > 2 * self._load:
            half = len(prev) >> 1
            blocks.insert(pos, prev[half:])
            del prev[half:]
            maxes.insert(pos - 1, prev[-1])

    # -------------------------------------------------------------- positions
    def _fenwick_build(self) -> list[int]:
        tree = [0] * (len(self._blocks) + 1)
        for i, block in enumerate(self._blocks, start=1):
            tree[i] += len(block)
            parent = i + (i & -i)
            if parent < len(tree):
                tree[parent] += tree[i]
        self._fenwick = tree
        return tree

    def _fenwick_add(self, pos: int, delta: int) -> None:
        tree = self._fenwick
        assert tree is not None
        i = pos + 1
        n = len(tree)
        while i < n:
            tree[i] += delta
            i += i & -i

    def _before_block(self, pos: int) -> int:
        """Number of keys in blocks 0..pos-1."""
        tree = self._fenwick if self._fenwick is not None else self._fenwick_build()
        total = 0
        i = pos
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    def bisect_left(self, key: int) -> int:
        """Number of keys strictly less than ``key``."""
        if not self._maxes:
            return 0
        pos = bisect_left(self._maxes, key)
        if pos == len(self._maxes):
            return self._len
        return self._before_block(pos) + bisect_left(self._blocks[pos], key)

    def index(self, key: int) -> int:
        pos, idx = self._locate(key)
        return self._before_block(pos) + idx

    def islice(self, start: int, stop: int) -> Iterator[int]:
        """Keys at positions start..stop-1 (clamped to the ladder)."""
        start = max(0, start)
        stop = min(stop, self._len)
        if start >= stop:
            return
        # Find the block holding position `start` by walking the Fenwick tree downwards.
        tree = self._fenwick if self._fenwick is not None else self._fenwick_build()
        pos = 0
        remaining = start
        step = 1 << (len(tree) - 1).bit_length()
        while step:
            nxt = pos + step
            if nxt < len(tree) and tree[nxt] <= remaining:
                pos = nxt
                remaining -= tree[nxt]
            step >>= 1
        count = stop - start
        blocks = self._blocks
        while count > 0 and pos < len(blocks):
            block = blocks[pos]
            chunk = block[remaining : remaining + count]
            yield from chunk
            count -= len(chunk)
            remaining = 0
            pos += 1

    def __getitem__(self, position: int) -> int:
        if position < 0:
            position += self._len
        if not 0 <= position < self._len:
            raise IndexError(position)
        return next(self.islice(position, position + 1))
